"""Job windows from a real Prometheus scraping a real sidecar, in a fixed number of queries."""

from __future__ import annotations

import dataclasses
import gc
import math
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuwise.api.trainingjob import Tunables
from gpuwise.diagnose.rules import DiagnosisThresholds, RuleContext, diagnose
from gpuwise.diagnose.window import REPORTED_FIELDS, JobWindow, Reported, Sustain
from gpuwise.hardware.compute_capability import compute_capability
from gpuwise.prometheus import batched as source
from gpuwise.prometheus.client import Prometheus
from gpuwise.prometheus.snapshot import JobFacts, Snapshot
from tests.support.prometheus import AVAILABLE
from tests.support.telemetry import input_bound_job

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(not AVAILABLE, reason="needs prometheus (make system-deps)"),
]
JOB = ("ml", "bert")


class Counting(Prometheus):
    requests: list[str]

    def __init__(self, url: str) -> None:
        super().__init__(url)
        object.__setattr__(self, "requests", [])

    def _chunks(self, path: str, params: Any) -> Iterator[bytes]:
        self.requests.append(params["query"])
        return super()._chunks(path, params)


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with input_bound_job(
        tmp_path_factory.mktemp("src"), namespace="ml", trainingjob="bert", pod="bert-0-abcde"
    ) as server:
        yield server.url


def collect(url: str, jobs: dict[tuple[str, str], JobFacts]) -> tuple[dict[Any, JobWindow], Counting]:
    client = Counting(url)
    snapshot = source.fetch(client, now=time.time(), window_seconds=8, step_seconds=1)
    return {key: snapshot.window(key, facts) for key, facts in jobs.items()}, client


def test_the_compute_capability_the_sidecar_read_reaches_the_job(prometheus_url: str) -> None:
    """The NVML value travels through Prometheus under the job's labels; the model name is the fallback."""
    query = source.instant_queries("8s")["compute_capability"]
    (answer,) = Prometheus(prometheus_url).instant(query, time.time())
    assert answer["metric"] == {"namespace": "ml", "trainingjob": "bert"}
    assert float(answer["value"][1]) == 9.0  # the simulated H100's datasheet value, as NVML would say it
    records = source._by_job(
        0.0,
        {
            **{name: {} for name in source.instant_queries("8s")},
            "gpu_model": {("ml", "a"): "NVIDIA H100 80GB HBM3", ("ml", "b"): "NVIDIA H100 80GB HBM3"},
            "compute_capability": {("ml", "a"): 8.9},
            "last_step": {},
        },
        series={name: {} for name in source.range_queries()},
        worker_steps={},
        extremes={},
        slowdowns={},
    )
    assert records["ml", "a"].compute_capability == (8, 9), "what NVML reported wins over the name"
    assert records["ml", "b"].compute_capability == (9, 0), "no series (dcgm-exporter): the name's entry"


def test_window_holds_what_the_sidecar_exported(prometheus_url: str) -> None:
    windows, _ = collect(prometheus_url, {JOB: JobFacts(age_seconds=3600, cpu_cores=8)})
    window = windows[JOB]
    assert window.gpus == 2
    assert window.gpu_model == "NVIDIA H100 80GB HBM3"
    assert window.compute_capability == (9, 0)
    assert len(window.gpu_utilization) >= 6
    assert all(0 <= u <= 100 for u in window.gpu_utilization)
    assert 0.6 <= window.mean(window.data_wait_fraction) <= 0.85  # type: ignore[operator]
    assert window.seconds_since_last_step is not None and window.seconds_since_last_step < 5
    assert window.memory_total_mib is not None and window.memory_used_mib is not None
    assert 0 < window.memory_used_mib < window.memory_total_mib
    assert window.cpu_cores == 8
    # The simulated GPUs: SM activity per sample, PCIe both ways, and no clock slowdown, so no
    # clock-event reasons are read for them (`clock_reasons_query`).
    assert len(window.sm_active) >= 6 and all(0 < a < 0.5 for a in window.sm_active)
    assert window.pcie_tx_bytes_per_second and window.pcie_rx_bytes_per_second
    assert window.pcie_rx_bytes_per_second > window.pcie_tx_bytes_per_second
    assert window.clock_slowdowns == {}
    assert window.batch_size is None, "the manual loop reports no DataLoader: unknown, not 0"
    (worker,) = window.worker_step_seconds
    steps = [seconds for _, seconds in window.worker_step_seconds[worker] if not math.isnan(seconds)]
    assert worker == 0 and steps
    assert all(0.03 <= seconds <= 0.1 for seconds in steps), steps  # 30 ms waiting + 10 ms computing


def test_a_job_without_series_gets_nothing_invented(prometheus_url: str) -> None:
    windows, _ = collect(prometheus_url, {("ml", "absent"): JobFacts(age_seconds=60)})
    window = windows["ml", "absent"]
    assert (window.gpus, list(window.gpu_utilization), list(window.data_wait_fraction)) == (0, [], [])
    assert window.memory_used_mib is None and window.seconds_since_last_step is None and window.autocast is None


