"""`gpuwise run`: a command, instrumented, with an embedded sidecar, a summary and a report."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.sidecar.support import ROOT, environment


def gpuwise_run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "gpuwise.cli", "run", *args]
    return subprocess.run(command, env=environment(), cwd=cwd, capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch (CPU build is enough)")
def test_a_real_training_run_and_its_reports(short_tmp: Path) -> None:
    script = ROOT / "examples" / "train_slow_input.py"
    result = gpuwise_run(
        "--report", str(short_tmp / "run.json"), "--report", str(short_tmp / "run.html"),
        "--", sys.executable, str(script), "--steps", "12", "--load-ms", "2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "trained 12 steps" in result.stdout, "the command's own output passes through"
    report = json.loads((short_tmp / "run.json").read_text())
    assert report["steps"] == 12 and report["samples"] == 12 * 32
    assert [s["step"] for s in report["per_step"]] == list(range(1, 13))
    assert report["breakdown"]["data_wait_ratio"] > 0.5
    assert report["setup"] == {"num_workers": 0, "pin_memory": False, "batch_size": 32, "autocast": False}
    assert report["backend"]["name"] in {"none", "nvml"}
    assert "of step time waiting for input" in report["findings"][0]
    page = (short_tmp / "run.html").read_text()
    assert page.startswith("<!doctype html>") and "<svg" in page and "waiting for input" in page


def test_exit_code_and_a_run_without_steps(short_tmp: Path) -> None:
    result = gpuwise_run("--report", str(short_tmp / "r.json"), "--", sys.executable, "-c", "import sys; sys.exit(3)")
    assert result.returncode == 3
    report = json.loads((short_tmp / "r.json").read_text())
    assert (report["exit_code"], report["steps"]) == (3, 0)
    assert report["findings"][0].startswith("No training step was observed")


def test_simulated_gpus_and_prometheus_while_it_runs(short_tmp: Path) -> None:
    from tests.support.waiting import free_port

    port = free_port()
    child = textwrap.dedent(
        f"""
        import time, urllib.request
        from gpuwise import instrument
        for _ in range(60):  # 1.2 s of steps, half of each waiting for input
            with instrument.data_wait():
                time.sleep(0.01)
            time.sleep(0.01)
            instrument.step_end(samples=2)
        text = urllib.request.urlopen("http://127.0.0.1:{port}/metrics").read().decode()
        print("DCGM_FI_DEV_GPU_UTIL" in text, "gpuwise_steps_total" in text)
        """
    )
    result = gpuwise_run(
        "--simulate", "data-starved", "--gpus", "2", "--interval", "0.2", "--prometheus-port", str(port),
        "--report", str(short_tmp / "sim.json"), "--", sys.executable, "-c", child,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "True True" in result.stdout
    assert "simulated: 2 GPU(s) playing 'data-starved'" in result.stdout
    report = json.loads((short_tmp / "sim.json").read_text())
    assert report["steps"] == 60
    assert (report["backend"]["name"], report["backend"]["scenario"]) == ("simulated", "data-starved")
    assert {record["gpu"] for record in report["trace"]} == {0, 1}
    assert [gpu["gpu"] for gpu in report["gpus"]] == [0, 1]
    assert report["gpus"][0]["mean_util"] < 50
    assert 0.3 < report["breakdown"]["data_wait_ratio"] < 0.8
    # The efficiency engine, fed from the embedded sidecar, names the bottleneck.
    (finding,) = [d for d in report["diagnosis"] if d["kind"] == "InputBound"]
    assert "waiting for input while GPU utilization is" in finding["message"]
    assert finding["message"] in report["findings"]
    assert "Try: num_workers=1" in finding["recommendation"], "local tunables are the settings themselves"


def test_a_throttled_simulated_gpu_is_found_by_the_local_report(short_tmp: Path) -> None:
    child = "import time\nfrom gpuwise import instrument\n"
    child += "for _ in range(60):\n    time.sleep(0.02)\n    instrument.step_end()"
    result = gpuwise_run(
        "--simulate", "throttled", "--interval", "0.2", "--report", str(short_tmp / "hot.json"),
        "--", sys.executable, "-c", child,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads((short_tmp / "hot.json").read_text())
    (finding,) = [d for d in report["diagnosis"] if d["kind"] == "Throttling"]
    assert "software thermal slowdown, hardware thermal slowdown" in finding["message"]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ([], 2, "give the command to run after --"),
        (["--", "no-such-command-gpuwise"], 127, "cannot run 'no-such-command-gpuwise'"),
        (["--gpus", "0", "--", "true"], 2, "--gpus must be between 1 and 64"),
        (["--simulate", "warp-speed", "--", "true"], 2, "invalid choice: 'warp-speed'"),
    ],
)
def test_bad_usage_says_what_to_fix(args: list[str], code: int, message: str) -> None:
    result = gpuwise_run(*args)
    assert result.returncode == code
    assert message in result.stdout + result.stderr


def test_steps_are_timed_when_they_ended_even_when_reported_at_exit(short_tmp: Path) -> None:
    """A run whose last steps' totals leave only at exit, 3 s after training ended (DataLoader
    workers shutting down, say), still ran at its own pace: the report must not stretch it."""
    child = textwrap.dedent(
        """
        import time
        from gpuwise import instrument
        for _ in range(400):  # 1 ms steps: the last few are still owed when training ends
            time.sleep(0.001)
            instrument.step_end(samples=8)
        time.sleep(3.0)
        """
    )
    result = gpuwise_run("--report", str(short_tmp / "r.json"), "--", sys.executable, "-c", child)
    assert result.returncode == 0, result.stderr
    report = json.loads((short_tmp / "r.json").read_text())
    assert report["steps"] == 400
    assert report["per_step"][-1]["t"] < 2.5, "the last step is stamped when it ended, not at the exit"
    assert report["breakdown"]["steps_per_second"] > 200, report["breakdown"]
