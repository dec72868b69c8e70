"""A window's efficiency summary: the figures a TrainingJob's status and `gpuwise diagnose` show.

One place computes and rounds them, so that the operator's status, its decision whether a status is
worth writing, and the CLI's report say the same numbers.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from gpuwise.api.trainingjob import EfficiencySummary
from gpuwise.diagnose.window import JobWindow


class Figures(NamedTuple):
    """What a window shows of a job's use of its GPUs, rounded as shown; None: not measured."""

    gpu_utilization: float | None  # %, mean over the window
    sm_activity: float | None  # 0-1
    data_wait_fraction: float | None  # 0-1, mean over the window
    memory_headroom_fraction: float | None  # 0-1 of the busiest GPU's memory left at its peak

    def summary(self, top_finding: str | None) -> EfficiencySummary:
        return EfficiencySummary(**self._asdict(), top_finding=top_finding)


def figures(window: JobWindow) -> Figures:
    used, total = window.memory_used_mib, window.memory_total_mib
    return Figures(  # positional: one per job and cycle, and keywords cost a NamedTuple twice as much
        _clamped(window.mean(window.gpu_utilization), 100.0, 1),
        _clamped(window.sm_activity, 1.0, 3),
        _clamped(window.mean(window.data_wait_fraction), 1.0, 3),
        _clamped(1 - used / total, 1.0, 3) if used is not None and total and math.isfinite(total) else None,
    )


def _clamped(value: float | None, top: float, digits: int) -> float | None:
    """The figure as shown, within 0 and `top`; None where it is not a number (NaN, an infinity):
    a figure made of garbage is not measured, and never shown as 0 or `top`."""
    if value is None or not math.isfinite(value):
        return None
    return round(0.0 if value < 0.0 else top if value > top else value, digits)
