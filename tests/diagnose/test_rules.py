"""Each diagnosis rule, with the cases that must and must not produce a finding."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuwise.api.trainingjob import Finding, Recommendation, Tunables
from gpuwise.diagnose.gpu_classes import SizedGpuClass
from gpuwise.diagnose.rules import (
    STRAGGLERS,
    DiagnosisThresholds,
    RuleContext,
    diagnose,
    fit_memory,
    larger_batch,
    steps_alike,
)
from gpuwise.diagnose.straggler import episodes_in, peer_ratios, steadily_slow, step_extremes
from gpuwise.diagnose.window import JobWindow, Sustain, holds
from gpuwise.hardware.gpu_specs import gpu_spec

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
TUNABLES = Tunables.model_validate(
    {
        "batchSize": {"env": "BATCH_SIZE", "min": 8, "max": 1024},
        "dataLoaderWorkers": {"env": "NUM_WORKERS", "min": 1, "max": 32},
        "gradientAccumulationSteps": {"env": "ACCUM", "min": 1, "max": 64},
        "pinMemory": {"env": "PIN_MEMORY"},
        "amp": {"env": "USE_AMP"},
        "keepGlobalBatchSize": True,
    }
)


def window(**overrides: Any) -> JobWindow:
    healthy: dict[str, Any] = {
        "window_seconds": 900,
        "sample_interval_seconds": 15,
        "job_age_seconds": 3600,
        "gpus": 1,
        "gpu_utilization": [92.0] * 60,
        "data_wait_fraction": [0.02] * 60,
        "memory_used_mib": 60_000.0,
        "memory_total_mib": 81_559.0,
        "batch_size": 256,
        "num_workers": 8,
        "pin_memory": True,
        "autocast": True,
        "compute_capability": (9, 0),
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "tensor_activity": 0.45,
        "cpu_cores": 16.0,
        "seconds_since_last_step": 1.0,
    }
    healthy.update(overrides)
    return JobWindow(**healthy)


def context(
    w: JobWindow,
    active: frozenset[str] = frozenset(),
    tunables: Tunables = TUNABLES,
    previous: dict[str, Finding] | None = None,
    since: dict[str, datetime] | None = None,
) -> RuleContext:
    """One evaluation's context; `previous` findings also mark their kinds active since they appeared."""
    previous = previous or {}
    return RuleContext(
        window=w,
        tunables=tunables,
        thresholds=DiagnosisThresholds(),
        sustain=Sustain(),
        now=NOW,
        active=active | frozenset(previous),
        since=since or {kind: f.since for kind, f in previous.items()},
        previous=previous,
    )


def run(w: JobWindow, active: frozenset[str] = frozenset(), tunables: Tunables = TUNABLES) -> dict[str, Any]:
    return {
        finding.kind: (finding, recommendation) for finding, recommendation in diagnose(context(w, active, tunables))
    }


def test_a_healthy_job_has_no_finding() -> None:
    assert run(window()) == {}


def test_a_bursty_but_healthy_job_has_no_finding() -> None:
    # Every tenth sample dips (evaluation, checkpoint): 10 % of samples below threshold, not 90 %.
    bursty = [20.0 if i % 10 == 0 else 95.0 for i in range(60)]
    waits = [0.6 if i % 10 == 0 else 0.02 for i in range(60)]
    assert run(window(gpu_utilization=bursty, data_wait_fraction=waits, memory_used_mib=20_000.0)) == {}


def test_input_bound_recommends_workers_within_cpu_and_pinning() -> None:
    found = run(window(gpu_utilization=[30.0] * 60, data_wait_fraction=[0.7] * 60, num_workers=2, pin_memory=False))
    finding, recommendation = found["InputBound"]
    assert finding.evidence["dataWaitFraction"] == "0.7"
    assert "70% of step time is spent waiting for input" in finding.message
    assert recommendation is not None
    assert recommendation.changes == {"NUM_WORKERS": "7", "PIN_MEMORY": "1"}
    # From what was measured: the wait hidden, a step is its compute (30%), so up to 3.3x.
    assert recommendation.expected_effect == (
        "up to 3.3x steps per second: 70% of step time is input wait, and up to 100% GPU utilization"
    )
    assert recommendation.message.startswith("Raise DataLoader workers and pin host memory; ")
    capped = run(window(gpu_utilization=[30.0] * 60, data_wait_fraction=[0.7] * 60, num_workers=2, cpu_cores=4.0))
    assert capped["InputBound"][1].changes["NUM_WORKERS"] == "3"
    pinned = capped["InputBound"][1]  # pin_memory already on: pinning is no advice
    assert pinned.message.startswith("Raise DataLoader workers; ") and "pin" not in pinned.message


def test_waiting_for_input_is_a_fact_without_gpu_telemetry_too() -> None:
    """A CPU run, or a node without GPU telemetry: the steps still say they wait, and the finding says
    the utilization was not measured rather than invent one."""
    found = run(window(gpu_utilization=[], data_wait_fraction=[0.9] * 60, num_workers=0, pin_memory=False))
    finding, recommendation = found["InputBound"]
    assert "GPU utilization was not measured" in finding.message and "gpuUtilization" not in finding.evidence
    assert recommendation is not None and recommendation.expected_effect == (
        "up to 10.0x steps per second: 90% of step time is input wait"
    )
    assert "InputBound" not in run(window(gpu_utilization=[95.0] * 60, data_wait_fraction=[0.9] * 60)), "busy GPU"


def test_input_bound_with_no_spare_cpu_is_cpu_bound() -> None:
    found = run(window(gpu_utilization=[30.0] * 60, data_wait_fraction=[0.5] * 60, num_workers=3, cpu_cores=4.0))
    finding, recommendation = found["CPUBoundInput"]
    assert "preprocessing is CPU-bound" in finding.message
    assert recommendation is not None and recommendation.changes == {}


