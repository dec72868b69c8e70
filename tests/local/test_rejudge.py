"""`gpuwise diagnose --report FILE`: a saved gpuwise run report, judged again, offline."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.local.test_local_run import gpuwise_run
from tests.sidecar.support import ROOT, environment

STARVED = textwrap.dedent(
    """
    import time
    from gpuwise import instrument
    for _ in range(150):  # 20 ms steps, 16 of them waiting for input
        with instrument.data_wait():
            time.sleep(0.016)
        time.sleep(0.004)
        instrument.step_end(samples=32)
    """
)


def diagnose(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "gpuwise.cli", "diagnose", *args]
    return subprocess.run(command, env=environment(), cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "run.json"
    result = gpuwise_run(
        "--simulate", "data-starved", "--interval", "0.2", "--report", str(path), "--", sys.executable, "-c", STARVED
    )
    assert result.returncode == 0, result.stderr
    return path


def test_a_saved_report_is_judged_as_the_run_judged_it(saved: Path) -> None:
    report = json.loads(saved.read_text())
    assert report["diagnosis"], "the run itself found something to re-judge"
    result = diagnose("--report", str(saved), "--json")
    assert result.returncode == 0, result.stderr
    (job,) = json.loads(result.stdout)
    assert [f["kind"] for f in job["findings"]] == [f["kind"] for f in report["diagnosis"]]
    assert {"kind", "message", "evidence", "confidence"} <= set(job["findings"][0])
    assert job["efficiency"]["dataWaitFraction"] == pytest.approx(report["breakdown"]["data_wait_ratio"], abs=0.1)
    table = diagnose("--report", str(saved))
    assert table.returncode == 0 and "InputBound" in table.stdout


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "cannot read"),
        ("not json at all", "not JSON"),
        ('{"format": 1, "steps": 3, "per_step": [{"t": 1.0', "not JSON"),  # cut short
        ('{"format": 7}', "format 7 report; this gpuwise reads format 1"),
        ('{"format": 1, "steps": 3}', "lacks wall_seconds, setup, gpus, per_step, trace"),
        ("[1, 2]", "not a gpuwise run JSON report"),
    ],
)
def test_what_is_not_a_whole_report_says_so_in_one_line(tmp_path: Path, content: str | None, says: str) -> None:
    path = tmp_path / "run.json"
    if content is not None:
        path.write_text(content)
    result = diagnose("--report", str(path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_report_too_short_to_judge_says_so(saved: Path, tmp_path: Path) -> None:
    report = json.loads(saved.read_text())
    report["per_step"] = report["per_step"][:8]
    short = tmp_path / "short.json"
    short.write_text(json.dumps(report))
    result = diagnose("--report", str(short), "--json")
    assert result.returncode == 0
    assert json.loads(result.stdout)[0]["findings"] == []
    assert "Too short to judge" in result.stderr
