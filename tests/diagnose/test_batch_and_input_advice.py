"""The exact batch and loader-worker values SmallBatch and InputBound propose, and what they say.

These values are applied by AdjustConfig and restart the job, so each must be the one the rule
promises: the batch a power of two within 4x today's, what fits in memory and the tunable's
bounds, or the divisor that keeps batch × accumulation; as many workers as hide the wait, capped
by the tunable and the process's cores. The messages and speedups are what users read.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuwise.api.trainingjob import IntTunable, Tunables
from gpuwise.diagnose.rules import MAX_BATCH_FACTOR, fit_memory, larger_batch
from gpuwise.diagnose.window import JobWindow
from tests.diagnose.test_rules import FREE_BATCH, TUNABLES, run, window

SAFE_MIB = 0.85 * 81_559  # what a batch may fill of the H100 `window` reports
PREFETCH = "raise the DataLoader's prefetch_factor (batches each worker loads ahead; 2 by default)"


def batch(*, min: int = 1, max: int = 1024) -> IntTunable:
    return IntTunable(env="BATCH_SIZE", min=min, max=max)


def accumulation(*, min: int = 1, max: int = 64) -> IntTunable:
    return IntTunable(env="ACCUM", min=min, max=max)


def linear(fixed: float, per_sample: float, *batches: int) -> list[tuple[int, float]]:
    return [(b, fixed + per_sample * b) for b in batches]


def small(batch_size: int, memory: list[tuple[int, float]], **overrides: Any) -> JobWindow:
    """A job using little of its GPU at `batch_size`, with the memory it reported per batch."""
    fields: dict[str, Any] = {
        "gpu_utilization": [35.0] * 60,
        "batch_size": batch_size,
        "memory_used_mib": memory[0][1],
        "memory_by_batch": memory,
    }
    return window(**{**fields, **overrides})


# fit_memory


def test_the_memory_model_ignores_points_without_a_positive_batch_and_memory() -> None:
    assert fit_memory([(32, 8_000.0), (0, 1_000.0), (-8, 500.0)]) == (0.0, 250.0)
    assert fit_memory([(0, 5_000.0)]) is None
    assert fit_memory([(32, 0.0)]) is None and fit_memory([(32, -1.0)]) is None
    assert fit_memory([(1, 300.0)]) == (0.0, 300.0), "batch 1 is a batch"
    assert fit_memory([(32, 0.5)]) == (0.0, 0.5 / 32), "under 1 MiB is still memory"


def test_a_fitted_model_needs_memory_that_grows_with_the_batch() -> None:
    assert fit_memory([(32, 8_000.0), (64, 8_000.0)]) is None, "flat: no slope to size a batch with"
    assert fit_memory([(32, 1_000.0), (64, 1_016.0)]) == (984.0, 0.5), "half a MiB per sample is a slope"
    assert fit_memory([(32, 7_296.0), (64, 10_496.0), (128, 16_896.0)]) == pytest.approx((4_096.0, 100.0))


def test_flat_memory_gives_no_model_whatever_its_rounding() -> None:
    # Values whose mean is not exactly the value in binary: the slope must still come out 0, not noise.
    assert fit_memory([(b, 1_014.8) for b in (16, 32, 48)]) is None
    assert fit_memory([(b, 1_188.7) for b in (16, 32, 64, 128)]) is None
    assert fit_memory([(b, 1_457.9) for b in (8, 16, 32)]) is None


@given(mib=st.floats(1.0, 80_000.0), batches=st.sets(st.integers(1, 4_096), min_size=2, max_size=6))
def test_memory_that_does_not_grow_with_the_batch_never_gives_a_model(mib: float, batches: set[int]) -> None:
    """Flat memory has slope 0 exactly: no model, for every value. Rounding noise in the slope
    (1e-30 MiB per sample) made a model that let any batch fit, for some values and not others."""
    assert fit_memory([(b, mib) for b in batches]) is None


def test_the_fixed_memory_is_never_negative() -> None:
    # 125 MiB per sample from 3000 MiB at 32 would put -1000 MiB at batch 0: the model says 0.
    assert fit_memory([(32, 3_000.0), (64, 7_000.0)]) == (0.0, 125.0)
    assert fit_memory([(32, 3_200.5), (64, 6_400.0)]) == (1.0, 3_199.5 / 32)
    assert fit_memory([(32, 3_200.25), (64, 6_400.0)]) == (0.5, 3_199.75 / 32)


# larger_batch


def test_without_keep_the_batch_becomes_the_largest_power_of_two_that_fits() -> None:
    free = batch()
    assert larger_batch(32, 100, tunable=free, accumulation=None, steps=None, keep=False) == (64, None)
    assert larger_batch(32, 10_000, tunable=free, accumulation=None, steps=None, keep=False) == (128, None)
    assert larger_batch(32, 10_000, tunable=batch(max=96), accumulation=None, steps=None, keep=False) == (
        96,
        None,
    )


def test_without_keep_nothing_is_proposed_when_no_larger_batch_fits() -> None:
    free = batch()
    refusal = "128 is already the largest that fits, or that the tunable's max (1024) allows"
    assert larger_batch(128, 200, tunable=free, accumulation=None, steps=None, keep=False) == refusal, "128 again"
    for fits in (0, -50):  # fixed memory beyond the safe share: nothing fits
        chosen = larger_batch(32, fits, tunable=free, accumulation=None, steps=None, keep=False)
        assert chosen == "32 is already the largest that fits, or that the tunable's max (1024) allows"
    assert isinstance(larger_batch(0, 100, tunable=free, accumulation=None, steps=None, keep=False), str)


def test_a_free_batch_is_never_proposed_under_the_tunable_s_min() -> None:
    """AdjustConfig clamps a value to the tunable's bounds: 8 under a min of 16 would be applied as 16,
    which does not fit in the 12 samples' memory the proposal was sized for."""
    chosen = larger_batch(4, 12, tunable=batch(min=16, max=64), accumulation=None, steps=None, keep=False)
    assert chosen == "8, the largest power of two that fits, is under the tunable's min (16)"
    at_min = larger_batch(4, 12, tunable=batch(min=8, max=64), accumulation=None, steps=None, keep=False)
    assert at_min == (8, None), "the min itself is within the bounds"
    already = larger_batch(8, 12, tunable=batch(min=16, max=64), accumulation=None, steps=None, keep=False)
    assert already == "8 is already the largest that fits, or that the tunable's max (64) allows"
    per_sample = (SAFE_MIB - 4_096) / 12.5  # 12 samples fit
    w = small(4, linear(4_096, per_sample, 4, 8))
    _, recommendation = run(w, tunables=FREE_BATCH.model_copy(update={"batch_size": batch(min=16)}))["SmallBatch"]
    assert recommendation is not None and recommendation.changes == {}
    assert recommendation.message.startswith("No larger batch size to recommend: 8, the largest power of two")


