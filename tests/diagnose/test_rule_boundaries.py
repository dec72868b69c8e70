"""The hardware rules at their edges: each threshold on its very value, each hysteresis, each
message's variant (Throttling, CommunicationBound, NoMixedPrecision, Idle, OversizedGPU and its
move to a smaller class, and the helpers that size a slice).

`test_rules.py` shows each rule deciding on cases far from its limits; a rule that compared with
`<=` instead of `<`, read its threshold a little off, or forgot its hysteresis would pass those.
These pin what the operator and users rely on where the decision flips.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.api.trainingjob import Finding, Recommendation, Tunables
from gpuwise.diagnose.gpu_classes import SizedGpuClass
from gpuwise.diagnose.rules import (
    DiagnosisThresholds,
    RuleContext,
    _percentile,
    diagnose,
    smallest_mig_profile,
)
from gpuwise.diagnose.window import JobWindow, Sustain
from gpuwise.hardware.gpu_specs import MIB_PER_GB
from gpuwise.hardware.mig_profiles import gpu_model
from tests.diagnose.test_rules import CLASSES, EXCHANGING, L4_MIB, LIGHT, ON_L40S, context, run, steps, window
from tests.diagnose.test_rules_findings import FREE_ACCUMULATION

HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, POWER_BRAKE = 0x8, 0x20, 0x40, 0x80


def found(ctx: RuleContext, kind: str) -> tuple[Finding, Recommendation | None] | None:
    """`kind`'s finding and recommendation in a diagnosis of `ctx`, or None."""
    return next(((f, r) for f, r in diagnose(ctx) if f.kind == kind), None)


# --- Throttling -----------------------------------------------------------------------------------


def test_throttling_names_the_most_throttled_worker_whatever_its_index() -> None:
    clocks = {0: [float(HW_THERMAL)] * 60, 1: [float(HW_THERMAL)] * 55 + [0.0] * 5}
    finding, recommendation = run(window(clock_slowdowns=clocks))["Throttling"]
    assert finding.worker == 0, "held down in every sample, against 92 % for worker 1"
    assert finding.evidence["throttledShare"] == "1"
    assert finding.evidence["throttledWorkers"] == "2"
    assert recommendation is not None and recommendation.message.startswith("Restart the job away from worker 0's node")
    clocks = {0: [float(HW_THERMAL)] * 55 + [0.0] * 5, 1: [float(HW_THERMAL)] * 60}
    assert run(window(clock_slowdowns=clocks))["Throttling"][0].worker == 1


def test_a_clock_reason_is_listed_from_half_the_samples_on() -> None:
    """Thermal in every sample, a hardware slowdown in exactly half, the power brake in 40 %: the
    brake is not a reason the worker is slow, the other two are. One worker: no word on peers."""
    masks = [HW_THERMAL | (HW_SLOWDOWN if i < 30 else POWER_BRAKE if i < 54 else 0) for i in range(60)]
    finding, recommendation = run(window(clock_slowdowns={0: [float(m) for m in masks]}))["Throttling"]
    assert finding.message == (
        "Worker 0's GPU clocks were held down in 100% of samples (hardware slowdown, hardware thermal slowdown)."
    )
    assert finding.evidence["reasons"] == "hardware slowdown, hardware thermal slowdown"
    assert recommendation is not None and recommendation.changes == {}


