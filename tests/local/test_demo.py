"""`make demo` (examples/demo.py), shortened: the fixed input pipeline waits less, and the reports are written."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sidecar.support import ROOT, environment

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch (CPU build is enough)"),
]


def test_the_demo_shows_the_fix(short_tmp: Path) -> None:
    out = short_tmp / "demo"
    command = [sys.executable, str(ROOT / "examples" / "demo.py"), "--steps", "40", "--out", str(out)]
    result = subprocess.run(
        command, env=environment(), cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["after.html", "after.json", "before.html", "before.json"]
    before, after = (json.loads((out / f"{name}.json").read_text()) for name in ("before", "after"))
    assert before["steps"] == after["steps"] == 40
    # The second run is the first with exactly what gpuwise recommended, read from its report.
    (advice,) = [f for f in before["diagnosis"] if f["changes"]]
    assert advice["kind"] == "InputBound" and "GPU utilization was not measured" in advice["message"]
    assert before["setup"]["num_workers"] == 0
    assert after["setup"]["num_workers"] == int(advice["changes"]["num_workers"]) >= 1
    assert advice["changes"]["pin_memory"] == "1"  # applied; torch keeps it off where there is no GPU to pin for
    assert f"predicted {advice['expected_effect']}; measured" in " ".join(result.stdout.split())
    slow, fixed = before["breakdown"]["data_wait_ratio"], after["breakdown"]["data_wait_ratio"]
    assert slow > 0.4 and fixed < slow, (slow, fixed)
    for name in ("before", "after"):
        page = (out / f"{name}.html").read_text()
        assert page.startswith("<!doctype html>") and "waiting for input" in page
    assert "waiting for input" in result.stdout and f"reports: {out}/{{before,after}}.{{json,html}}" in result.stdout
