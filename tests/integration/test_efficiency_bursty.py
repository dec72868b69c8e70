"""A bursty but healthy job gets no finding through the real operator, a real Prometheus and real steps.

The job's simulated GPUs play `bursty` (busy for 20 s, nearly idle for 20 s), so its mean
utilization is under the threshold it asks for while only half of its samples are: not sustained.
Its steps are the shared fixture's trainer, which waits on input, so the one rule that could fire
is InputBound, and only if "sustained" meant "on average".
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.conftest import Cluster, Operator
from tests.integration.test_efficiency import start_running, status_of
from tests.support.prometheus import AVAILABLE, Prometheus
from tests.support.telemetry import input_bound_job
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(not AVAILABLE, reason="needs prometheus (make system-deps)"),
]

# Over a burst and a half of history in the window; Prometheus holds the 80 % a window needs
# to count (Sustain.min_coverage) before the operator starts, so every cycle judges the job.
WINDOW_SECONDS = 32
THRESHOLD = 60  # percent: the job's mean utilization (about 50 %) is under it


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    tmp = tmp_path_factory.mktemp("bursty")
    settle = 0.8 * WINDOW_SECONDS + 2
    with input_bound_job(
        tmp, namespace="default", trainingjob="bert", pod="bert-0-abcde", scenario="bursty", settle=settle
    ) as server:
        yield server


@pytest.fixture
def operator_args(prometheus: Prometheus) -> list[str]:
    return [f"--prometheus-url={prometheus.url}", "--evaluate-seconds=1", "--query-step-seconds=1"]


def test_a_bursty_but_healthy_job_gets_no_finding(cluster: Cluster, operator: Operator) -> None:
    start_running(cluster, window=f"{WINDOW_SECONDS}s", thresholds={"gpuUtilization": THRESHOLD})

    def summary() -> dict[str, Any] | None:
        efficiency: dict[str, Any] = status_of(cluster).get("efficiency") or {}
        return efficiency if efficiency.get("gpuUtilization") is not None else None

    efficiency = eventually(summary, timeout=30, what="the efficiency summary")
    assert efficiency["gpuUtilization"] < THRESHOLD, "under the threshold on average: a mean would call it underused"
    assert efficiency["dataWaitFraction"] > 0.5, "and waiting for input: InputBound hinges on 'sustained' alone"
    deadline = time.monotonic() + 5  # several cycles, across a burst's edge
    while time.monotonic() < deadline:
        assert status_of(cluster).get("findings") in (None, []), status_of(cluster)["findings"]
        time.sleep(0.5)
    assert "topFinding" not in status_of(cluster)["efficiency"]
    warnings = [e for e in cluster.list("v1", "Event") if e.get("type") == "Warning"]
    assert warnings == [], [(e.get("reason"), e.get("message")) for e in warnings]