def test_loader_workers_are_capped_by_each_process_s_share_of_the_pod_s_cpu() -> None:
    starved = {"gpu_utilization": [30.0] * 60, "data_wait_fraction": [0.9] * 60, "pin_memory": True}
    # 16 cores, one process: up to 15 workers (10 hide a 90 % wait for one worker).
    assert run(window(**starved, num_workers=1))["InputBound"][1].changes == {"NUM_WORKERS": "10"}
    # 8 processes on those 16 cores: 2 cores each, one for the process itself, so 1 worker each.
    eight = run(window(**starved, num_workers=0, processes_per_node=8))["InputBound"]
    assert eight[1] is not None and eight[1].changes == {"NUM_WORKERS": "1"}
    assert eight[0].evidence["processesPerNode"] == "8"
    cpu_bound = run(window(**starved, num_workers=1, processes_per_node=8))["CPUBoundInput"]
    assert "Each of the pod's 8 processes has no spare CPU" in cpu_bound[0].message
    assert cpu_bound[1] is not None and cpu_bound[1].changes == {}


def test_input_bound_advice_includes_prefetching() -> None:
    waiting = {"gpu_utilization": [30.0] * 60, "data_wait_fraction": [0.7] * 60, "num_workers": 2}
    _, recommendation = run(window(**waiting))["InputBound"]
    assert recommendation is not None and "prefetch_factor" in recommendation.message
    _, undeclared = run(window(**waiting), tunables=Tunables())["InputBound"]
    assert undeclared is not None and undeclared.changes == {}
    assert "up to 15 per process" in undeclared.message and "prefetch_factor" in undeclared.message


def test_input_bound_and_cpu_bound_input_share_their_hysteresis() -> None:
    # The wait holds in 60 % of samples: not enough to start a finding, enough to keep one.
    hovering = {"gpu_utilization": [30.0] * 60, "data_wait_fraction": [0.5] * 36 + [0.05] * 24}
    assert run(window(**hovering, num_workers=3, cpu_cores=4.0)) == {}
    for held in ("CPUBoundInput", "InputBound"):
        found = run(window(**hovering, num_workers=3, cpu_cores=4.0), active=frozenset({held}))
        assert list(found) == ["CPUBoundInput"], f"an active {held} keeps the family's hold"
    found = run(window(**hovering, num_workers=1, cpu_cores=4.0), active=frozenset({"CPUBoundInput"}))
    assert list(found) == ["InputBound"], "and the other way round"


def test_waiting_with_a_busy_gpu_is_not_input_bound() -> None:
    assert "InputBound" not in run(window(gpu_utilization=[85.0] * 60, data_wait_fraction=[0.3] * 60))


FREE_BATCH = TUNABLES.model_copy(update={"keep_global_batch_size": False})
FITS_100 = (0.85 * 81_559 - 4_096) / 100  # MiB per sample with which 100 samples fit beside 4 GiB


def test_small_batch_uses_the_memory_model_and_keeps_the_global_batch() -> None:
    # 4 GiB of weights and optimizer state + 100 MiB per sample, at batch 32 and 64.
    w = window(
        gpu_utilization=[35.0] * 60,
        batch_size=32,
        memory_used_mib=7_296.0,
        gradient_accumulation_steps=8,
        memory_by_batch=[(32, 7_296.0), (64, 10_496.0)],
    )
    finding, recommendation = run(w)["SmallBatch"]
    assert finding.evidence["memoryModel"] == "4096 MiB + 100.0 MiB/sample"
    assert recommendation is not None
    # (0.85 × 81559 − 4096) / 100 = 652 samples fit, 32 × 8 = 256 per process must stay, and one
    # recommendation raises the batch at most 4x: 128 × 2.
    assert recommendation.changes == {"BATCH_SIZE": "128", "ACCUM": "2"}
    assert "batch × accumulation stays 256" in recommendation.message
    assert "learning rate" not in recommendation.message, "the global batch does not change"
    # Without keepGlobalBatchSize: the largest power of two that fits and is at most 4x, accumulation
    # untouched, and the message says what else a larger global batch changes.
    _, free = run(w, tunables=FREE_BATCH)["SmallBatch"]
    assert free is not None and free.changes == {"BATCH_SIZE": "128"}
    assert "scale the learning rate" in free.message and "keepGlobalBatchSize" in free.message
    assert free.expected_effect is not None and free.expected_effect.startswith("at most 2.9x samples/s")


@pytest.mark.parametrize(
    ("batch", "steps", "bounds", "per_sample", "expected"),
    [
        (32, 8, {"min": 1, "max": 64}, 100.0, {"BATCH_SIZE": "128", "ACCUM": "2"}),  # 256 × 1 is more than 4x
        (24, 10, {"min": 1, "max": 64}, 100.0, {"BATCH_SIZE": "80", "ACCUM": "3"}),  # not a power of two; ≤ 96
        (32, 8, {"min": 4, "max": 64}, 100.0, {"BATCH_SIZE": "64", "ACCUM": "4"}),  # the accumulation's min
        (16, 12, {"min": 1, "max": 64}, FITS_100, {"BATCH_SIZE": "64", "ACCUM": "3"}),  # 192 fits nowhere near 4x
        (32, 1, {"min": 1, "max": 64}, 100.0, {}),  # accumulation 1: a larger batch would grow the global one
        (32, None, {"min": 1, "max": 64}, 100.0, {}),  # unknown accumulation: nothing to keep it against
    ],
)
def test_keeping_the_global_batch_preserves_batch_times_accumulation_exactly(
    batch: int, steps: int | None, bounds: dict[str, int], per_sample: float, expected: dict[str, str]
) -> None:
    accumulation = TUNABLES.gradient_accumulation_steps
    assert accumulation is not None
    tunables = TUNABLES.model_copy(update={"gradient_accumulation_steps": accumulation.model_copy(update=bounds)})
    memory = [(b, 4_096 + per_sample * b) for b in (batch, 2 * batch)]  # 4 GiB + `per_sample` MiB per sample
    w = window(
        gpu_utilization=[35.0] * 60,
        batch_size=batch,
        memory_used_mib=memory[0][1],
        gradient_accumulation_steps=steps,
        memory_by_batch=memory,
    )
    _, recommendation = run(w, tunables=tunables)["SmallBatch"]
    assert recommendation is not None and recommendation.changes == expected
    if expected:
        assert int(expected["BATCH_SIZE"]) * int(expected["ACCUM"]) == batch * (steps or 0), "global batch kept"
    else:
        assert recommendation.message.startswith("No larger batch size to recommend")


