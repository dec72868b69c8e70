"""What a job reports cannot break its evaluation: NaN, infinities and huge numbers in any field.

A sidecar that summed absurd durations, a Prometheus division by zero, an exporter's bug: the
figures become None (not measured, never an invented 0 or 100), and the rules still answer with
valid findings, so the job's own status is still written.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from gpuwise.diagnose.summary import figures
from gpuwise.diagnose.window import REPORTED_FIELDS, JobWindow, Reported
from tests.diagnose.test_rules import run, window

GARBAGE = (math.nan, math.inf, -math.inf, 1e308, -1e308)
FLOAT_FIELDS = [f.name for f in dataclasses.fields(Reported) if f.type in ("float | None", "Sequence[float]")]


def poisoned(name: str, value: float) -> JobWindow:
    healthy = window(gpu_utilization=[30.0] * 60, data_wait_fraction=[0.6] * 60, num_workers=1)
    current = getattr(healthy, name)
    bad: Any = [value] * len(current or [0.0] * 60) if isinstance(current, list | tuple) else value
    return dataclasses.replace(healthy, **{name: bad})


def test_every_float_field_is_tried() -> None:
    assert {"gpu_utilization", "data_wait_fraction", "sm_activity", "memory_used_mib"} <= set(FLOAT_FIELDS)
    assert set(FLOAT_FIELDS) <= set(REPORTED_FIELDS)


@pytest.mark.parametrize("value", GARBAGE, ids=repr)
@pytest.mark.parametrize("name", FLOAT_FIELDS)
def test_garbage_in_any_field_leaves_valid_figures_and_findings(name: str, value: float) -> None:
    w = poisoned(name, value)
    shown = figures(w)
    for figure in shown:
        assert figure is None or math.isfinite(figure)
    shown.summary("InputBound")  # the status model accepts them
    found = run(w)  # every finding and recommendation is a valid API object
    for finding, _ in found.values():
        assert 0.0 <= finding.confidence <= 1.0


def test_an_infinite_utilization_is_not_shown_as_100() -> None:
    assert figures(poisoned("gpu_utilization", math.inf)).gpu_utilization is None
    assert figures(poisoned("data_wait_fraction", math.nan)).data_wait_fraction is None