def test_keeping_the_global_batch_is_bounded_by_what_fits_and_the_tunable_s_max() -> None:
    accum = accumulation()
    # 32 × 8 = 256: 128 × 2 within 4x, unless memory (100) or the tunable (max 100) stops it at 64 × 4.
    assert larger_batch(32, 10_000, tunable=batch(), accumulation=accum, steps=8, keep=True) == (128, 2)
    assert larger_batch(32, 100, tunable=batch(), accumulation=accum, steps=8, keep=True) == (64, 4)
    assert larger_batch(32, 10_000, tunable=batch(max=100), accumulation=accum, steps=8, keep=True) == (64, 4)


def test_keeping_the_global_batch_takes_the_largest_divisor_not_just_even_steps() -> None:
    # 24 × 10 = 240; at most 95 fits: 80 × 3 (95, 94, ... are no divisors of 240).
    assert larger_batch(24, 95, tunable=batch(), accumulation=accumulation(), steps=10, keep=True) == (80, 3)


def test_keeping_the_global_batch_keeps_the_accumulation_within_its_bounds_inclusive() -> None:
    assert larger_batch(32, 10_000, tunable=batch(), accumulation=accumulation(max=2), steps=8, keep=True) == (
        128,
        2,
    )
    # Exact integers: an accumulation beyond float precision is still compared with its max exactly.
    huge = 2**55 + 4  # 4 × (2**53 + 1): as a float it rounds to 2**55
    chosen = larger_batch(1, 4, tunable=batch(), accumulation=accumulation(max=2**53), steps=huge, keep=True)
    assert isinstance(chosen, str), "2**53 + 1 exceeds the accumulation's max"


def test_keeping_the_global_batch_keeps_the_batch_within_the_tunable_s_min() -> None:
    # A job running below its declared min: raised to the min itself, never to one under it.
    assert larger_batch(8, 10_000, tunable=batch(min=16, max=16), accumulation=accumulation(), steps=4, keep=True) == (
        16,
        2,
    )
    below = larger_batch(4, 10_000, tunable=batch(min=17, max=64), accumulation=accumulation(), steps=4, keep=True)
    assert isinstance(below, str), "16 × 1 keeps 16 but is under the min of 17"