def test_one_observation_gives_a_conservative_batch() -> None:
    assert fit_memory([(32, 8_000.0)]) == (0.0, 250.0)
    assert fit_memory([(32, 8_000.0), (64, 7_000.0)]) is None  # memory fell as batch grew: no model
    w = window(gpu_utilization=[35.0] * 60, batch_size=32, memory_used_mib=8_000.0)
    assert run(w, tunables=FREE_BATCH)["SmallBatch"][1].changes["BATCH_SIZE"] == "128"  # 277 fit; at most 4x


@pytest.mark.parametrize(("batch", "fits", "expected"), [(100, 10_000, 256), (128, 10_000, 512), (128, 300, 256)])
def test_one_recommendation_raises_the_batch_at_most_four_times(batch: int, fits: int, expected: int) -> None:
    tunable = FREE_BATCH.batch_size
    assert tunable is not None
    chosen = larger_batch(batch, fits, tunable=tunable, accumulation=None, steps=None, keep=False)
    assert chosen == (expected, None)
    assert expected <= 4 * batch


def test_a_job_waiting_for_input_gets_no_finding_about_its_gpu_step() -> None:
    """Measured on an H200: a starved conv net's SmallBatch (batch 128 -> 16384) gave 1.02x and its
    NoMixedPrecision 1.00x, while the input fix gave 15x. Only the input finding may stand."""
    starved = window(
        gpu_utilization=[8.0] * 60,
        data_wait_fraction=[0.9] * 60,
        num_workers=0,
        pin_memory=False,
        memory_used_mib=1_100.0,
        batch_size=128,
        autocast=False,
        tensor_activity=0.0,
    )
    found = run(starved)
    assert "InputBound" in found
    assert not {"SmallBatch", "NoMixedPrecision"} & set(found)
    fed = window(
        gpu_utilization=[8.0] * 60, memory_used_mib=1_100.0, batch_size=128, autocast=False, tensor_activity=0.0
    )
    assert {"SmallBatch", "NoMixedPrecision"} <= set(run(fed)), "the same job fed: both stand"


def test_no_small_batch_finding_when_memory_is_used_or_the_gpu_busy() -> None:
    assert "SmallBatch" not in run(window(gpu_utilization=[35.0] * 60, memory_used_mib=70_000.0))
    assert "SmallBatch" not in run(window(memory_used_mib=10_000.0))


def test_no_mixed_precision_on_tensor_core_gpus_only() -> None:
    _, recommendation = run(window(autocast=False, tensor_activity=0.01))["NoMixedPrecision"]
    assert recommendation is not None and recommendation.message == "Enable automatic mixed precision with bf16."
    assert recommendation.changes == {"USE_AMP": "1"}
    volta = run(window(autocast=False, tensor_activity=None, compute_capability=(7, 0)))["NoMixedPrecision"]
    assert volta[0].confidence == 0.6  # no tensor-activity measurement: less sure
    assert "fp16" in volta[1].message
    assert "NoMixedPrecision" not in run(window(autocast=False, compute_capability=(6, 1)))
    assert "NoMixedPrecision" not in run(window(autocast=False, tensor_activity=0.4))
    assert "NoMixedPrecision" not in run(window(autocast=None))


def test_the_mixed_precision_gain_is_bounded_by_what_the_gpu_computes() -> None:
    """Amdahl with the hardware's gain: only the share of time the GPU computes gets faster."""
    busy = run(window(autocast=False, tensor_activity=0.01, gpu_utilization=[92.0] * 60))["NoMixedPrecision"][1]
    assert busy.expected_speedup == pytest.approx(1 / (0.08 + 0.92 / 15), abs=0.01)  # H100 (9.0): 7.1x
    assert busy.expected_effect.startswith("at most 7.1x steps per second: the GPU computes 92% of the time")
    waiting = run(window(autocast=False, tensor_activity=0.01, gpu_utilization=[40.0] * 60, compute_capability=(8, 6)))
    assert waiting["NoMixedPrecision"][1].expected_speedup == pytest.approx(1 / (0.6 + 0.4 / 4), abs=0.01)  # 1.4x
    all_along = run(window(autocast=False, tensor_activity=0.01, gpu_utilization=[100.0] * 60))["NoMixedPrecision"]
    assert all_along[1].expected_speedup == 15.0, "the H200's 10.3x measured (README) is within it"


def test_idle_job_gets_only_the_idle_finding() -> None:
    found = run(window(seconds_since_last_step=1800.0, gpu_utilization=[0.0] * 60, autocast=False))
    assert list(found) == ["Idle"]
    assert found["Idle"][0].message == "No training step for 30 minutes while 1 GPU(s) stay allocated."


def test_an_idle_job_that_made_steps_is_recommended_suspend_and_told_when() -> None:
    _, recommendation = run(window(seconds_since_last_step=2880.0, gpu_utilization=[1.0] * 60, gpus=4))["Idle"]
    assert recommendation is not None and recommendation.action == "Suspend"
    assert recommendation.changes == {"idleSeconds": "2880"}, "Suspend acts on how long, at the time it acts"
    assert "this one would be in 12 minutes" in recommendation.message, "1 h by default, 48 min idle"
    assert recommendation.expected_effect == "4 GPU(s) free for other jobs"
    late = run(window(seconds_since_last_step=4000.0, gpu_utilization=[1.0] * 60))["Idle"][1]
    assert late is not None and "this one would be now" in late.message
    evaluating = window(seconds_since_last_step=2880.0, gpu_utilization=[80.0] * 60)
    assert "Idle" not in run(evaluating), "no step, but its GPUs are busy (an evaluation pass): not idle"