def test_the_number_of_queries_does_not_grow_with_jobs(prometheus_url: str) -> None:
    one = collect(prometheus_url, {JOB: JobFacts(age_seconds=3600)})[1]
    many = collect(prometheus_url, {("ns", f"job-{i}"): JobFacts(age_seconds=3600) for i in range(500)})[1]
    assert len(one.requests) == len(many.requests) == source.query_count() == 20


def test_a_snapshot_is_left_out_of_the_cycles_collections(prometheus_url: str) -> None:
    snapshot = source.fetch(Counting(prometheus_url), now=time.time(), window_seconds=8, step_seconds=1)
    try:
        assert JOB in snapshot.by_job
        assert gc.get_freeze_count() > 0
        assert not any(o is snapshot.by_job for o in gc.get_objects()), "frozen until the next read"
    finally:
        gc.unfreeze()


def test_a_window_holds_every_reported_field_and_the_jobs_facts_by_name() -> None:
    """One list of the measured fields (`Reported`): a window is one of those plus its own facts, and
    the read fills every one of them, each by its name."""
    own = {"window_seconds", "sample_interval_seconds", "job_age_seconds"}
    job = ["cpu_cores", "processes_per_node", "gradient_accumulation_steps"]  # JobFacts' after its age
    window_fields = {field.name for field in dataclasses.fields(JobWindow)}
    assert window_fields == {*REPORTED_FIELDS, *own, *job}
    assert list(JobFacts.__slots__) == ["age_seconds", *job]
    assert set(source.range_queries()) < set(REPORTED_FIELDS)
    record = Reported(gpu_utilization=[50.0], gpus=3, gpu_model="NVIDIA L4", pcie_rx_bytes_per_second=7.0)
    snapshot = Snapshot(now=1000.0, window_seconds=300, step_seconds=15, series={}, by_job={("ml", "a"): record})
    window = snapshot.window(("ml", "a"), JobFacts(age_seconds=60, cpu_cores=4))
    assert {name: getattr(window, name) for name in REPORTED_FIELDS} == {
        name: getattr(record, name) for name in REPORTED_FIELDS
    }
    assert (window.window_seconds, window.sample_interval_seconds, window.job_age_seconds) == (300, 15, 60)
    assert (window.cpu_cores, window.processes_per_node, window.gradient_accumulation_steps) == (4, 1, None)


def test_a_window_of_a_job_not_reported_holds_its_facts_only() -> None:
    snapshot = Snapshot(now=1000.0, window_seconds=300, step_seconds=15, series={})
    job = JobFacts(age_seconds=60, cpu_cores=4, processes_per_node=2, gradient_accumulation_steps=3)
    window = snapshot.window(("ml", "absent"), job)
    assert window == JobWindow(
        window_seconds=300, sample_interval_seconds=15, job_age_seconds=60,
        gpus=0, cpu_cores=4, processes_per_node=2, gradient_accumulation_steps=3,
    )  # fmt: skip


def test_the_rules_name_the_cause_from_prometheus_data(prometheus_url: str) -> None:
    windows, _ = collect(prometheus_url, {JOB: JobFacts(age_seconds=3600, cpu_cores=8)})
    tunables = Tunables.model_validate({"dataLoaderWorkers": {"env": "NUM_WORKERS", "min": 1, "max": 16}})
    ctx = RuleContext(
        window=windows[JOB],
        tunables=tunables,
        thresholds=DiagnosisThresholds(),
        sustain=Sustain(),
        now=datetime.now(tz=UTC),
        active=frozenset(),
        since={},
    )
    found = {finding.kind: recommendation for finding, recommendation in diagnose(ctx)}
    assert "InputBound" in found
    recommendation = found["InputBound"]
    assert recommendation is not None and int(recommendation.changes["NUM_WORKERS"]) > 1


def test_compute_capability_by_model_name() -> None:
    assert compute_capability("NVIDIA A100-SXM4-80GB") == (8, 0)
    assert compute_capability("NVIDIA A100 80GB PCIe") == (8, 0)
    assert compute_capability("Tesla V100-SXM2-16GB") == (7, 0)
    assert compute_capability("NVIDIA A10G") == (8, 6)
    assert compute_capability("NVIDIA L40S") == (8, 9)
    assert compute_capability("NVIDIA H100 80GB HBM3") == (9, 0)
    assert compute_capability("Quadro RTX 6000") is None  # not listed: unknown, not guessed
    assert compute_capability("NVIDIA L4") == (8, 9)
    assert compute_capability(None) is None


def test_a_fact_prometheus_answers_as_nan_or_infinite_is_absent() -> None:
    """A division by zero in PromQL, a sidecar that summed garbage: not a measurement, never a figure."""
    from gpuwise.prometheus.labels import LabelSets

    def pair(job: str, value: bytes) -> tuple[bytes, bytes]:
        return b'{"namespace":"ml","trainingjob":"' + job.encode() + b'"}', value

    answer = [pair("a", b"NaN"), pair("b", b"+Inf"), pair("c", b"-Inf"), pair("d", b"42.5")]
    assert source._facts("memory_used_mib", answer, LabelSets()) == {("ml", "d"): 42.5}
    assert source._facts("memory_used_mib", [pair("d", b"42.5")], LabelSets()) == {("ml", "d"): 42.5}
