"""A rule added after the loop was built reaches status and Events through the same path.

The job's simulated GPUs play `throttled` (thermal slowdown holds their clocks down, as the
clock-event reasons say); the real operator reads that from a real Prometheus.
"""

from __future__ import annotations

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


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    tmp = tmp_path_factory.mktemp("throttled")
    with input_bound_job(tmp, namespace="default", trainingjob="bert", pod="bert-0-abcde", scenario="throttled") as p:
        yield p


@pytest.fixture
def operator_args(prometheus: Prometheus) -> list[str]:
    return [f"--prometheus-url={prometheus.url}", "--evaluate-seconds=1", "--query-step-seconds=1"]


def test_a_throttled_worker_reaches_status_and_events(cluster: Cluster, operator: Operator) -> None:
    start_running(cluster)

    def throttled() -> dict[str, Any] | None:
        status = status_of(cluster)
        return status if any(f["kind"] == "Throttling" for f in status.get("findings") or []) else None

    status = eventually(throttled, timeout=45, what="a Throttling finding in status")
    (finding,) = [f for f in status["findings"] if f["kind"] == "Throttling"]
    assert finding["worker"] == 0
    assert finding["evidence"]["reasons"] == "software thermal slowdown, hardware thermal slowdown"
    (recommendation,) = [r for r in status["recommendations"] if r["finding"] == "Throttling"]
    assert recommendation["action"] == "Reschedule"
    events = eventually(
        lambda: [e for e in cluster.list("v1", "Event") if e.get("reason") == "Throttling"], what="an Event"
    )
    assert events[0]["type"] == "Warning"