def test_a_job_that_never_made_a_step_is_idle_once_it_has_had_the_time() -> None:
    # No last-step series at all; its sidecar reports its 2 GPUs, barely used.
    never = {"seconds_since_last_step": None, "data_wait_fraction": [], "gpu_utilization": [2.0] * 60, "gpus": 2}
    finding, recommendation = run(window(**never))["Idle"]
    assert finding.message == "No training step since the job started 60 minutes ago while 2 GPU(s) stay allocated."
    assert finding.evidence["secondsSinceStartNoStep"] == "3600" and "secondsSinceLastStep" not in finding.evidence
    assert recommendation is None
    assert "Idle" not in run(window(**{**never, "job_age_seconds": 400})), "running for less than 10 minutes"
    assert "Idle" not in run(window(**{**never, "gpus": 0, "gpu_utilization": []})), "no sidecar reports GPUs"
    busy = {**never, "gpu_utilization": [90.0] * 60}
    assert "Idle" not in run(window(**busy)), "a trainer that reports no steps but keeps its GPUs busy"
    assert "Idle" not in run(window(**{**never, "data_wait_fraction": [0.1] * 60})), "it steps: data wait says so"


def test_grace_period_and_missing_data_give_no_findings() -> None:
    slow = {"gpu_utilization": [30.0] * 60, "data_wait_fraction": [0.7] * 60}
    assert run(window(job_age_seconds=120, **slow)) == {}
    assert run(window(gpu_utilization=[30.0] * 10, data_wait_fraction=[0.7] * 10)) == {}


def test_hysteresis_keeps_an_active_finding_until_it_clearly_clears() -> None:
    w = window()
    sustain = Sustain()
    mixed = [30.0] * 36 + [90.0] * 24  # 60 % of samples below threshold
    assert not holds(w, mixed, lambda u: u < 50, active=False, sustain=sustain)
    assert holds(w, mixed, lambda u: u < 50, active=True, sustain=sustain)
    assert not holds(w, [30.0] * 20 + [90.0] * 40, lambda u: u < 50, active=True, sustain=sustain)


def test_bad_sustain_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="release_fraction"):
        Sustain(hold_fraction=0.5, release_fraction=0.9)


def test_findings_keep_their_first_appearance() -> None:
    earlier = datetime(2026, 11, 22, 11, 0, tzinfo=UTC)
    w = window(gpu_utilization=[30.0] * 60, data_wait_fraction=[0.7] * 60)
    (finding, _), *_ = diagnose(context(w, frozenset({"InputBound"}), since={"InputBound": earlier}))
    assert finding.since == earlier


def steps(
    workers: int, slow: int | None = None, from_sample: int = 0, samples: int = 60
) -> dict[int, list[tuple[float, float]]]:
    """Per-worker (time, step seconds): 0.5 s each, `slow` at 1.8 s from `from_sample` on."""
    return {
        w: [
            (1000.0 + 15 * i, 1.8 if w == slow and i >= from_sample else 0.5 + 0.01 * ((i * 7 + w) % 3))
            for i in range(samples)
        ]
        for w in range(workers)
    }


def test_an_ongoing_straggler_is_found_with_a_reschedule() -> None:
    finding, recommendation = run(window(worker_step_seconds=steps(8, slow=5, from_sample=40)))["Straggler"]
    assert finding.worker == 5
    assert finding.evidence["worker"] == "5"
    assert "Worker 5 runs" in finding.message
    assert recommendation is not None and recommendation.action.value == "Reschedule"


def test_no_straggler_among_steady_workers_or_after_it_recovered() -> None:
    assert "Straggler" not in run(window(worker_step_seconds=steps(8)))
    recovered = steps(8)
    recovered[5] = [(t, 1.8 if 1000 + 15 * 10 <= t <= 1000 + 15 * 20 else s) for t, s in recovered[5]]
    assert "Straggler" not in run(window(worker_step_seconds=recovered)), "an episode long over is history"
    assert "Straggler" not in run(window(worker_step_seconds=steps(2, slow=1, from_sample=40))), "two workers: no peers"


def test_a_straggler_slow_for_longer_than_the_window_keeps_its_finding_until_it_recovers() -> None:
    """Cycles every minute over a 15-minute window; worker 5 slows down at 10 min and recovers at 50 min."""
    total, slow_from, slow_until = 260, 40, 200
    history = steps(8, slow=5, from_sample=slow_from, samples=total)
    history[5] = [(t, 0.5 if i >= slow_until else s) for i, (t, s) in enumerate(history[5])]
    previous: dict[str, Finding] = {}
    kinds_at: dict[int, list[tuple[str, int | None]]] = {}
    for end in range(60, total + 1, 4):
        w = window(worker_step_seconds={k: v[end - 60 : end] for k, v in history.items()})
        previous = {finding.kind: finding for finding, _ in diagnose(context(w, previous=previous))}
        kinds_at[end] = sorted((kind, f.worker) for kind, f in previous.items())
    slow_cycles = [end for end in kinds_at if end <= slow_until]
    assert all(kinds_at[end] == [("Straggler", 5)] for end in slow_cycles), kinds_at
    # The window stopped reaching back before the slowdown at sample 100: still a Straggler, never a SlowWorker.
    assert any(end - 60 > slow_from for end in slow_cycles)
    assert all(kinds_at[end] == [] for end in kinds_at if end >= slow_until + 3), "cleared once it recovered"
    # Without the carried baseline, a late window shows only a steadily slower worker: what went wrong before.
    assert list(run(window(worker_step_seconds={k: v[140:200] for k, v in history.items()}))) == ["SlowWorker"]


