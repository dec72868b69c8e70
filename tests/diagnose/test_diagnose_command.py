"""`gpuwise diagnose` as a user runs it: a subprocess against a real Prometheus with a real job in it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sidecar.support import ROOT
from tests.support.prometheus import AVAILABLE
from tests.support.telemetry import input_bound_job
from tests.support.waiting import free_port

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(not AVAILABLE, reason="needs prometheus (make system-deps)"),
]
# The test job has seconds of history, not minutes: judge it over a window it can fill.
SHORT = ("--window", "8s", "--step", "1s")


def gpuwise(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "gpuwise.cli", "diagnose", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with input_bound_job(
        tmp_path_factory.mktemp("cli"), namespace="ml", trainingjob="bert", pod="bert-0-abcde", settle=9.0
    ) as server:
        yield server.url


def test_one_job_as_json_names_the_cause(url: str) -> None:
    done = gpuwise("--prometheus-url", url, "-n", "ml", "bert", *SHORT, "--json")
    assert done.returncode == 0, done.stderr
    (job,) = json.loads(done.stdout)
    assert (job["namespace"], job["trainingjob"]) == ("ml", "bert")
    assert 0.6 <= job["efficiency"]["dataWaitFraction"] <= 0.85
    assert 0 <= job["efficiency"]["gpuUtilization"] <= 100
    assert job["efficiency"]["topFinding"] == "InputBound"
    kinds = [finding["kind"] for finding in job["findings"]]
    assert "InputBound" in kinds
    (recommendation,) = [r for r in job["recommendations"] if r["finding"] == "InputBound"]
    assert recommendation["message"] and not recommendation.get("changes"), "no tunables known: no env changes"


def test_a_throttled_job_is_named_from_its_clock_event_reasons(tmp_path: Path) -> None:
    with input_bound_job(
        tmp_path, namespace="ml", trainingjob="hot", pod="hot-0-abcde", scenario="throttled"
    ) as server:
        done = gpuwise("--prometheus-url", server.url, "-n", "ml", "hot", *SHORT, "--json")
    assert done.returncode == 0, done.stderr
    (job,) = json.loads(done.stdout)
    (finding,) = [f for f in job["findings"] if f["kind"] == "Throttling"]
    assert finding["worker"] == 0
    assert finding["evidence"]["reasons"] == "software thermal slowdown, hardware thermal slowdown"
    assert {"action": "Reschedule", "finding": "Throttling"}.items() <= next(
        r for r in job["recommendations"] if r["finding"] == "Throttling"
    ).items()


def test_every_job_as_a_table_then_the_findings(url: str) -> None:
    done = gpuwise("--prometheus-url", url, *SHORT)
    assert done.returncode == 0, done.stderr
    header, row, *rest = done.stdout.splitlines()
    assert header.split() == ["JOB", "GPUS", "GPU", "UTIL", "DATA", "WAIT", "TOP", "FINDING"]
    assert row.split()[:2] == ["ml/bert", "2"] and row.split()[-1] == "InputBound"
    text = "\n".join(rest)
    assert "ml/bert: InputBound (confidence" in text
    assert "of step time is spent waiting for input" in text
    assert "→ " in text
    assert text.endswith("the CLI does not see spec.efficiency.tunables (see --help).")


def test_an_unknown_job_is_a_usage_error_that_lists_the_known_ones(url: str) -> None:
    done = gpuwise("--prometheus-url", url, "-n", "ml", "gpt", *SHORT)
    assert done.returncode == 2
    assert "no TrainingJob 'gpt' in namespace 'ml'" in done.stderr and "bert" in done.stderr
    assert done.stdout == ""
    other = gpuwise("--prometheus-url", url, "-n", "vision", *SHORT)
    assert other.returncode == 2 and "namespaces with jobs: ml" in other.stderr


def test_an_unreachable_prometheus_says_what_to_check() -> None:
    done = gpuwise("--prometheus-url", f"http://127.0.0.1:{free_port()}", "bert")
    assert done.returncode == 2
    assert "cannot reach" in done.stderr and "--prometheus-url" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--prometheus-url", "prometheus:9090"), "not an http(s) URL"),
        (("--prometheus-url", "http://127.0.0.1:9", "--window", "15 minutes"), "is not a duration"),
        (("--prometheus-url", "http://127.0.0.1:9", "--window", "1m", "--step", "5m"), "make the step shorter"),
        (("--prometheus-url", "http://127.0.0.1:9", "--window", "12h", "--step", "1s"), "raise --step"),
    ],
)
def test_bad_input_exits_2_with_the_fix(args: tuple[str, ...], message: str) -> None:
    done = gpuwise(*args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_help_says_what_the_cli_cannot_know() -> None:
    done = gpuwise("--help")
    assert done.returncode == 0
    assert "grace period" in done.stdout and "--prometheus-url" in done.stdout
