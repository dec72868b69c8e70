"""The operator's gpuwise_job_* gauges: series appear, update, clear and go with their job.

Read back through prometheus-client's own exposition of a fresh registry, not through mocks.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from gpuwise.diagnose.window import JobWindow
from gpuwise.metrics import catalog
from gpuwise.operator.evaluate import Evaluation, Evaluator, evaluate_window, publish_efficiency, verified_speedups
from gpuwise.operator.job_settings import JobSettings, job_settings
from gpuwise.operator.metrics import JOBS, JobGauges, JobSeries, ReclaimedGpuSeconds

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
JOB_METRICS = {m.name for m in (catalog.JOB_FINDING, catalog.JOB_RECOMMENDATION, catalog.JOB_GPU_UTIL,
                                catalog.JOB_DATA_WAIT, catalog.JOB_GPU_UTIL_THRESHOLD)}  # fmt: skip
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def exposed(registry: CollectorRegistry) -> Samples:
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in JOB_METRICS
    }


def gauges() -> tuple[JobGauges, CollectorRegistry, Clock]:
    clock = Clock()
    jobs = JobGauges(clock)
    registry = CollectorRegistry()
    registry.register(jobs)
    return jobs, registry, clock


def raw_spec(mode: str = "Recommend", **thresholds: float) -> dict[str, Any]:
    return {
        "trainer": {"image": "x", "resourcesPerNode": {"limits": {"cpu": "2500m"}}},
        "efficiency": {
            "mode": mode,
            "tunables": {"dataLoaderWorkers": {"env": "W", "min": 1, "max": 8}},
            "thresholds": thresholds,
        },
    }


def spec(mode: str = "Recommend") -> JobSettings:
    settings = job_settings({"metadata": {"name": "train"}, "spec": raw_spec(mode)})
    assert settings is not None
    return settings


def window(**overrides: Any) -> JobWindow:
    values: dict[str, Any] = {
        "window_seconds": 900, "sample_interval_seconds": 15, "job_age_seconds": 3600, "gpus": 1,
        "gpu_utilization": [30.0] * 60, "data_wait_fraction": [0.6] * 60, "num_workers": 1,
        "memory_used_mib": 20_000.0, "memory_total_mib": 80_000.0, "sm_activity": 0.21,
    }  # fmt: skip
    values.update(overrides)
    return JobWindow(**values)


def series(settings: JobSettings, job: JobWindow, previous: dict[str, Any] | None = None) -> JobSeries:
    return evaluate_window(settings, job, previous or {}, NOW).series()


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted({"namespace": "team", "trainingjob": "bert", **labels}.items()))


def test_an_input_bound_job_gets_its_finding_recommendation_and_summary() -> None:
    jobs, registry, _ = gauges()
    jobs.publish("team", "bert", series(spec(), window()), ttl=90)
    samples = exposed(registry)
    confidence = samples.pop(key(catalog.JOB_FINDING.name, kind="InputBound"))
    assert 0 < confidence <= 1
    assert samples == {
        key(catalog.JOB_RECOMMENDATION.name, action="AdjustConfig", finding="InputBound"): 1.0,
        key(catalog.JOB_GPU_UTIL.name): 30.0,
        key(catalog.JOB_DATA_WAIT.name): 0.6,
        key(catalog.JOB_GPU_UTIL_THRESHOLD.name): 50.0,
    }


def test_series_update_and_a_cleared_finding_loses_its_series() -> None:
    jobs, registry, _ = gauges()
    jobs.publish("team", "bert", series(spec(), window()), ttl=90)
    first = evaluate_window(spec(), window(), {}, NOW).status()
    healthy = window(gpu_utilization=[92.0] * 60, data_wait_fraction=[0.02] * 60)
    jobs.publish("team", "bert", series(spec(), healthy, first), ttl=90)
    assert exposed(registry) == {
        key(catalog.JOB_GPU_UTIL.name): 92.0,
        key(catalog.JOB_DATA_WAIT.name): 0.02,
        key(catalog.JOB_GPU_UTIL_THRESHOLD.name): 50.0,
    }


def test_unmeasured_quantities_have_no_series_never_zero() -> None:
    jobs, registry, _ = gauges()
    jobs.publish("team", "bert", series(spec("Observe"), window(gpu_utilization=[], data_wait_fraction=[])), ttl=90)
    assert exposed(registry) == {key(catalog.JOB_GPU_UTIL_THRESHOLD.name): 50.0}, "the spec's, not measured"
    assert "# TYPE gpuwise_job_finding gauge" in generate_latest(registry).decode()  # the family is still declared


def test_observe_mode_exports_the_summary_only() -> None:
    jobs, registry, _ = gauges()
    jobs.publish("team", "bert", series(spec("Observe"), window()), ttl=90)
    assert set(exposed(registry)) == {
        key(catalog.JOB_GPU_UTIL.name),
        key(catalog.JOB_DATA_WAIT.name),
        key(catalog.JOB_GPU_UTIL_THRESHOLD.name),
    }


def test_the_job_s_own_utilization_threshold_is_exported_for_the_alert() -> None:
    jobs, registry, _ = gauges()
    strict = job_settings({"metadata": {"name": "train"}, "spec": raw_spec("Observe", gpuUtilization=75)})
    assert strict is not None
    jobs.publish("team", "bert", series(strict, window()), ttl=90)
    jobs.publish("team", "gpt", series(spec("Observe"), window()), ttl=90)
    samples = exposed(registry)
    assert samples[key(catalog.JOB_GPU_UTIL_THRESHOLD.name)] == 75.0
    assert samples[key(catalog.JOB_GPU_UTIL_THRESHOLD.name, trainingjob="gpt")] == 50.0


def test_a_forgotten_job_loses_every_series_and_others_keep_theirs() -> None:
    jobs, registry, _ = gauges()
    jobs.publish("team", "bert", series(spec(), window()), ttl=90)
    jobs.publish("team", "gpt", series(spec(), window()), ttl=90)
    jobs.forget("team", "bert")
    jobs.forget("team", "never-seen")
    remaining = exposed(registry)
    assert remaining and {dict(labels)["trainingjob"] for _, labels in remaining} == {"gpt"}


def test_a_job_not_published_again_expires_after_its_ttl() -> None:
    jobs, registry, clock = gauges()
    jobs.publish("team", "bert", series(spec(), window()), ttl=90)
    clock.now += 89
    assert exposed(registry)
    jobs.publish("team", "bert", series(spec(), window()), ttl=90)  # refreshed
    clock.now += 89
    assert exposed(registry)
    clock.now += 2
    assert exposed(registry) == {}
    assert jobs.jobs() == {}


class FixedEvaluator(Evaluator):
    """Returns a computed evaluation instead of reading Prometheus."""

    def __init__(self, evaluation: Evaluation) -> None:
        super().__init__(source=None, cycle_seconds=30, clock=NOW.timestamp)  # type: ignore[arg-type]
        self.evaluation = evaluation

    async def evaluate(self, body: Any, settings: JobSettings) -> Evaluation:
        return self.evaluation


def body(phase: str, status: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "gpuwise.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"namespace": "team", "name": "hooked", "uid": "u1"},
        "spec": raw_spec(),
        "status": {**status, "phase": phase},
    }


def test_publish_efficiency_feeds_the_gauges_and_a_job_that_stops_running_loses_them() -> None:
    status = evaluate_window(spec(), window(), {}, NOW).status()
    evaluator = FixedEvaluator(evaluate_window(spec(), window(), status, NOW))
    logger = logging.getLogger("test")
    try:
        # Unchanged status: nothing to patch, but the gauges are refreshed.
        asyncio.run(publish_efficiency(body("Running", status), evaluator, None, logger))  # type: ignore[arg-type]
        assert ("team", "hooked") in JOBS.jobs()
        assert JOBS.jobs()["team", "hooked"].utilization_threshold == 50.0, "the spec's default"
        asyncio.run(publish_efficiency(body("Succeeded", status), evaluator, None, logger))  # type: ignore[arg-type]
        assert ("team", "hooked") not in JOBS.jobs()
    finally:
        JOBS.forget("team", "hooked")


def test_reclaimed_gpu_seconds_grow_while_suspended_and_stay_after() -> None:
    now = [0.0]
    reclaimed = ReclaimedGpuSeconds(clock=lambda: now[0])
    reclaimed.holding("ml", "bert", 4)
    now[0] = 100.0
    reclaimed.holding("ml", "bert", 4)  # every reconcile says so again: counted once
    assert reclaimed.totals() == {("ml", "bert"): 400.0}
    now[0] = 150.0
    reclaimed.released("ml", "bert")  # resumed
    now[0] = 1000.0
    assert reclaimed.totals() == {("ml", "bert"): 600.0}, "a counter: it keeps its total"
    reclaimed.holding("ml", "bert", 4)  # idle again, suspended again
    now[0] = 1010.0
    assert reclaimed.totals() == {("ml", "bert"): 640.0}
    text = generate_latest(_only(reclaimed)).decode()
    assert 'gpuwise_reclaimed_gpu_seconds_total{namespace="ml",trainingjob="bert"} 640.0' in text
    reclaimed.released("ml", "bert", forget=True)  # deleted
    assert reclaimed.totals() == {}


def _only(collector: Collector) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(collector)
    return registry


def test_the_latest_verified_action_shows_its_predicted_and_measured_speedup() -> None:
    actions = [
        {"action": "AdjustConfig", "state": "Done", "expectedSpeedup": 3.0, "measuredSpeedup": 2.4},
        {"action": "Reschedule", "state": "RolledBack", "expectedSpeedup": 1.8, "measuredSpeedup": 0.7},
        {"action": "AdjustConfig", "state": "Verifying", "expectedSpeedup": 2.0},  # not verified yet
        {"action": "Suspend", "state": "Done"},  # nothing to measure
    ]
    shown = verified_speedups({"actions": actions})
    assert shown == (("Reschedule", "predicted", 1.8), ("Reschedule", "measured", 0.7)), "a revert is a verdict too"
    assert verified_speedups({"actions": [{"action": "Pack", "state": "Done", "measuredSpeedup": 1.0}]}) == (
        ("Pack", "measured", 1.0),
    ), "no prediction: only what was measured"
    gauges = JobGauges()
    gauges.publish("ml", "bert", JobSeries(None, None, (), (), 50.0, shown), ttl=60)
    text = generate_latest(_only(gauges)).decode()
    assert (
        'gpuwise_job_action_speedup_ratio{action="Reschedule",basis="measured",namespace="ml",trainingjob="bert"} 0.7'
        in text
    )
