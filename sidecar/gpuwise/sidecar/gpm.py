"""GPU Performance Monitoring (Hopper and later): the SM-level activity NVML otherwise lacks.

`nvmlDeviceGetUtilizationRates` says how much of the time *any* kernel ran, not how busy the SMs
were, and it has no value at all for a MIG instance. GPM has both, per GPU and per MIG instance:
a metric is computed from two samples taken at least 100 ms apart, so each device keeps two
sample buffers and swaps them every round.
"""

from __future__ import annotations

import contextlib
from typing import Any, Final

from gpuwise.metrics import Metric, catalog

# NVML reports these as percentages; DCGM's profiling metrics are ratios.
METRICS: Final[tuple[tuple[Metric, str], ...]] = (
    (catalog.GR_ENGINE_ACTIVE, "NVML_GPM_METRIC_GRAPHICS_UTIL"),
    (catalog.SM_ACTIVE, "NVML_GPM_METRIC_SM_UTIL"),
    (catalog.SM_OCCUPANCY, "NVML_GPM_METRIC_SM_OCCUPANCY"),
    (catalog.TENSOR_ACTIVE, "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
    (catalog.DRAM_ACTIVE, "NVML_GPM_METRIC_DRAM_BW_UTIL"),
)
MIN_SPACING: Final = 0.1  # seconds between the two samples of a metric, NVML's floor


class GpmReader:
    """GPM for one GPU (`instance` None) or one of its MIG GPU instances."""

    def __init__(self, nvml: Any, handle: Any, instance: int | None = None) -> None:
        self._nvml = nvml
        self._handle = handle
        self._instance = instance
        self._previous = nvml.nvmlGpmSampleAlloc()
        self._current = nvml.nvmlGpmSampleAlloc()
        self._previous_at: float | None = None

    def read(self, now: float) -> list[tuple[Metric, float | BaseException]]:
        """Take a sample; return each metric's ratio, or the error that stands in for it.

        The first call, and any call less than 100 ms after the last one, returns nothing.
        """
        nvml = self._nvml
        if self._instance is None:
            nvml.nvmlGpmSampleGet(self._handle, self._current)
        else:
            nvml.nvmlGpmMigSampleGet(self._handle, self._instance, self._current)
        previous_at, self._previous_at = self._previous_at, now
        if previous_at is None or now - previous_at < MIN_SPACING:
            self._previous, self._current = self._current, self._previous
            return []
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(METRICS)
        request.sample1 = self._previous
        request.sample2 = self._current
        for slot, (_, constant) in enumerate(METRICS):
            request.metrics[slot].metricId = getattr(nvml, constant)
        self._previous, self._current = self._current, self._previous
        nvml.nvmlGpmMetricsGet(request)
        results: list[tuple[Metric, float | BaseException]] = []
        for slot, (metric, _) in enumerate(METRICS):
            entry = request.metrics[slot]
            if entry.nvmlReturn == nvml.NVML_SUCCESS:
                results.append((metric, min(max(entry.value / 100.0, 0.0), 1.0)))
            else:
                results.append((metric, nvml.NVMLError(entry.nvmlReturn)))
        return results

    def close(self) -> None:
        for buffer in (self._previous, self._current):
            with contextlib.suppress(Exception):
                self._nvml.nvmlGpmSampleFree(buffer)