def group_slowed(
    samples: int, slow_from: int, slow_until: int | None = None, slowdown: float = 1.18
) -> dict[int, list[tuple[float, float]]]:
    """`steps(10)` with workers 2, 5 and 7 `slowdown` times slower from `slow_from` (until `slow_until`)."""
    history = steps(10, samples=samples)
    for w in (2, 5, 7):
        history[w] = [
            (t, s * (slowdown if slow_from <= i < (slow_until or samples) else 1.0))
            for i, (t, s) in enumerate(history[w])
        ]
    return history


def test_a_minority_group_slowed_together_is_a_straggler_that_names_the_group() -> None:
    finding, recommendation = run(window(worker_step_seconds=group_slowed(60, 30)))["Straggler"]
    assert finding.worker in {2, 5, 7} and finding.evidence["group"] == "2,5,7"
    assert "Workers 2, 5 and 7 slowed together" in finding.message
    assert recommendation is not None and recommendation.action.value == "Reschedule"
    assert "Straggler" not in run(window(worker_step_seconds=group_slowed(60, 30, 33))), "three samples: noise"


def test_a_group_slow_for_longer_than_the_window_keeps_its_finding_until_it_recovers() -> None:
    """As one straggler does, by the exit rule of a group's episodes."""
    total, slow_from, slow_until = 260, 40, 200
    history = group_slowed(total, slow_from, slow_until)
    previous: dict[str, Finding] = {}
    kinds_at: dict[int, list[tuple[str, str | None]]] = {}
    for end in range(60, total + 1, 4):
        w = window(worker_step_seconds={k: v[end - 60 : end] for k, v in history.items()})
        previous = {finding.kind: finding for finding, _ in diagnose(context(w, previous=previous))}
        kinds_at[end] = sorted((kind, f.evidence.get("group")) for kind, f in previous.items())
    assert all(kinds_at[end] == [("Straggler", "2,5,7")] for end in kinds_at if slow_from + 10 <= end <= slow_until)
    assert any(end - 60 > slow_from for end in kinds_at if end <= slow_until), "the window lost the baseline"
    assert all(kinds_at[end] == [] for end in kinds_at if end >= slow_until + 3), "cleared once it recovered"


def test_a_held_group_member_is_still_slow_by_the_group_exit_rule() -> None:
    """A window all inside a 1.1x slowdown: under the 1.125x a worker alone is still slow from, over
    the 1.025x a group's member is."""
    w = window(worker_step_seconds=group_slowed(60, 0, slowdown=1.1))
    held = {"worker": 2, "peakSlowdown": 1.15, "baselineRatio": "1.0000", "slowSinceUnixSeconds": 1000}
    as_group, alone = (
        {
            finding.kind: finding
            for finding, _ in diagnose(context(w, previous={"Straggler": straggler_finding(evidence)}))
        }
        for evidence in ({**held, "group": "2,5,7"}, held)
    )
    assert as_group["Straggler"].evidence["group"] == "2,5,7" and "Workers 2, 5 and 7" in as_group["Straggler"].message
    assert "Straggler" not in alone


def straggler_finding(evidence: dict[str, object]) -> Finding:
    return Finding(
        kind="Straggler",
        confidence=0.6,
        since=NOW,
        message="",
        worker=2,
        evidence={key: str(value) for key, value in evidence.items()},
    )


def test_workers_in_step_are_skipped_only_where_nothing_could_be_found() -> None:
    """The shortcut for jobs whose step times are all alike gives up no finding (random jobs near its edge)."""
    rng = random.Random(4)
    skipped = 0
    for _ in range(300):
        spread = rng.uniform(1.0, 1.3)
        shape = rng.choice(["noise", "one slow", "one slowing"])
        series = {}
        for w in range(rng.randint(3, 6)):
            points = []
            for i in range(60):
                value = rng.uniform(1.0, spread)
                if shape != "noise" and w == 0 and (shape == "one slow" or i >= 30):
                    value = spread
                points.append((1000.0 + 15 * i, value))
            series[w] = points
        # From five workers a group of two slowed by less than one worker alone must be is a straggler.
        limit = min(math.sqrt(STRAGGLERS.least_slowdown(len(series))), DiagnosisThresholds().persistent_slowdown)
        alike = steps_alike(series, limit)
        assert steps_alike(series, limit, step_extremes(series)) is alike, "extremes taken as read: the same answer"
        if alike:
            skipped += 1
            ratios = peer_ratios((t, w, v) for w, points in series.items() for t, v in points)
            assert episodes_in(ratios, STRAGGLERS) == [] and steadily_slow(ratios, limit) == {}
    assert 50 < skipped < 250, "both sides of the edge were tried"


def test_a_steadily_slower_worker_is_a_milder_finding_without_action() -> None:
    steady = steps(8)
    steady[3] = [(t, seconds * 1.3) for t, seconds in steady[3]]
    finding, recommendation = run(window(worker_step_seconds=steady))["SlowWorker"]
    assert (finding.worker, finding.confidence, recommendation) == (3, 0.3, None)
    assert "Straggler" not in run(window(worker_step_seconds=steady))
    assert "SlowWorker" not in run(window(worker_step_seconds=steps(8))), "within 10 % of the peers"


def test_findings_read_from_one_figure_have_hysteresis_too() -> None:
    """A figure hovering at its threshold starts no finding, and does not clear an active one."""
    steady = steps(8)
    steady[3] = [(t, seconds * 1.095) for t, seconds in steady[3]]  # just under 1.1x its peers
    assert "SlowWorker" not in run(window(worker_step_seconds=steady))
    assert "SlowWorker" in run(window(worker_step_seconds=steady), active=frozenset({"SlowWorker"}))
    steady[3] = [(t, seconds * 1.06) for t, seconds in steps(8)[3]]
    assert "SlowWorker" not in run(window(worker_step_seconds=steady), active=frozenset({"SlowWorker"}))
    fp32 = {"autocast": False, "tensor_activity": 0.11}  # the threshold is 0.1
    assert "NoMixedPrecision" not in run(window(**fp32))
    assert "NoMixedPrecision" in run(window(**fp32), active=frozenset({"NoMixedPrecision"}))
    assert "NoMixedPrecision" not in run(
        window(**{**fp32, "tensor_activity": 0.13}), active=frozenset({"NoMixedPrecision"})
    )
    roomy = {"gpu_utilization": [35.0] * 60, "batch_size": 32, "memory_used_mib": 0.55 * 81_559}  # the limit is half
    assert "SmallBatch" not in run(window(**roomy))
    assert "SmallBatch" in run(window(**roomy), active=frozenset({"SmallBatch"}))


