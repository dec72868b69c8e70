"""The efficiency loop end to end: the real operator reads a real Prometheus and writes status.

The job is input-bound for real (a process that waits 75 % of each step for data reports its
steps to a simulated-GPU sidecar); the operator must say so in the TrainingJob's status, with the
concrete change, and an Event.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.conftest import Cluster, Operator
from tests.integration.test_operator import TJ_API, job_of, manifest, play_kubelet
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
    tmp = tmp_path_factory.mktemp("efficiency")
    with input_bound_job(tmp, namespace="default", trainingjob="bert", pod="bert-0-abcde") as server:
        yield server


@pytest.fixture
def operator_args(prometheus: Prometheus) -> list[str]:
    # The test Prometheus scrapes every second: so is the query step.
    return [f"--prometheus-url={prometheus.url}", "--evaluate-seconds=1", "--query-step-seconds=1"]


def status_of(cluster: Cluster) -> dict[str, Any]:
    return (cluster.trainingjob("bert") or {}).get("status") or {}


def start_running(cluster: Cluster, **efficiency: Any) -> None:
    body = manifest(
        efficiency={
            "window": "8s",
            "tunables": {"dataLoaderWorkers": {"env": "NUM_WORKERS", "min": 1, "max": 16}},
            **efficiency,
        },
        telemetry={"sampleIntervalSeconds": 1},
    )
    body["spec"]["trainer"].update(numNodes=1, resourcesPerNode={"limits": {"cpu": "8", "nvidia.com/gpu": 2}})
    cluster.create(body)
    job = eventually(lambda: job_of(cluster, "bert"), what="the Job")
    an_hour_ago = (datetime.now(tz=UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster.patch("batch/v1", "Job", "bert", {"status": {"startTime": an_hour_ago, "active": 1}}, status=True)
    play_kubelet(cluster, job, 0, "Running", "gpu-node-a")
    eventually(lambda: status_of(cluster).get("phase") == "Running", what="phase Running")


def test_an_input_bound_job_gets_the_cause_and_the_change(cluster: Cluster, operator: Operator) -> None:
    start_running(cluster)
    status = eventually(lambda: (s := status_of(cluster)).get("findings") and s, timeout=45, what="a finding in status")
    finding = status["findings"][0]
    assert finding["kind"] == "InputBound"
    assert "of step time is spent waiting for input" in finding["message"]
    assert 0.6 <= float(finding["evidence"]["dataWaitFraction"]) <= 0.85
    (recommendation,) = status["recommendations"]
    assert recommendation["action"] == "AdjustConfig"
    assert recommendation["finding"] == "InputBound"
    assert 1 < int(recommendation["changes"]["NUM_WORKERS"]) <= 7, "bounded by 8 cores minus the trainer's"
    efficiency = status["efficiency"]
    assert efficiency["topFinding"] == "InputBound"
    assert 0.6 <= efficiency["dataWaitFraction"] <= 0.85
    assert 0 <= efficiency["gpuUtilization"] <= 100
    assert 0 < efficiency["memoryHeadroomFraction"] < 1
    events = eventually(
        lambda: [e for e in cluster.list("v1", "Event") if e.get("reason") == "InputBound"], what="an Event"
    )
    assert events[0]["type"] == "Warning"

    # Observe mode: metrics only, and the finding clears with an Event.
    cluster.patch(TJ_API, "TrainingJob", "bert", {"spec": {"efficiency": {"mode": "Observe"}}})
    cleared = eventually(
        lambda: (s := status_of(cluster)).get("findings") == [] and s, timeout=30, what="findings to clear"
    )
    assert cleared["recommendations"] == []
    assert "topFinding" not in cleared["efficiency"]
    assert cleared["efficiency"]["dataWaitFraction"] > 0.5
    eventually(
        lambda: [e for e in cluster.list("v1", "Event") if e.get("reason") == "FindingCleared"], what="a clearing Event"
    )


async def test_jobs_in_one_cycle_share_one_read(prometheus: Prometheus) -> None:
    from gpuwise.operator.evaluate import Evaluator
    from gpuwise.prometheus.client import Prometheus as Source

    evaluator = Evaluator(Source(prometheus.url), cycle_seconds=60, step_seconds=1)
    body = manifest()
    body["metadata"]["creationTimestamp"] = "2026-11-22T00:00:00Z"
    for name in ("bert", "gpt", "vit"):
        job = {**body, "metadata": {**body["metadata"], "name": name}}
        settings = evaluator.job_settings(job)
        assert settings is not None
        await evaluator.evaluate(job, settings)
    assert evaluator.fetches == 1


async def test_each_distinct_window_length_costs_one_read(prometheus: Prometheus) -> None:
    from gpuwise.operator.evaluate import Evaluator
    from gpuwise.prometheus.batched import query_count
    from gpuwise.prometheus.client import Prometheus as Source

    requests: list[str] = []

    class Counting(Source):
        def _chunks(self, path: str, params: Any) -> Iterator[bytes]:
            requests.append(params["query"])
            return super()._chunks(path, params)

    evaluator = Evaluator(Counting(prometheus.url), cycle_seconds=60, step_seconds=1)
    body = manifest()
    body["metadata"]["creationTimestamp"] = "2026-11-22T00:00:00Z"
    for name, window in (("bert", "8s"), ("gpt", "8s"), ("vit", "10s"), ("t5", "8s")):
        job = {
            **body,
            "metadata": {**body["metadata"], "name": name},
            "spec": {**body["spec"], "efficiency": {"window": window}},
        }
        settings = evaluator.job_settings(job)
        assert settings is not None
        await evaluator.evaluate(job, settings)
    # Instant queries aggregate over the window itself: one round of queries per window length in use.
    assert evaluator.fetches == 2
    assert len(requests) == 2 * query_count() == 40
