"""The metric catalog: the one source of gpuwise's metric names, types, units, help and labels.

Stdlib only and data only, so that the sidecar, the operator and the generators of rules and
dashboards can all import it without paying for anything.
"""

from __future__ import annotations

from gpuwise.metrics import catalog
from gpuwise.metrics.catalog import BY_NAME, CATALOG, RATIO_WINDOW_SECONDS
from gpuwise.metrics.spec import (
    DEVICE_LABELS,
    GPU_LABELS,
    JOB_LABELS,
    MAX_LABELS,
    MIG_LABELS,
    POD_LABELS,
    RANK_LABEL,
    SIMULATED_LABEL,
    Kind,
    Metric,
    Scope,
    scope_labels,
)

__all__ = [
    "BY_NAME",
    "CATALOG",
    "DEVICE_LABELS",
    "GPU_LABELS",
    "JOB_LABELS",
    "MAX_LABELS",
    "MIG_LABELS",
    "POD_LABELS",
    "RANK_LABEL",
    "RATIO_WINDOW_SECONDS",
    "SIMULATED_LABEL",
    "Kind",
    "Metric",
    "Scope",
    "catalog",
    "scope_labels",
]
