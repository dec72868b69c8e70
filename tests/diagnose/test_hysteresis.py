"""An active finding is never harder to keep than it was to find.

Hysteresis is there so that a finding does not flap: once a kind is active, its rule may hold it
on weaker evidence, never ask for more. Over generated windows that sit near every rule's
thresholds (a series at one level for part of the window and another for the rest, memory near a
slice's edge, step times with a slower worker), each kind a job gets with nothing active it gets
again from the same window when that kind is active and its finding is the one just made: a
window cannot lose a finding by having it. (`test_thresholds.py` checks each limit and its
release margin one at a time; this checks every rule against every other figure at once.)
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpuwise.api.trainingjob import Finding
from gpuwise.diagnose.rules import DiagnosisThresholds, diagnose
from gpuwise.diagnose.window import JobWindow
from gpuwise.hardware.gpu_specs import MIB_PER_GB
from gpuwise.hardware.mig_profiles import gpu_model
from tests.diagnose.test_rules import L4_MIB, context, window

SAMPLES = 60
H100_MIB = 81_559.0


@st.composite
def two_levels(draw: st.DrawFn, low: float, high: float) -> list[float]:
    """A series at one level for its first samples and another for the rest (either may be empty)."""
    first, rest = draw(st.floats(low, high)), draw(st.floats(low, high))
    split = draw(st.integers(0, SAMPLES))
    return [first] * split + [rest] * (SAMPLES - split)


@st.composite
def worker_steps(draw: st.DrawFn) -> dict[int, list[tuple[float, float]]]:
    """Step times of a few workers, one of them slower from some sample on (or none)."""
    workers = draw(st.integers(0, 8))
    slow, factor = draw(st.integers(0, 7)), draw(st.floats(1.0, 2.5))
    since = draw(st.integers(0, SAMPLES - 1))
    return {
        w: [
            (1000.0 + 15 * i, (0.5 + 0.01 * ((i * 7 + w) % 3)) * (factor if w == slow and i >= since else 1.0))
            for i in range(SAMPLES)
        ]
        for w in range(workers)
    }


def near_an_edge(on_l4: bool) -> st.SearchStrategy[float]:
    """A memory peak within 3 % of where the peak plus the sizing margin just fills a slice (or,
    without MIG, half the GPU): where OversizedGPU's sizing decides whether there is a finding."""
    margin = 1 + DiagnosisThresholds().mig_memory_margin
    room = [0.5 * L4_MIB] if on_l4 else [p.memory_gb * MIB_PER_GB for p in gpu_model("NVIDIA H100 80GB HBM3").profiles]
    return st.sampled_from([mib / margin for mib in room]).flatmap(lambda edge: st.floats(0.97 * edge, 1.03 * edge))


@st.composite
def windows(draw: st.DrawFn) -> JobWindow:
    on_l4 = draw(st.booleans())
    total = L4_MIB if on_l4 else H100_MIB
    fields: dict[str, Any] = {
        "gpu_model": "NVIDIA L4" if on_l4 else "NVIDIA H100 80GB HBM3",
        "compute_capability": draw(st.sampled_from([(8, 9) if on_l4 else (9, 0), (6, 1), None])),
        "memory_total_mib": total,
        "memory_used_mib": draw(st.one_of(st.floats(0.0, 1.0).map(lambda share: share * total), near_an_edge(on_l4))),
        "gpu_utilization": draw(two_levels(0.0, 100.0)),
        "data_wait_fraction": draw(two_levels(0.0, 0.6)),
        "sm_active": draw(st.one_of(st.just([]), two_levels(0.0, 0.6))),
        "tensor_activity": draw(st.one_of(st.none(), st.floats(0.0, 0.3))),
        "autocast": draw(st.sampled_from([True, False, None])),
        "batch_size": draw(st.sampled_from([None, 32, 256])),
        "num_workers": draw(st.sampled_from([None, 0, 2, 8])),
        "pin_memory": draw(st.sampled_from([None, True, False])),
        "cpu_cores": draw(st.sampled_from([None, 4.0, 16.0])),
        "job_age_seconds": draw(st.sampled_from([200.0, 300.0, 3600.0])),
        "seconds_since_last_step": draw(st.sampled_from([None, 1.0, 590.0, 610.0, 3000.0])),
        "clock_slowdowns": draw(
            st.one_of(st.just({}), two_levels(0.0, 1.0).map(lambda s: {0: [8.0 * round(v) for v in s]}))
        ),
        "pcie_tx_bytes_per_second": draw(st.one_of(st.none(), st.floats(0.0, 5e9))),
        "pcie_rx_bytes_per_second": draw(st.one_of(st.none(), st.floats(0.0, 5e9))),
        "worker_step_seconds": draw(worker_steps()),
        "gradient_accumulation_steps": draw(st.sampled_from([None, 1, 4])),
    }
    if fields["batch_size"] is None:
        fields["memory_by_batch"] = ()
    fields["gpus"] = max(1, len(fields["worker_step_seconds"])) if draw(st.booleans()) else draw(st.integers(0, 2))
    return window(**fields)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=windows())
def test_an_active_finding_is_never_harder_to_keep_than_to_find(w: JobWindow) -> None:
    found: dict[str, Finding] = {finding.kind: finding for finding, _ in diagnose(context(w))}
    for kind, finding in found.items():
        event(kind)
        kept = {f.kind for f, _ in diagnose(context(w, previous={kind: finding}))}
        assert kind in kept, f"{kind} found with nothing active, lost once active"
