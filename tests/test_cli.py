from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def test_the_operator_without_a_cluster_says_what_to_set_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(KUBECONFIG=str(tmp_path / "none"), HOME=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-m", "gpuwise.cli", "operator"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpuwise operator: no Kubernetes cluster to talk to") and "KUBECONFIG" in lines[0]