@given(
    today=st.integers(1, 512),
    steps=st.integers(1, 64),
    fits=st.integers(-100, 5_000),
    bounds=st.tuples(st.integers(1, 2_048), st.integers(1, 2_048)).map(sorted),
    accum_bounds=st.tuples(st.integers(1, 64), st.integers(1, 64)).map(sorted),
)
def test_a_kept_global_batch_is_exact_and_every_bound_holds(
    today: int, steps: int, fits: int, bounds: list[int], accum_bounds: list[int]
) -> None:
    tunable = batch(min=bounds[0], max=bounds[1])
    accum = accumulation(min=accum_bounds[0], max=accum_bounds[1])
    chosen = larger_batch(today, fits, tunable=tunable, accumulation=accum, steps=steps, keep=True)
    upper = min(fits, tunable.max, MAX_BATCH_FACTOR * today)
    candidates = [
        b
        for b in range(max(today + 1, tunable.min), upper + 1)
        if (today * steps) % b == 0 and accum.min <= today * steps // b <= accum.max
    ]
    if not candidates:
        assert isinstance(chosen, str)
        return
    assert chosen == (max(candidates), today * steps // max(candidates)), "the largest batch that keeps it"


@given(
    today=st.integers(1, 512),
    fits=st.integers(-100, 5_000),
    bounds=st.tuples(st.integers(1, 2_048), st.integers(1, 2_048)).map(sorted),
)
def test_a_free_batch_grows_to_a_power_of_two_within_4x_what_fits_and_the_bounds(
    today: int, fits: int, bounds: list[int]
) -> None:
    bottom, top = bounds
    chosen = larger_batch(today, fits, tunable=batch(min=bottom, max=top), accumulation=None, steps=None, keep=False)
    if isinstance(chosen, str):
        powers = (2**k for k in range(13))
        assert not [p for p in powers if max(today + 1, bottom) <= p <= min(fits, top, MAX_BATCH_FACTOR * today)]
        return
    proposal, steps = chosen
    assert steps is None
    assert max(today + 1, bottom) <= proposal <= min(fits, top, MAX_BATCH_FACTOR * today)
    assert proposal == top or proposal == 2 ** int(math.log2(proposal)), "a power of two, or the max"
    assert 2 * proposal > min(fits, MAX_BATCH_FACTOR * today) or proposal == top, "the largest one"


# small_batch


def test_the_batch_proposed_is_what_fits_beside_the_fixed_memory() -> None:
    # 20 GiB fixed, and a per-sample size with which 100.5 samples fit in 85% of the GPU: 64, not 128.
    per_sample = (SAFE_MIB - 20_000) / 100.5
    finding, recommendation = run(small(32, linear(20_000, per_sample, 32, 64)), tunables=FREE_BATCH)["SmallBatch"]
    assert finding.evidence["memoryModel"] == f"20000 MiB + {per_sample:.1f} MiB/sample"
    assert recommendation is not None and recommendation.changes == {"BATCH_SIZE": "64"}
    # Twice the batch: at most twice the samples/s, though the GPU (35% busy) could take 2.9x.
    assert recommendation.expected_speedup == 2.0
    assert recommendation.expected_effect == (
        "at most 2.0x samples/s: the GPU is 35% busy at batch 32, and a batch 2.0x larger fills it no further than that"
    )


def test_a_free_batch_says_the_global_batch_grows_and_its_speedup_is_capped_by_the_gpu() -> None:
    w = small(32, linear(4_096, 100, 32, 64), gpu_utilization=[30.0] * 60)
    _, recommendation = run(w, tunables=FREE_BATCH)["SmallBatch"]
    assert recommendation is not None and recommendation.changes == {"BATCH_SIZE": "128"}
    assert recommendation.message == (
        "Raise the batch size to 128 (fits in 85% of GPU memory). The global batch grows with it, which changes "
        "the optimisation: scale the learning rate with the batch (with a warm-up), or declare keepGlobalBatchSize "
        "and gradientAccumulationSteps so that gpuwise keeps the global batch."
    )
    # 4x the batch, but a GPU 30% busy gets at most 100/30 = 3.33x.
    assert recommendation.expected_speedup == 3.33
    assert recommendation.expected_effect == (
        "at most 3.3x samples/s: the GPU is 30% busy at batch 32, and a batch 4.0x larger fills it no further than that"
    )


def test_a_kept_global_batch_says_both_values_and_what_stays() -> None:
    w = small(32, linear(4_096, 100, 32, 64), gradient_accumulation_steps=8)
    finding, recommendation = run(w)["SmallBatch"]
    assert finding.evidence["gradientAccumulationSteps"] == "8"
    assert recommendation is not None and recommendation.message == (
        "Raise the batch size to 128 (fits in 85% of GPU memory) and gradient accumulation from 8 to 2: "
        "batch × accumulation stays 256, so the global batch does not change."
    )


def test_without_a_batch_tunable_small_batch_asks_for_one() -> None:
    undeclared = TUNABLES.model_copy(update={"batch_size": None})
    _, recommendation = run(small(32, linear(4_096, 100, 32, 64)), tunables=undeclared)["SmallBatch"]
    assert recommendation is not None and recommendation.changes == {}
    assert recommendation.message == (
        "Raise the batch size; declare spec.efficiency.tunables.batchSize so gpuwise can compute it."
    )
    assert recommendation.expected_speedup is None and recommendation.expected_effect is None


def test_a_declared_batch_without_a_memory_model_is_not_told_to_declare_it() -> None:
    # Memory flat across the batches reported: no model, so no value; the batch tunable is declared,
    # so the advice says why there is no value rather than asking for the tunable again.
    _, recommendation = run(small(32, [(16, 4_096.0), (32, 4_096.0)]))["SmallBatch"]
    assert recommendation is not None and recommendation.changes == {}
    assert recommendation.message == (
        "Raise the batch size by hand: the GPU memory reported did not grow with the batch size, so gpuwise "
        "cannot tell which batch fits."
    )


def test_an_unused_gpu_is_reported_at_zero_utilization() -> None:
    finding, _ = run(small(32, linear(4_096, 100, 32, 64), gpu_utilization=[0.0] * 60))["SmallBatch"]
    assert finding.message == "Only 9% of GPU memory is used at batch size 32 while utilization is 0%."
    assert finding.evidence["gpuUtilization"] == "0"


def test_small_batch_needs_the_batch_size_and_the_memory_used() -> None:
    low = {"gpu_utilization": [35.0] * 60, "memory_used_mib": 8_000.0}
    assert "SmallBatch" not in run(window(**{**low, "batch_size": None}))
    assert "SmallBatch" not in run(window(**{**low, "memory_used_mib": None}))
    assert "SmallBatch" not in run(window(**{**low, "memory_total_mib": None}))


def test_an_active_small_batch_keeps_its_hold_while_utilization_hovers() -> None:
    hovering = small(32, linear(4_096, 100, 32, 64), gpu_utilization=[35.0] * 36 + [80.0] * 24)
    assert "SmallBatch" not in run(hovering), "60% of samples low: not enough to start a finding"
    assert "SmallBatch" in run(hovering, active=frozenset({"SmallBatch"})), "enough to keep one"


# input_bound

STARVED: dict[str, Any] = {"gpu_utilization": [30.0] * 60, "data_wait_fraction": [0.9] * 60}


def test_loader_workers_never_exceed_the_tunable_s_max_with_or_without_a_cpu_limit() -> None:
    for cores in (None, 64.0):  # no limit, or 63 spare cores: the tunable's max (32) caps 80 wanted
        _, recommendation = run(window(**STARVED, num_workers=8, cpu_cores=cores))["InputBound"]
        assert recommendation is not None and recommendation.changes == {"NUM_WORKERS": "32"}


def test_a_wait_at_the_threshold_asks_for_just_enough_workers() -> None:
    # 20% wait with 2 workers: 2 / 0.8 = 2.5, so 3.
    _, recommendation = run(window(gpu_utilization=[30.0] * 60, data_wait_fraction=[0.2] * 60, num_workers=2))[
        "InputBound"
    ]
    assert recommendation is not None and recommendation.changes == {"NUM_WORKERS": "3"}


def test_loader_workers_are_never_proposed_under_the_tunable_s_min() -> None:
    # 20% wait and no workers wants 2; the job declared it runs with at least 4, so 4, not 2 for
    # AdjustConfig to clamp (and not more: 4 is within the 15 spare cores).
    at_least_four = TUNABLES.model_copy(update={"data_loader_workers": IntTunable(env="NUM_WORKERS", min=4, max=32)})
    waiting = window(gpu_utilization=[30.0] * 60, data_wait_fraction=[0.2] * 60, num_workers=0)
    _, recommendation = run(waiting, tunables=at_least_four)["InputBound"]
    assert recommendation is not None and recommendation.changes["NUM_WORKERS"] == "4"


def test_a_held_input_finding_without_wait_figures_proposes_one_more_worker_and_no_speedup() -> None:
    # Active, its data-wait series missing this cycle: the finding holds, claims no wait it did not see.
    w = window(gpu_utilization=[30.0] * 60, data_wait_fraction=[], num_workers=2)
    finding, recommendation = run(w, active=frozenset({"InputBound"}))["InputBound"]
    assert finding.message == "0% of step time is spent waiting for input while GPU utilization is 30%."
    assert recommendation is not None and recommendation.changes == {"NUM_WORKERS": "3"}
    assert recommendation.expected_speedup == 1.0


def test_an_active_input_finding_keeps_its_hold_while_utilization_hovers() -> None:
    hovering = window(data_wait_fraction=[0.7] * 60, gpu_utilization=[30.0] * 36 + [80.0] * 24, num_workers=2)
    assert "InputBound" not in run(hovering)
    assert "InputBound" in run(hovering, active=frozenset({"InputBound"}))


def test_an_idle_gpu_waiting_for_input_is_reported_at_zero_utilization() -> None:
    finding, recommendation = run(window(gpu_utilization=[0.0] * 60, data_wait_fraction=[0.7] * 60, num_workers=2))[
        "InputBound"
    ]
    assert finding.message == "70% of step time is spent waiting for input while GPU utilization is 0%."
    assert recommendation is not None and recommendation.expected_effect == (
        "up to 3.3x steps per second: 70% of step time is input wait, and up to 0% GPU utilization"
    )


def test_the_utilization_promised_never_exceeds_100_percent() -> None:
    _, recommendation = run(window(gpu_utilization=[45.0] * 60, data_wait_fraction=[0.7] * 60, num_workers=2))[
        "InputBound"
    ]
    assert recommendation is not None and recommendation.expected_effect == (
        "up to 3.3x steps per second: 70% of step time is input wait, and up to 100% GPU utilization"
    )


def test_two_processes_out_of_cpu_are_each_named() -> None:
    # 8 cores for 2 processes: 4 each, 3 for loader workers, and each runs 3.
    finding, recommendation = run(
        window(
            gpu_utilization=[30.0] * 60,
            data_wait_fraction=[0.5] * 60,
            num_workers=3,
            cpu_cores=8.0,
            processes_per_node=2,
        )
    )["CPUBoundInput"]
    assert finding.message == (
        "50% of step time is spent waiting for input while GPU utilization is 30%. Each of the pod's 2 processes "
        "has no spare CPU for more loader workers: preprocessing is CPU-bound."
    )
    assert finding.evidence["processesPerNode"] == "2"
    assert recommendation is not None and recommendation.changes == {}


def test_out_of_cpu_but_unpinned_is_advised_pinning_only() -> None:
    w = window(
        gpu_utilization=[30.0] * 60, data_wait_fraction=[0.5] * 60, num_workers=3, cpu_cores=4.0, pin_memory=False
    )
    finding, recommendation = run(w)["InputBound"]
    assert "preprocessing is CPU-bound" in finding.message
    assert recommendation is not None and recommendation.changes == {"PIN_MEMORY": "1"}
    assert recommendation.message == f"Pin host memory; {PREFETCH}; move heavy augmentation off the step path."


def test_without_declared_tunables_the_advice_says_what_to_set_by_hand() -> None:
    unpinned = window(**STARVED, num_workers=2, pin_memory=False, cpu_cores=None)
    _, recommendation = run(unpinned, tunables=Tunables())["InputBound"]
    assert recommendation is not None and recommendation.message == (
        f"Use more DataLoader workers and pin_memory=True; {PREFETCH}. Declare "
        "spec.efficiency.tunables.dataLoaderWorkers so gpuwise can set the workers."
    )
    _, pinned = run(window(**STARVED, num_workers=2, pin_memory=True), tunables=Tunables())["InputBound"]
    assert pinned is not None and pinned.message == (
        f"Use more DataLoader workers (up to 15 per process); {PREFETCH}. Declare "
        "spec.efficiency.tunables.dataLoaderWorkers so gpuwise can set the workers."
    )
    _, unknown = run(window(**STARVED, num_workers=2, pin_memory=None), tunables=Tunables())["InputBound"]
    assert unknown is not None and "and pin_memory=True" in unknown.message, "not known to be pinned: say it"