def test_reasons_none_of_which_holds_half_the_samples_are_changing_reasons() -> None:
    masks = [(HW_SLOWDOWN, SW_THERMAL, HW_THERMAL)[i // 20] for i in range(60)]  # a third each
    finding, _ = run(window(clock_slowdowns={0: [0.0] * 60, 1: [float(m) for m in masks]}))["Throttling"]
    assert finding.message == (
        "Worker 1's GPU clocks were held down in 100% of samples (changing reasons); "
        "every synchronous step of the job waits for it."
    ), "two workers: the other one waits for it"
    assert "reasons" not in finding.evidence


def test_an_active_throttling_finding_holds_until_under_half_the_samples() -> None:
    hovering = {0: [float(HW_THERMAL)] * 36 + [0.0] * 24}  # 60 % of samples
    assert "Throttling" not in run(window(clock_slowdowns=hovering))
    assert run(window(clock_slowdowns=hovering), active=frozenset({"Throttling"}))["Throttling"][0].worker == 0
    passed = {0: [float(HW_THERMAL)] * 24 + [0.0] * 36}
    assert "Throttling" not in run(window(clock_slowdowns=passed), active=frozenset({"Throttling"}))


def test_too_few_clock_samples_do_not_clear_an_active_throttling_finding() -> None:
    """A gap in the telemetry is no evidence either way: even a short series of zeros keeps it."""
    gap = {0: [0.0] * 10}
    assert "Throttling" not in run(window(clock_slowdowns=gap))
    held, _ = run(window(clock_slowdowns=gap), active=frozenset({"Throttling"}))["Throttling"]
    assert held.worker == 0
    assert held.message == (
        "Worker 0's GPU clocks were held down; its 10 samples since show no slowdown, too few to tell that it is over."
    ), "no claim of a share held down, nor of reasons, that the window does not show"


# --- CommunicationBound -----------------------------------------------------------------------------

# The exchanging job of `test_rules.py`, on four workers.
ACROSS_NODES: dict[str, Any] = {**EXCHANGING, "worker_step_seconds": steps(4)}


def exchanging(*, active: frozenset[str] = frozenset(), **overrides: Any) -> bool:
    """Whether a job exchanging like `ACROSS_NODES`, with `overrides`, is CommunicationBound."""
    return "CommunicationBound" in run(window(**{**ACROSS_NODES, **overrides}), active)


def test_pcie_traffic_counts_from_its_threshold_on_each_way() -> None:
    assert exchanging(pcie_tx_bytes_per_second=50e6, pcie_rx_bytes_per_second=50e6), "50 MB/s: exchanged"
    assert not exchanging(pcie_tx_bytes_per_second=49e6, pcie_rx_bytes_per_second=49e6), "symmetric, but too little"
    assert not exchanging(pcie_tx_bytes_per_second=49e6, pcie_rx_bytes_per_second=60e6), "too little sent"
    assert not exchanging(pcie_tx_bytes_per_second=60e6, pcie_rx_bytes_per_second=49e6), "too little received"
    assert not exchanging(pcie_rx_bytes_per_second=None), "received not measured"


def test_traffic_within_twice_each_way_is_symmetric() -> None:
    assert exchanging(pcie_tx_bytes_per_second=1e9, pcie_rx_bytes_per_second=2e9)
    assert exchanging(pcie_tx_bytes_per_second=2e9, pcie_rx_bytes_per_second=1e9)
    assert not exchanging(pcie_tx_bytes_per_second=1e9, pcie_rx_bytes_per_second=2.01e9), "mostly receives: input"
    assert not exchanging(pcie_tx_bytes_per_second=2.01e9, pcie_rx_bytes_per_second=1e9), "mostly sends: checkpoints"


def test_an_active_communication_bound_finding_holds_while_its_traffic_is_within_the_release_margin() -> None:
    """The PCIe figures are window means, with no samples to count: an active finding holds until
    they are 20 % off (40-50 MB/s each way, or up to 2.4x one way over the other), so a job
    hovering at either edge does not gain and lose it every cycle."""
    held = frozenset({"CommunicationBound"})
    for tx, rx, why in ((45e6, 45e6, "under 50 MB/s each way"), (1e9, 2.3e9, "2.3x more received than sent")):
        assert not exchanging(pcie_tx_bytes_per_second=tx, pcie_rx_bytes_per_second=rx), why
        assert exchanging(active=held, pcie_tx_bytes_per_second=tx, pcie_rx_bytes_per_second=rx), why
    assert not exchanging(active=held, pcie_tx_bytes_per_second=41e6, pcie_rx_bytes_per_second=41e6)
    assert not exchanging(active=held, pcie_tx_bytes_per_second=1e9, pcie_rx_bytes_per_second=2.5e9)


def test_two_workers_are_enough_to_exchange_between_nodes() -> None:
    assert exchanging(worker_step_seconds=steps(2))
    assert not exchanging(worker_step_seconds=steps(1))


def test_communication_bound_reads_compute_against_the_job_s_utilization_threshold() -> None:
    assert exchanging(sm_active=[0.497] * 60), "49.7 % of the SMs: under the 50 % threshold"
    assert not exchanging(sm_active=[0.5] * 60)


def test_an_active_communication_bound_finding_holds_until_under_half_the_samples() -> None:
    busier: dict[str, Any] = {"sm_active": [0.2] * 36 + [0.8] * 24}  # computing in 40 % of samples
    assert not exchanging(**busier)
    assert exchanging(active=frozenset({"CommunicationBound"}), **busier)
    waiting: dict[str, Any] = {"data_wait_fraction": [0.03] * 36 + [0.3] * 24}  # waiting for input in 40 % of samples
    assert not exchanging(**waiting)
    assert exchanging(active=frozenset({"CommunicationBound"}), **waiting)


def test_the_communication_bound_finding_in_full_for_a_job_that_neither_computes_nor_waits() -> None:
    """Traffic in decimal GB/s; nothing computing and nothing waiting leave the whole step to the exchange."""
    w = window(
        **{
            **EXCHANGING,
            "sm_active": [0.0] * 60,
            "data_wait_fraction": [0.0] * 60,
            "pcie_tx_bytes_per_second": 1.05e9,
            "pcie_rx_bytes_per_second": 1.35e9,
            "worker_step_seconds": steps(2),
        }
    )
    finding, _ = run(w)["CommunicationBound"]
    assert finding.message == (
        "2 workers spend about 100% of each step neither computing (0%) nor waiting for input (0%), while their "
        "GPUs send and receive 1.1/1.4 GB/s over PCIe: the exchange between nodes holds the steps."
    )
    assert finding.evidence["outsideComputeAndInput"] == "1"
    assert finding.confidence == 0.55, "SM activity measured"


def test_communication_bound_is_less_sure_from_gpu_utilization_alone() -> None:
    finding, _ = run(window(**{**ACROSS_NODES, "sm_active": []}))["CommunicationBound"]
    assert finding.confidence == 0.45
    assert finding.evidence["gpuUtilization"] == "0.38"


def test_accumulation_already_at_its_max_is_not_proposed_again() -> None:
    _, at_max = run(window(**{**ACROSS_NODES, "gradient_accumulation_steps": 16}), tunables=FREE_ACCUMULATION)[
        "CommunicationBound"
    ]
    assert at_max is not None and at_max.changes == {} and at_max.expected_effect is None
    assert at_max.message.startswith("Accumulate gradients over more micro-batches (fewer all-reduces per sample)")
    _, capped = run(window(**{**ACROSS_NODES, "gradient_accumulation_steps": 12}), tunables=FREE_ACCUMULATION)[
        "CommunicationBound"
    ]
    assert capped is not None and capped.changes == {"ACCUM": "16"}, "twice 12, capped at the tunable's max"
    assert capped.expected_effect == "half the all-reduces per sample"


# --- NoMixedPrecision -------------------------------------------------------------------------------

FP32 = {"autocast": False, "tensor_activity": 0.01}


def test_bf16_from_compute_capability_8_0_on_and_fp16_before() -> None:
    for capability, dtype in (((7, 0), "fp16"), ((7, 5), "fp16"), ((8, 0), "bf16"), ((8, 6), "bf16")):
        _, recommendation = run(window(**FP32, compute_capability=capability))["NoMixedPrecision"]
        assert recommendation.message == f"Enable automatic mixed precision with {dtype}.", capability
    assert "NoMixedPrecision" not in run(window(**FP32, compute_capability=(6, 2))), "no tensor cores"


def test_tensor_activity_at_its_threshold_is_tensor_cores_in_use() -> None:
    assert "NoMixedPrecision" in run(window(autocast=False, tensor_activity=0.099))
    assert "NoMixedPrecision" not in run(window(autocast=False, tensor_activity=0.1))


def test_only_a_job_known_to_run_without_autocast_is_told_to_use_it() -> None:
    assert "NoMixedPrecision" not in run(window(autocast=True, tensor_activity=0.01))
    assert "NoMixedPrecision" not in run(window(autocast=None, tensor_activity=0.01)), "not reported"
    assert "NoMixedPrecision" not in run(window(autocast=True, tensor_activity=None))
    assert "NoMixedPrecision" not in run(window(**FP32, compute_capability=None)), "GPU not known"


def test_no_mixed_precision_once_the_grace_period_is_over() -> None:
    assert "NoMixedPrecision" in run(window(**FP32, job_age_seconds=300))
    assert "NoMixedPrecision" not in run(window(**FP32, job_age_seconds=299))


def test_without_gpu_utilization_the_mixed_precision_gain_is_not_bounded() -> None:
    _, recommendation = run(window(**FP32, gpu_utilization=[]))["NoMixedPrecision"]
    assert recommendation.expected_speedup is None
    assert recommendation.expected_effect == "faster matmuls on the tensor cores and about half the activation memory"


def test_without_the_amp_tunable_mixed_precision_is_advice_only() -> None:
    _, recommendation = run(window(**FP32), tunables=Tunables())["NoMixedPrecision"]
    assert recommendation.changes == {}
    assert recommendation.message == "Enable automatic mixed precision with bf16."


# --- Idle -------------------------------------------------------------------------------------------

QUIET = {"gpu_utilization": [1.0] * 60}


def test_idle_from_idle_seconds_on_and_told_how_long_until_suspended() -> None:
    finding, recommendation = run(window(**QUIET, seconds_since_last_step=600.0))["Idle"]
    assert finding.message == "No training step for 10 minutes while 1 GPU(s) stay allocated."
    assert recommendation is not None and "Idle jobs are suspended after 60 minutes" in recommendation.message
    assert recommendation.message.endswith("this one would be in 50 minutes.")
    assert "Idle" not in run(window(**QUIET, seconds_since_last_step=599.0))


def test_idle_for_the_whole_suspend_delay_is_suspended_now() -> None:
    _, due = run(window(**QUIET, seconds_since_last_step=3600.0))["Idle"]
    assert due is not None and due.message.endswith("this one would be now.")
    _, almost = run(window(**QUIET, seconds_since_last_step=3599.5))["Idle"]
    assert almost is not None and almost.message.endswith("this one would be in under a minute."), "still ahead"
    _, soon = run(window(**QUIET, seconds_since_last_step=3540.0))["Idle"]
    assert soon is not None and soon.message.endswith("this one would be in 1 minute.")


def test_an_active_idle_finding_holds_until_the_gpus_are_busy_in_half_the_samples() -> None:
    waking = {"gpu_utilization": [1.0] * 36 + [80.0] * 24, "seconds_since_last_step": 1800.0}
    assert "Idle" not in run(window(**waking))
    assert "Idle" in run(window(**waking), active=frozenset({"Idle"}))
    awake = {"gpu_utilization": [1.0] * 24 + [80.0] * 36, "seconds_since_last_step": 1800.0}
    assert "Idle" not in run(window(**awake), active=frozenset({"Idle"}))


def test_idle_once_the_grace_period_is_over() -> None:
    """A longer grace than the idle time (a slow start-up): idle from the grace's very end."""
    for age, idle in ((900.0, True), (899.0, False)):
        ctx = context(window(**QUIET, job_age_seconds=age, seconds_since_last_step=700.0))
        ctx.sustain = Sustain(grace_seconds=900.0)
        assert (found(ctx, "Idle") is not None) == idle, age


# --- OversizedGPU -----------------------------------------------------------------------------------


def test_a_job_that_may_only_be_packed_is_told_where_its_slice_is_and_what_it_frees() -> None:
    ctx = context(window(**LIGHT, memory_used_mib=7_000.0))
    ctx.actions = frozenset({"Pack"})
    oversized = found(ctx, "OversizedGPU")
    assert oversized is not None and oversized[1] is not None
    recommendation = oversized[1]
    assert recommendation.message == (
        "Run each worker on a free MIG slice 1g.10gb (request nvidia.com/mig-1g.10gb: 1) on a node that has one, "
        "instead of a whole GPU."
    )
    assert recommendation.expected_effect == "its whole GPU free for other jobs, on 1 of 7 compute slices elsewhere"


def test_the_oversized_finding_shows_the_memory_peak_in_gib() -> None:
    finding, _ = run(window(**LIGHT, memory_used_mib=7_015.0))["OversizedGPU"]
    assert finding.message == (
        "The GPU computes under 30% of the time (10% in 90% of samples, SM activity) and memory peaks at "
        "6.9 GiB (9%): a MIG slice 1g.10gb would do."
    ), "7,015 MiB / 1,024"
    assert finding.evidence["memoryPeakMiB"] == "7015"


def test_a_job_that_holds_no_gpu_memory_is_shown_so() -> None:
    finding, _ = run(window(**LIGHT, memory_used_mib=0.0))["OversizedGPU"]
    assert finding.evidence["memoryPeakMiB"] == "0"
    assert "memory peaks at 0.0 GiB (0%)" in finding.message


def test_no_oversized_finding_without_the_memory_figures() -> None:
    assert "OversizedGPU" not in run(window(**LIGHT, memory_used_mib=None))
    assert "OversizedGPU" not in run(window(**LIGHT, memory_total_mib=None))


def test_a_job_waiting_for_input_at_the_threshold_is_not_sized() -> None:
    """Waiting the threshold's share of step time on average is waiting, as for InputBound."""
    at_threshold = [0.25] * 48 + [0.0] * 12  # a mean of exactly 0.2
    assert "OversizedGPU" not in run(window(**LIGHT, memory_used_mib=7_000.0, data_wait_fraction=at_threshold))
    below_it = [0.25] * 47 + [0.0] * 13
    assert "OversizedGPU" in run(window(**LIGHT, memory_used_mib=7_000.0, data_wait_fraction=below_it))


def test_an_active_oversized_finding_holds_while_the_input_wait_is_within_the_release_margin() -> None:
    """A job waiting for input is not sized (its input comes first); the wait read is the window's
    mean, so an active finding holds until it is 20 % past the threshold (0.24)."""
    held = frozenset({"OversizedGPU"})
    hovering = window(**LIGHT, memory_used_mib=7_000.0, data_wait_fraction=[0.22] * 60)
    assert "OversizedGPU" not in run(hovering)
    assert "OversizedGPU" in run(hovering, active=held)
    assert "OversizedGPU" not in run(window(**LIGHT, memory_used_mib=7_000.0, data_wait_fraction=[0.25] * 60), held)


def test_an_active_oversized_finding_holds_until_computing_in_half_the_samples() -> None:
    busier = {"gpu_utilization": [15.0] * 60, "sm_active": [0.1] * 36 + [0.4] * 24, "memory_used_mib": 7_000.0}
    assert "OversizedGPU" not in run(window(**busier))
    finding, recommendation = run(window(**busier), active=frozenset({"OversizedGPU"}))["OversizedGPU"]
    assert finding.evidence["smActivityP90"] == "0.4"
    assert recommendation.changes["migProfile"] == "4g.40gb", "40 % of 7 slices, filled to 80 %: 4"


def test_an_active_oversized_finding_holds_while_memory_is_within_its_release_margin() -> None:
    """Memory read from one figure, the peak: an active finding clears only 20 % past the limit."""
    w = window(**LIGHT, memory_used_mib=0.33 * 81_559)
    for active, expected in ((frozenset(), False), (frozenset({"OversizedGPU"}), True)):
        ctx = context(w, active)
        ctx.thresholds = DiagnosisThresholds(memory_headroom=0.3)
        assert (found(ctx, "OversizedGPU") is not None) == expected, active


def test_an_active_oversized_finding_keeps_its_slice_while_the_peak_hovers_at_the_slice_s_edge() -> None:
    """A 3g.40gb slice holds 38,147 MiB: a peak of 31,790 MiB plus 20 % does not fit, plus the
    margin eased by the release margin (1/6) does. So an active finding keeps its slice there, and
    one that was not active is not opened by it; past the eased margin too, nothing holds it."""
    hovering = window(**LIGHT, memory_used_mib=31_790.0)
    assert "OversizedGPU" not in run(hovering)
    held = run(hovering, active=frozenset({"OversizedGPU"}))
    assert held["OversizedGPU"][1].changes["migProfile"] == "3g.40gb"
    below_edge = run(window(**LIGHT, memory_used_mib=31_700.0), active=frozenset({"OversizedGPU"}))
    assert below_edge["OversizedGPU"][1].changes["migProfile"] == "3g.40gb", "the full margin fits: the same slice"
    assert "OversizedGPU" not in run(window(**LIGHT, memory_used_mib=33_000.0), active=frozenset({"OversizedGPU"}))


def test_an_active_oversized_finding_keeps_its_share_while_the_peak_hovers_at_half_the_gpu() -> None:
    """On an L4 (23,034 MiB, no MIG), 9,700 MiB plus 20 % is more than half the GPU: no share for
    a new finding; plus the eased margin it is 50 %, the most a share may be."""
    on_l4 = {"memory_total_mib": L4_MIB, "gpu_model": "NVIDIA L4"}
    hovering = window(**LIGHT, **on_l4, memory_used_mib=9_700.0)
    assert "OversizedGPU" not in run(hovering)
    held = run(hovering, active=frozenset({"OversizedGPU"}))["OversizedGPU"]
    assert held[0].evidence["gpuShare"] == "0.5" and held[1].changes["gpuShare"] == "0.50"
    assert "OversizedGPU" not in run(
        window(**LIGHT, **on_l4, memory_used_mib=10_200.0), active=frozenset({"OversizedGPU"})
    )


# --- OversizedGPU: Reschedule to a smaller GPU class ----------------------------------------------


def moved(w: JobWindow, classes: tuple[SizedGpuClass, ...] = CLASSES) -> Recommendation:
    ctx = context(w)
    ctx.actions, ctx.gpu_classes = frozenset({"Reschedule"}), classes
    oversized = found(ctx, "OversizedGPU")
    assert oversized is not None and oversized[1] is not None
    return oversized[1]


def test_a_move_bounds_the_steps_by_the_gpu_s_busy_share_in_percent() -> None:
    # 1 + 0.0497 × (91.6 / 30.3 − 1) = 1.1005: just over the 10 % a move may cost.
    assert moved(window(**{**ON_L40S, "gpu_utilization": [4.97] * 60})).action.value == "Pack"
    assert moved(window(**{**ON_L40S, "gpu_utilization": [4.94] * 60})).action.value == "Reschedule"


def test_a_move_says_where_the_class_s_nodes_are_by_every_label_or_not_at_all() -> None:
    l4 = CLASSES[1].spec
    labelled = (SizedGpuClass("l4", l4, {"zone": "b", "nvidia.com/gpu.product": "NVIDIA-L4"}),)
    assert moved(window(**ON_L40S), labelled).message.startswith(
        "Move the job to GPU class l4 (NVIDIA L4, 24 GB; nodes nvidia.com/gpu.product=NVIDIA-L4, zone=b) and "
    )
    anywhere = moved(window(**ON_L40S), (SizedGpuClass("l4", l4),))
    assert anywhere.message.startswith("Move the job to GPU class l4 (NVIDIA L4, 24 GB) and restart it")


# --- Sizing a slice ---------------------------------------------------------------------------------

H100 = gpu_model("NVIDIA H100 80GB HBM3")
H100_MIB = 81_559.0


def profile_name(slices: int, memory_mib: float, now_mib: float) -> str | None:
    profile = smallest_mig_profile(H100, slices, memory_mib, now_mib)
    return profile.name if profile is not None else None


def test_a_slice_holds_exactly_its_named_memory() -> None:
    assert profile_name(1, 10 * MIB_PER_GB, H100_MIB) == "1g.10gb"
    assert profile_name(1, 10 * MIB_PER_GB + 1, H100_MIB) == "1g.20gb"


def test_a_slice_must_have_under_three_quarters_of_the_memory_the_job_has() -> None:
    now = 10 * MIB_PER_GB / 0.75
    assert 0.75 * now == 10 * MIB_PER_GB
    assert profile_name(1, 1_000.0, now) is None, "a 1g.10gb instance is already about what it has"
    assert profile_name(1, 1_000.0, now + 1) == "1g.10gb"


def test_no_slice_for_a_job_that_needs_more_compute_than_a_4g() -> None:
    """Short of the whole GPU, whatever memory the job has: 7g is the GPU itself."""
    assert profile_name(4, 1_000.0, 1e9) == "4g.40gb"
    assert profile_name(5, 1_000.0, 1e9) is None
    assert profile_name(7, 1_000.0, 1e9) is None


def test_the_percentile_is_the_smallest_value_that_share_of_the_values_do_not_exceed() -> None:
    assert _percentile([float(v) for v in range(10, 0, -1)], 0.9) == 9.0
    assert _percentile([1.0, 2.0], 0.5) == 1.0
    assert _percentile([1.0, 2.0], 1.0) == 2.0
    assert _percentile([3.0], 0.9) == 3.0
    assert _percentile([3.0], 0.0) == 3.0


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.integers(min_value=0, max_value=20).map(float), min_size=1, max_size=80),
    share=st.sampled_from([0.1, 0.5, 0.9, 1.0]),
)
def test_the_percentile_by_its_definition(values: list[float], share: float) -> None:
    result = _percentile(values, share)
    exact = Fraction(share).limit_denominator(10)
    assert result in values
    assert Fraction(sum(v <= result for v in values), len(values)) >= exact
    assert all(Fraction(sum(u <= v for u in values), len(values)) < exact for v in values if v < result)


# --- The rule context -------------------------------------------------------------------------------


def test_under_is_strictly_under_and_an_active_kind_s_limit_moves_by_the_release_margin() -> None:
    ctx = context(window(), frozenset({"SmallBatch"}))
    assert not ctx.under("OversizedGPU", 0.5, 0.5)
    assert ctx.under("OversizedGPU", 0.4999, 0.5)
    assert ctx.under("SmallBatch", 0.59, 0.5)
    assert not ctx.under("SmallBatch", 0.6, 0.5)


def test_a_finding_names_a_worker_only_given_an_int() -> None:
    ctx = context(window())
    named = ctx.finding("Throttling", 0.5, "m", worker=3)
    assert named.worker == 3 and named.evidence["worker"] == "3"
    text = ctx.finding("Throttling", 0.5, "m", worker="3")
    assert text.worker is None and text.evidence["worker"] == "3"
    assert ctx.finding("Throttling", 0.5, "m").worker is None
    assert math.isclose(ctx.finding("Throttling", 1.7, "m").confidence, 1.0)
