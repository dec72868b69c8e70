"""The operator's own /metrics (what the chart's ServiceMonitor scrapes), with the real operator
process running against the Kubernetes emulator over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import Cluster, Operator
from tests.sidecar.support import Series, parse
from tests.support.emulator import EmulatorThread
from tests.support.waiting import eventually, free_port, get

pytestmark = pytest.mark.slow


@pytest.fixture
def metrics_port() -> int:
    return free_port()


@pytest.fixture
def running(tmp_path: Path, metrics_port: int) -> Iterator[tuple[Cluster, Operator]]:
    emulator = EmulatorThread().start()
    operator = Operator(emulator, tmp_path / "operator.log", [f"--metrics-port={metrics_port}"]).start()
    try:
        yield Cluster(emulator), operator
    finally:
        operator.stop()
        emulator.stop()


def scrape(port: int) -> list[Series] | None:
    try:
        status, body = get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    except OSError:
        return None
    return parse(body) if status == 200 else None


def value(series: list[Series], name: str, **labels: str) -> float:
    return sum(s.value for s in series if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_operator_counts_handler_runs_and_api_requests(running: tuple[Cluster, Operator], metrics_port: int) -> None:
    cluster, operator = running
    first = eventually(lambda: scrape(metrics_port), timeout=30, what="the operator's /metrics")
    assert value(first, "gpuwise_operator_info", version="0.1.0") == 1
    assert any(s.name == "process_resident_memory_bytes" for s in first)
    cluster.create(
        {
            "apiVersion": "gpuwise.io/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": "bert", "namespace": "default"},
            "spec": {"trainer": {"image": "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime", "numNodes": 2}},
        }
    )

    def counted() -> list[Series] | None:
        series = scrape(metrics_port)
        if not series:
            return None
        created = value(series, "gpuwise_operator_api_requests_total", verb="create", outcome="ok")
        reconciled = value(series, "gpuwise_operator_handler_runs_total", handler="reconcile", outcome="success")
        return series if created >= 2 and reconciled >= 1 else None  # the Job and the Service

    series = eventually(counted, timeout=30, what=f"counted reconciles; operator log:\n{operator.log()[-3000:]}")
    assert value(series, "gpuwise_operator_handler_runs_total", outcome="failure") == 0
    assert cluster.get("batch/v1", "Job", "bert") is not None
