"""Every threshold that gates a finding, just under and just over it.

A finding restarts a job in Enforce mode: a threshold that drifted (0.2 -> 0.4, >= -> >) must fail
a test, not only one whose case sits far from the edge. Each pair differs only in the figure at
the edge, and the defaults are `DiagnosisThresholds()` and `Sustain()`.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.diagnose.test_rules import run, window

STARVED: dict[str, Any] = {"gpu_utilization": [30.0] * 60, "data_wait_fraction": [0.6] * 60, "num_workers": 1}
FP32: dict[str, Any] = {"autocast": False, "tensor_activity": 0.01}
LIGHT_MEMORY: dict[str, Any] = {
    "gpu_utilization": [35.0] * 60,
    "memory_used_mib": 40_000.0,
    "memory_total_mib": 100_000.0,
}


def found(kind: str, **changes: Any) -> bool:
    return kind in run(window(**changes))


@pytest.mark.parametrize(
    ("kind", "base", "field", "fires", "does_not"),
    [
        # Input wait above 0.2 of step time...
        ("InputBound", STARVED, "data_wait_fraction", [0.21] * 60, [0.19] * 60),
        # ...while the GPU is under the 50 % utilization threshold.
        ("InputBound", STARVED, "gpu_utilization", [49.5] * 60, [50.5] * 60),
        # SmallBatch: under half the GPU's memory...
        ("SmallBatch", LIGHT_MEMORY, "memory_used_mib", 49_000.0, 51_000.0),
        # ...and under the utilization threshold.
        ("SmallBatch", LIGHT_MEMORY, "gpu_utilization", [49.5] * 60, [50.5] * 60),
        # NoMixedPrecision: tensor cores under 10 % busy...
        ("NoMixedPrecision", FP32, "tensor_activity", 0.09, 0.11),
        # ...on compute capability 7.0 and later.
        ("NoMixedPrecision", FP32, "compute_capability", (7, 0), (6, 1)),
        # Idle: no step for 10 minutes...
        ("Idle", {"gpu_utilization": [5.0] * 60}, "seconds_since_last_step", 601.0, 599.0),
        # ...and the GPUs under the utilization threshold (not an evaluation pass between steps).
        ("Idle", {"seconds_since_last_step": 700.0}, "gpu_utilization", [49.5] * 60, [50.5] * 60),
    ],
)
def test_each_threshold_just_under_and_just_over(
    kind: str, base: dict[str, Any], field: str, fires: Any, does_not: Any
) -> None:
    assert found(kind, **{**base, field: fires})
    assert not found(kind, **{**base, field: does_not})


def test_sustained_means_90_percent_of_the_samples() -> None:
    """54 of 60 samples (90 %) hold the condition: sustained; 53 (88 %): not."""
    assert found("InputBound", **{**STARVED, "data_wait_fraction": [0.6] * 54 + [0.05] * 6})
    assert not found("InputBound", **{**STARVED, "data_wait_fraction": [0.6] * 53 + [0.05] * 7})


def test_a_window_must_be_80_percent_covered() -> None:
    """48 of the window's 60 expected samples (80 %) are enough; 47 are not."""
    assert found("InputBound", **{**STARVED, "data_wait_fraction": [0.6] * 48, "gpu_utilization": [30.0] * 48})
    assert not found("InputBound", **{**STARVED, "data_wait_fraction": [0.6] * 47, "gpu_utilization": [30.0] * 47})


def test_the_start_up_grace_is_five_minutes() -> None:
    assert found("InputBound", **STARVED, job_age_seconds=301.0)
    assert not found("InputBound", **STARVED, job_age_seconds=299.0)


def test_an_active_finding_clears_only_past_its_release_margin() -> None:
    """SmallBatch holds below 50 % memory; once active, until 20 % past it (60 %)."""
    active = frozenset({"SmallBatch"})
    assert "SmallBatch" in run(window(**{**LIGHT_MEMORY, "memory_used_mib": 59_000.0}), active)
    assert "SmallBatch" not in run(window(**{**LIGHT_MEMORY, "memory_used_mib": 61_000.0}), active)
    assert "SmallBatch" not in run(window(**{**LIGHT_MEMORY, "memory_used_mib": 55_000.0})), "not active: 50 %"


def test_an_active_sustained_finding_clears_only_under_half_the_samples() -> None:
    """Hysteresis on samples: once active, InputBound holds while 50 % of them wait, not under."""
    active = frozenset({"InputBound"})
    assert "InputBound" in run(window(**{**STARVED, "data_wait_fraction": [0.6] * 30 + [0.05] * 30}), active)
    assert "InputBound" not in run(window(**{**STARVED, "data_wait_fraction": [0.6] * 29 + [0.05] * 31}), active)