# --- OversizedGPU -------------------------------------------------------------------------------

LIGHT = {"gpu_utilization": [15.0] * 60, "sm_active": [0.08 + 0.02 * (i % 2) for i in range(60)]}


def test_an_oversized_gpu_gets_the_smallest_mig_slice_that_fits() -> None:
    finding, recommendation = run(window(**LIGHT, memory_used_mib=7_000.0))["OversizedGPU"]
    # 90 % of samples at or under 10 % SM activity: 1 of 7 slices; 7,000 MiB + 20 % fits 1g.10gb.
    assert finding.evidence["smActivityP90"] == "0.1"
    assert finding.evidence["migProfile"] == "1g.10gb"
    assert "a MIG slice 1g.10gb would do" in finding.message
    assert recommendation is not None and recommendation.action.value == "MigRepartition"
    assert recommendation.changes == {"migProfile": "1g.10gb", "resource": "nvidia.com/mig-1g.10gb"}
    busier = run(window(gpu_utilization=[40.0] * 60, sm_active=[0.25] * 60, memory_used_mib=30_000.0))
    assert busier["OversizedGPU"][1].changes["migProfile"] == "3g.40gb"


@pytest.mark.parametrize(
    ("actions", "action"),
    [
        (frozenset(), "MigRepartition"),
        (frozenset({"MigRepartition", "Pack"}), "MigRepartition"),
        (frozenset({"Pack"}), "Pack"),
    ],
)
def test_a_job_that_may_only_be_packed_is_recommended_free_slices_of_the_same_profile(
    actions: frozenset[str], action: str
) -> None:
    """The same measured slice either way; the remedy is the one the job lets gpuwise take."""
    ctx = context(window(**LIGHT, memory_used_mib=7_000.0))
    ctx.actions = actions
    (recommendation,) = [r for f, r in diagnose(ctx) if f.kind == "OversizedGPU"]
    assert recommendation is not None and recommendation.action.value == action
    assert recommendation.changes == {"migProfile": "1g.10gb", "resource": "nvidia.com/mig-1g.10gb"}


def test_oversized_reads_utilization_where_sm_activity_is_not_measured() -> None:
    finding, _ = run(window(gpu_utilization=[12.0] * 60, memory_used_mib=7_000.0))["OversizedGPU"]
    assert finding.evidence["gpuUtilizationP90"] == "0.12"
    assert "GPU utilization" in finding.message


L4_MIB = 23_034.0  # what NVML reports for an NVIDIA L4 (24 GB)


def test_a_gpu_without_mig_gets_pack_onto_the_time_sliced_share_it_needs() -> None:
    light_l4 = window(**LIGHT, memory_used_mib=1_500.0, memory_total_mib=L4_MIB, gpu_model="NVIDIA L4")
    finding, recommendation = run(light_l4)["OversizedGPU"]
    assert finding.evidence["migProfile"] == "none: NVIDIA L4 has no MIG profiles"
    # 10 % SM activity filled to 80 %: 12.5 % of the GPU; 1,500 MiB + 20 % is 7.8 % of its memory.
    assert finding.evidence["gpuShare"] == "0.13"
    assert "a 13% share of a time-sliced GPU would do; NVIDIA L4 has no MIG profiles." in finding.message
    assert recommendation is not None and recommendation.action.value == "Pack"
    assert recommendation.changes == {"share": "time-slicing", "gpuShare": "0.13"}
    assert "at least 13% of one" in recommendation.message


def test_the_pack_share_is_what_the_memory_needs_when_it_needs_more_than_the_compute() -> None:
    _, recommendation = run(window(**LIGHT, memory_used_mib=7_000.0, memory_total_mib=L4_MIB, gpu_model="L4"))[
        "OversizedGPU"
    ]
    assert recommendation is not None and recommendation.changes["gpuShare"] == "0.37", "7,000 × 1.2 / 23,034"


def test_an_unknown_gpu_model_gets_pack_and_says_the_model_is_not_known() -> None:
    finding, recommendation = run(window(**LIGHT, memory_used_mib=7_000.0, gpu_model=None))["OversizedGPU"]
    assert finding.evidence["migProfile"] == "none: the GPU model is not known"
    assert recommendation is not None and recommendation.action.value == "Pack"


def test_no_pack_when_no_second_light_job_fits_beside_it_and_mig_models_keep_mig() -> None:
    # 43 % of the memory + 20 %: over half a GPU; nothing as light fits beside it.
    assert "OversizedGPU" not in run(window(**LIGHT, memory_used_mib=10_000.0, memory_total_mib=L4_MIB, gpu_model="L4"))
    # 28 % SM activity filled to 80 %: 35 % of the compute, still a share.
    busy = {"gpu_utilization": [40.0] * 60, "sm_active": [0.28] * 60}
    _, recommendation = run(window(**busy, memory_used_mib=1_000.0, memory_total_mib=L4_MIB, gpu_model="L4"))[
        "OversizedGPU"
    ]
    assert recommendation is not None and recommendation.changes["gpuShare"] == "0.35"
    # A MIG-capable model keeps MigRepartition, never Pack.
    _, mig = run(window(**LIGHT, memory_used_mib=7_000.0))["OversizedGPU"]
    assert mig is not None and mig.action.value == "MigRepartition" and "share" not in mig.changes


