"""The evaluation's pure parts: job facts, what each mode publishes, and when a status is worth writing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuwise.api.overrides import JobOverrides
from gpuwise.kube.job_overrides import annotation_patch
from gpuwise.kube.resources import cpu_cores
from gpuwise.operator.evaluate import evaluate_window, job_facts, refresh_phase, worth_writing
from gpuwise.operator.job_settings import JobSettings, job_settings
from tests.operator.test_job_gauges import window as input_bound  # an input-bound job's window

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def spec(mode: str = "Recommend") -> JobSettings:
    raw = {
        "trainer": {"image": "x", "resourcesPerNode": {"limits": {"cpu": "2500m"}}},
        "efficiency": {"mode": mode, "tunables": {"dataLoaderWorkers": {"env": "W", "min": 1, "max": 8}}},
    }
    settings = job_settings({"metadata": {"name": "train"}, "spec": raw})
    assert settings is not None
    return settings


@pytest.mark.parametrize(("quantity", "cores"), [("16", 16.0), ("500m", 0.5), (4, 4.0), ("1k", 1000.0), (None, None),
                                                 ("lots", None), ("2Gi", None)])  # fmt: skip
def test_cpu_cores(quantity: Any, cores: float | None) -> None:
    assert cpu_cores(quantity) == cores


def test_job_facts_from_status_and_limits() -> None:
    body = {"metadata": {"creationTimestamp": "2026-11-22T09:00:00Z"}, "status": {"startTime": "2026-11-22T11:00:00Z"}}
    facts = job_facts(body, spec(), NOW)
    assert (facts.age_seconds, facts.cpu_cores) == (3600.0, 2.5)
    assert job_facts({"metadata": {"creationTimestamp": "2026-11-22T11:30:00Z"}}, spec(), NOW).age_seconds == 1800


def test_job_facts_read_the_accumulation_the_job_runs_with_and_its_processes() -> None:
    def accumulating(env: list[dict[str, Any]], procs: int = 1, declared: bool = True, **extra: Any) -> JobSettings:
        tunables = {"gradientAccumulationSteps": {"env": "ACCUM", "min": 1, "max": 64}} if declared else {}
        trainer = {"image": "x", "numProcPerNode": procs, "env": env}
        meta = {"name": "train", "creationTimestamp": "2026-11-22T11:00:00Z", **extra}
        settings = job_settings({"metadata": meta, "spec": {"trainer": trainer, "efficiency": {"tunables": tunables}}})
        assert settings is not None
        return settings

    body: dict[str, Any] = {"metadata": {"creationTimestamp": "2026-11-22T11:00:00Z"}}
    facts = job_facts(body, accumulating([{"name": "ACCUM", "value": "8"}], procs=8), NOW)
    assert (facts.gradient_accumulation_steps, facts.processes_per_node) == (8, 8)
    # What an action set wins over the spec: the job runs with it.
    overridden = annotation_patch(JobOverrides(env={"ACCUM": "2"}))["metadata"]
    assert accumulating([{"name": "ACCUM", "value": "8"}], **overridden).gradient_accumulation_steps == 2
    # Not set, not a plain number, or not declared: unknown, never a guessed 1.
    assert accumulating([]).gradient_accumulation_steps is None
    from_secret = [{"name": "ACCUM", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    assert accumulating(from_secret).gradient_accumulation_steps is None
    assert accumulating([{"name": "ACCUM", "value": "8"}], declared=False).gradient_accumulation_steps is None


def test_a_straggler_keeps_its_finding_from_the_stored_status() -> None:
    # Worker 5 has been 3x slower than its peers for the whole window: no baseline left in it.
    workers = {w: [(1000.0 + 15 * i, 1.5 if w == 5 else 0.5 + 0.01 * (i % 3)) for i in range(60)] for w in range(8)}
    slow = input_bound(data_wait_fraction=[0.0] * 60, gpu_utilization=[90.0] * 60, worker_step_seconds=workers)
    assert [f.kind for f in evaluate_window(spec(), slow, {}, NOW).findings] == ["SlowWorker"]
    stored = {
        "findings": [
            {"kind": "Straggler", "confidence": 0.95, "since": "2026-11-22T11:00:00Z", "message": "Worker 5 runs…",
             "worker": 5, "evidence": {"worker": "5", "peakSlowdown": "3", "baselineRatio": "1.0000"}}
        ]
    }  # fmt: skip
    status = evaluate_window(spec(), slow, stored, NOW).status()
    assert [(f["kind"], f["worker"], f["since"]) for f in status["findings"]] == [
        ("Straggler", 5, "2026-11-22T11:00:00Z")
    ]
    assert [r["action"] for r in status["recommendations"]] == ["Reschedule"]
    edited = {"findings": [{"kind": "Straggler", "since": "yesterday"}, *stored["findings"][1:]]}
    assert [f.kind for f in evaluate_window(spec(), slow, edited, NOW).findings] == ["SlowWorker"]


def test_recommend_mode_publishes_findings_and_the_summary() -> None:
    status = evaluate_window(spec(), input_bound(), {}, NOW).status()
    assert status["efficiency"] == {
        "gpuUtilization": 30.0, "smActivity": 0.21, "dataWaitFraction": 0.6, "memoryHeadroomFraction": 0.75,
        "topFinding": "InputBound", "updatedAt": "2026-11-22T12:00:00Z",
        "metricsUnavailableSince": None, "metricsError": None,  # Prometheus answered: any outage is over
    }  # fmt: skip
    assert [f["kind"] for f in status["findings"]] == ["InputBound"]
    assert status["findings"][0]["since"] == "2026-11-22T12:00:00Z"
    # One worker waiting 60 % of the time: ceil(1 / (1 - 0.6)) = 3 workers hide the wait.
    assert status["recommendations"][0]["changes"] == {"W": "3"}


def test_observe_mode_publishes_metrics_only() -> None:
    status = evaluate_window(spec("Observe"), input_bound(), {}, NOW).status()
    assert (status["findings"], status["recommendations"]) == ([], [])
    assert status["efficiency"]["topFinding"] is None
    assert status["efficiency"]["dataWaitFraction"] == 0.6


def test_a_finding_keeps_its_first_appearance_across_cycles() -> None:
    first = evaluate_window(spec(), input_bound(), {}, NOW).status()
    later = evaluate_window(spec(), input_bound(), first, NOW.replace(hour=13))
    assert later.status()["findings"][0]["since"] == "2026-11-22T12:00:00Z"
    assert not worth_writing(later, first, NOW.replace(hour=13), refresh_seconds=7200)


def test_unmeasured_quantities_are_null_not_zero() -> None:
    status = evaluate_window(spec(), input_bound(sm_activity=None, memory_used_mib=None), {}, NOW).status()
    assert status["efficiency"]["smActivity"] is None
    assert status["efficiency"]["memoryHeadroomFraction"] is None


def test_a_figure_moving_less_than_its_tolerance_is_not_written_until_the_refresh() -> None:
    stored = evaluate_window(spec(), input_bound(), {}, NOW).status()
    slid = evaluate_window(spec(), input_bound(gpu_utilization=[30.0] * 59 + [59.0]), stored, NOW)
    assert slid.figures.gpu_utilization == 30.5 != stored["efficiency"]["gpuUtilization"]
    assert not worth_writing(slid, stored, NOW + timedelta(seconds=30), refresh_seconds=300)
    assert worth_writing(slid, stored, NOW + timedelta(seconds=300), refresh_seconds=300), "refreshed at last"
    moved = evaluate_window(spec(), input_bound(gpu_utilization=[31.0] * 60), stored, NOW)
    assert worth_writing(moved, stored, NOW + timedelta(seconds=30), refresh_seconds=300), "one point of utilization"
    waits_less = evaluate_window(spec(), input_bound(data_wait_fraction=[0.59] * 60), stored, NOW)
    assert worth_writing(waits_less, stored, NOW + timedelta(seconds=30), refresh_seconds=300)


def test_unchanged_statuses_written_in_one_cycle_are_refreshed_spread_over_the_interval() -> None:
    """1,000 jobs first written in one cycle: each is rewritten once per interval, never older than
    it and a cycle, and no cycle takes more than twice its share of the rewrites."""
    refresh, cycle, jobs = 300.0, 30.0, [f"job-{i}" for i in range(1000)]
    stored = evaluate_window(spec(), input_bound(), {}, NOW).status()
    unchanged = evaluate_window(spec(), input_bound(), stored, NOW)
    written = dict.fromkeys(jobs, NOW)
    per_cycle, oldest = [], 0.0
    for k in range(1, 21):
        now = NOW + timedelta(seconds=k * cycle)
        due = [
            job
            for job in jobs
            if worth_writing(
                unchanged,
                {**stored, "efficiency": {**stored["efficiency"], "updatedAt": f"{written[job]:%Y-%m-%dT%H:%M:%SZ}"}},
                now,
                refresh,
                refresh_phase("ml", job, refresh),
            )
        ]
        oldest = max(oldest, *((now - written[job]).total_seconds() for job in jobs))
        written.update(dict.fromkeys(due, now))
        per_cycle.append(len(due))
    assert sum(per_cycle[:10]) == sum(per_cycle[10:]) == len(jobs), "each once per interval"
    assert max(per_cycle) <= 2 * len(jobs) * cycle / refresh and oldest <= refresh + cycle
    phases = [refresh_phase("ml", job, refresh) for job in jobs]
    assert phases == [refresh_phase("ml", job, refresh) for job in jobs] and 0 <= min(phases) < max(phases) < refresh


def test_a_figure_appearing_or_a_finding_changing_is_written_at_once() -> None:
    stored = evaluate_window(spec(), input_bound(sm_activity=None), {}, NOW).status()
    measured = evaluate_window(spec(), input_bound(), stored, NOW)
    assert worth_writing(measured, stored, NOW, refresh_seconds=300), "SM activity now measured"
    fed = input_bound(data_wait_fraction=[0.0] * 60, gpu_utilization=[30.4] * 60)
    healthy = evaluate_window(spec(), fed, stored, NOW)
    assert healthy.findings == [] and worth_writing(healthy, stored, NOW, refresh_seconds=300)
    unchanged = evaluate_window(spec(), input_bound(sm_activity=None), stored, NOW)
    assert not worth_writing(unchanged, stored, NOW, refresh_seconds=300)
    fewer_workers = {**stored, "recommendations": [{**stored["recommendations"][0], "changes": {"W": "2"}}]}
    assert worth_writing(unchanged, fewer_workers, NOW, refresh_seconds=300), "another change to make"
    edited = {**stored, "findings": [*stored["findings"], {"kind": "Straggler", "since": "yesterday"}]}
    assert worth_writing(evaluate_window(spec(), input_bound(sm_activity=None), edited, NOW), edited, NOW,
                         refresh_seconds=300), "a stored finding that does not read is written over"  # fmt: skip


def test_a_status_never_written_with_nothing_measured_is_not_written() -> None:
    observed = evaluate_window(spec("Observe"), input_bound(gpu_utilization=[], data_wait_fraction=[],
                               sm_activity=None, memory_used_mib=None), {}, NOW)  # fmt: skip
    assert not worth_writing(observed, {}, NOW, refresh_seconds=300)
