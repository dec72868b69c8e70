from __future__ import annotations

import pytest

from gpuwise import cli


def test_usage_lists_every_verb(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    for verb in ("operator", "sidecar", "run", "crd", "simulate", "diagnose"):
        assert f"  {verb}" in out


def test_unknown_verb_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["frobnicate"]) == 2
    assert "unknown verb 'frobnicate'" in capsys.readouterr().err