def test_no_oversized_finding_when_the_gpu_is_needed_or_the_job_is_not_one_gpu_per_worker() -> None:
    bursty = {"gpu_utilization": [15.0] * 60, "sm_active": [0.9 if i % 4 == 0 else 0.08 for i in range(60)]}
    assert "OversizedGPU" not in run(window(**bursty, memory_used_mib=7_000.0)), "bursts to 90 % need the GPU"
    assert "OversizedGPU" not in run(window(**LIGHT, memory_used_mib=45_000.0)), "over half the memory"
    assert "OversizedGPU" not in run(window(**LIGHT, memory_used_mib=38_000.0)), "38 GB + 20 % fits no slice < 7g"
    assert "OversizedGPU" not in run(window(**LIGHT, memory_used_mib=7_000.0, gpus=2)), "two GPUs, one worker"
    on_a_slice = window(**LIGHT, memory_used_mib=3_000.0, memory_total_mib=9_984.0)  # already on 1g.10gb
    assert "OversizedGPU" not in run(on_a_slice), "no smaller slice than the one it has"
    waiting = run(window(**LIGHT, memory_used_mib=7_000.0, data_wait_fraction=[0.6] * 60))
    assert "InputBound" in waiting and "OversizedGPU" not in waiting, "fix the input before sizing the GPU"
    assert "OversizedGPU" not in run(window(**LIGHT, memory_used_mib=7_000.0, job_age_seconds=60)), "grace"


# --- OversizedGPU: Reschedule to a smaller GPU class --------------------------------------------

L40S_MIB = 46_068.0  # what NVML reports for an NVIDIA L40S (48 GB)
CLASSES = tuple(
    SizedGpuClass(name, spec, {"nvidia.com/gpu.product": spec.model.replace(" ", "-")})
    for name, spec in (("l40s", gpu_spec("L40S")), ("l4", gpu_spec("L4")))
    if spec is not None
)
# A light job on an L40S: its GPU busy 4.9 % of the time, its peak 19,070 MiB.
ON_L40S: dict[str, Any] = {
    "gpu_utilization": [4.9] * 60,
    "sm_active": [0.03] * 60,
    "memory_used_mib": 19_070.0,
    "memory_total_mib": L40S_MIB,
    "gpu_model": "NVIDIA L40S",
}


def oversized(
    w: JobWindow, actions: frozenset[str] = frozenset({"Reschedule"}), classes: tuple[SizedGpuClass, ...] = CLASSES
) -> Recommendation:
    """OversizedGPU's recommendation for a job that lists `actions`, on a platform with `classes`."""
    ctx = context(w)
    ctx.actions, ctx.gpu_classes = actions, classes
    (recommendation,) = [r for f, r in diagnose(ctx) if f.kind == "OversizedGPU"]
    assert recommendation is not None
    return recommendation


def test_an_oversized_job_that_may_be_rescheduled_moves_to_the_smallest_class_that_holds_it() -> None:
    recommendation = oversized(window(**ON_L40S))
    assert recommendation is not None and recommendation.action.value == "Reschedule"
    assert recommendation.changes == {"gpuClass": "l4"}
    assert recommendation.message == (
        "Move the job to GPU class l4 (NVIDIA L4, 24 GB; nodes nvidia.com/gpu.product=NVIDIA-L4) and restart it "
        "from a checkpoint: its memory peak of 20.0 GB plus 20% fits, and its GPU computes 4.9% of the time."
    )
    # L40S over L4: fp32 91.6 / 30.3 TFLOPS is the largest of the three ratios; 1 + 0.049 × 2.02 = 1.099.
    assert recommendation.expected_effect == (
        "frees 1 NVIDIA L40S GPU(s) for jobs that need them; steps at most 10% longer on the NVIDIA L4 by a "
        "conservative estimate (the GPU busy 4.9% of the time, its work up to 3.0x longer by the datasheets' fp32 "
        "peaks); measured after the move"
    )
    assert recommendation.expected_speedup is None, "no upper bound on samples/s is claimed"


def test_the_memory_peak_plus_its_margin_must_fit_the_smaller_class() -> None:
    # An L4's 24 GB are 22,888 MiB: 19,070 MiB × 1.2 = 22,884 fits, 19,080 × 1.2 = 22,896 does not.
    assert oversized(window(**{**ON_L40S, "memory_used_mib": 19_070.0})).changes == {"gpuClass": "l4"}
    over = oversized(window(**{**ON_L40S, "memory_used_mib": 19_080.0}))
    assert over is not None and over.action.value == "Pack", "no smaller class holds it: the share, as before"


def test_the_steps_must_stay_within_the_conservative_bound() -> None:
    # 1 + 0.050 × 2.02 = 1.101: over the 10 % a move may cost.
    busier = oversized(window(**{**ON_L40S, "gpu_utilization": [5.0] * 60}))
    assert busier is not None and busier.action.value == "Pack"
    # From an H100 (3,350 GB/s) an L4 (300 GB/s) bounds its work at 11.2x, an L40S (864 GB/s) at 3.9x:
    # at 2 % busy only the L40S keeps the steps within 10 %, though the L4 holds the memory.
    on_h100 = window(gpu_utilization=[2.0] * 60, sm_active=[0.02] * 60, memory_used_mib=9_000.0)
    recommendation = oversized(on_h100)
    assert recommendation is not None and recommendation.changes == {"gpuClass": "l40s"}
    assert "steps at most 6% longer on the NVIDIA L40S" in (recommendation.expected_effect or "")
    assert "up to 3.9x longer by the datasheets' memory bandwidth peaks" in (recommendation.expected_effect or "")


def test_no_move_for_a_busy_or_waiting_job() -> None:
    busy = run(window(**{**ON_L40S, "gpu_utilization": [60.0] * 60, "sm_active": [0.5] * 60}))
    assert "OversizedGPU" not in busy, "a busy GPU is not oversized"
    ctx = context(window(**{**ON_L40S, "data_wait_fraction": [0.6] * 60, "gpu_utilization": [4.9] * 60}))
    ctx.actions, ctx.gpu_classes = frozenset({"Reschedule"}), CLASSES
    kinds = {f.kind: r for f, r in diagnose(ctx)}
    assert "OversizedGPU" not in kinds and "InputBound" in kinds, "fix the input before sizing the GPU"


@pytest.mark.parametrize(
    ("actions", "action"),
    [
        (frozenset(), "Pack"),
        (frozenset({"AdjustConfig"}), "Pack"),
        (frozenset({"Reschedule", "Pack"}), "Pack"),
        (frozenset({"Reschedule", "MigRepartition"}), "Pack"),
        (frozenset({"Reschedule", "AdjustConfig"}), "Reschedule"),
    ],
)
def test_reschedule_only_for_a_job_that_lists_it_and_no_slice_or_share(actions: frozenset[str], action: str) -> None:
    recommendation = oversized(window(**ON_L40S), actions)
    assert recommendation is not None and recommendation.action.value == action


def test_no_move_without_a_smaller_declared_class_or_what_sizes_one() -> None:
    assert oversized(window(**ON_L40S), classes=()).action.value == "Pack", "no class declared"
    h100 = gpu_spec("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    larger = (SizedGpuClass("h100", h100), SizedGpuClass("l40s", CLASSES[0].spec))
    assert oversized(window(**ON_L40S), classes=larger).action.value == "Pack", "larger, or the same"
    unknown = oversized(window(**{**ON_L40S, "gpu_model": "NVIDIA RTX 6000 Ada Generation"}))
    assert unknown is not None and unknown.action.value == "Pack", "no datasheet figures for the GPU it has"
    sm_only = oversized(window(**{**ON_L40S, "gpu_utilization": []}))
    assert sm_only is not None and sm_only.action.value == "Pack", "SM activity does not bound the busy time"


@pytest.mark.parametrize(
    ("actions", "action"),
    [
        (frozenset({"Reschedule"}), "Reschedule"),
        (frozenset({"Reschedule", "MigRepartition"}), "MigRepartition"),
        (frozenset({"Reschedule", "Pack"}), "Pack"),
        (frozenset(), "MigRepartition"),
    ],
)
def test_on_a_mig_capable_gpu_the_slice_comes_first(actions: frozenset[str], action: str) -> None:
    on_h100 = window(gpu_utilization=[2.0] * 60, sm_active=[0.02] * 60, memory_used_mib=9_000.0)
    recommendation = oversized(on_h100, actions)
    assert recommendation is not None and recommendation.action.value == action


# --- Throttling ---------------------------------------------------------------------------------


def test_a_thermally_throttled_worker_is_found_and_moved() -> None:
    clocks = {0: [0.0] * 60, 1: [0.0] * 60, 2: [float(0x40 | 0x20)] * 55 + [0.0] * 5}
    finding, recommendation = run(window(clock_slowdowns=clocks))["Throttling"]
    assert finding.worker == 2
    assert finding.evidence["reasons"] == "software thermal slowdown, hardware thermal slowdown"
    assert finding.evidence["throttledShare"] == "0.917"
    assert recommendation is not None and recommendation.action.value == "Reschedule"


def test_no_throttling_finding_without_the_series_or_when_it_passes() -> None:
    assert "Throttling" not in run(window())
    brief = {0: [float(0x8) if i % 5 == 0 else 0.0 for i in range(60)]}  # 20 % of samples
    assert "Throttling" not in run(window(clock_slowdowns=brief))
    assert "Throttling" not in run(window(clock_slowdowns={0: [float(0x40)] * 10})), "too few samples"


# --- CommunicationBound --------------------------------------------------------------------------

EXCHANGING = {
    "gpu_utilization": [38.0] * 60,
    "sm_active": [0.2] * 60,
    "data_wait_fraction": [0.03] * 60,
    "pcie_tx_bytes_per_second": 2.0e9,
    "pcie_rx_bytes_per_second": 2.4e9,
    "gradient_accumulation_steps": 2,
}


def test_a_multi_node_job_waiting_on_its_exchange_is_communication_bound() -> None:
    finding, recommendation = run(window(**EXCHANGING, worker_step_seconds=steps(4)))["CommunicationBound"]
    assert finding.evidence["outsideComputeAndInput"] == "0.77"
    assert finding.evidence["workers"] == "4"
    assert "4 workers spend about 77% of each step neither computing" in finding.message
    assert recommendation is not None and recommendation.changes == {}, "the job keeps its global batch"
    free = Tunables.model_validate({"gradientAccumulationSteps": {"env": "ACCUM", "min": 1, "max": 16}})
    found = run(window(**EXCHANGING, worker_step_seconds=steps(4)), tunables=free)
    assert found["CommunicationBound"][1].changes == {"ACCUM": "4"}


def test_communication_bound_needs_every_piece_of_evidence() -> None:
    assert "CommunicationBound" not in run(window(**EXCHANGING)), "one worker: nothing crosses nodes"
    lopsided = {**EXCHANGING, "pcie_tx_bytes_per_second": 0.1e9, "pcie_rx_bytes_per_second": 3e9}
    assert "CommunicationBound" not in run(window(**lopsided, worker_step_seconds=steps(4))), "input copies"
    unmeasured = {**EXCHANGING, "pcie_tx_bytes_per_second": None}
    assert "CommunicationBound" not in run(window(**unmeasured, worker_step_seconds=steps(4)))
    waiting = run(window(**{**EXCHANGING, "data_wait_fraction": [0.5] * 60}, worker_step_seconds=steps(4)))
    assert "CommunicationBound" not in waiting and "InputBound" in waiting
    bursty = {**EXCHANGING, "sm_active": [0.2 if i % 10 == 0 else 0.85 for i in range(60)]}
    bursty["gpu_utilization"] = [95.0] * 60
    assert "CommunicationBound" not in run(window(**bursty, worker_step_seconds=steps(4)))
