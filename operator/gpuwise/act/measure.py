"""What the action runner reads from Prometheus: a job's throughput and GPU utilization.

Like the evaluation, it costs a fixed number of queries per cycle whatever the number of jobs:
each query aggregates `by (namespace, trainingjob)` over the whole fleet and the answer is kept
for the cycle (`PerCycle`), then looked up per job. The window is the operator's
`actions.verifyWindow`, the same for the baseline (before an action) and the result (after it),
so the two are comparable. Missing data stays missing: a job without a series is unmeasured.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Generic, TypeVar

from gpuwise.api.trainingjob import Measurement
from gpuwise.metrics import catalog
from gpuwise.metrics.promql import rate, sel, with_trainingjob
from gpuwise.prometheus.client import Prometheus
from gpuwise.prometheus.labels import JobKey, job_key

T = TypeVar("T")


class PerCycle(Generic[T]):
    """One answer per cycle, shared by every job's timer that asks within it."""

    def __init__(self, fetch: Callable[[], Awaitable[T]], cycle_seconds: float) -> None:
        self._fetch = fetch
        self._cycle_seconds = cycle_seconds
        self._lock = asyncio.Lock()
        self._value: tuple[float, T] | None = None
        self.fetches = 0

    async def get(self) -> T:
        async with self._lock:
            if self._value is None or time.monotonic() - self._value[0] >= self._cycle_seconds:
                value = await self._fetch()
                self.fetches += 1
                self._value = (time.monotonic(), value)
            return self._value[1]


def throughput_query(window: str) -> str:
    return f"sum by (namespace, trainingjob) ({rate(catalog.SAMPLES, window)})"


def utilization_query(window: str) -> str:
    return f"avg by (namespace, trainingjob) ({with_trainingjob(f'avg_over_time({sel(catalog.GPU_UTIL)}[{window}])')})"


def by_job(result: list[dict[str, Any]]) -> dict[JobKey, float]:
    """An instant answer's values by the job their labels name."""
    return {job_key(sample["metric"]): float(sample["value"][1]) for sample in result}


class Meter:
    """Throughput (samples/s) and mean GPU utilization of every job over `window_seconds`."""

    def __init__(self, source: Prometheus, window_seconds: float, cycle_seconds: float) -> None:
        self.source = source
        self.window = f"{max(1, round(window_seconds))}s"
        self._readings = PerCycle(self._read, cycle_seconds)

    async def _read(self) -> tuple[dict[JobKey, float], dict[JobKey, float]]:
        now = time.time()
        samples = await asyncio.to_thread(self.source.instant, throughput_query(self.window), now)
        utilization = await asyncio.to_thread(self.source.instant, utilization_query(self.window), now)
        return by_job(samples), by_job(utilization)

    async def measure(self, namespace: str, name: str, at: datetime) -> Measurement:
        samples, utilization = await self._readings.get()
        util = utilization.get((namespace, name))
        return Measurement(
            samples_per_second=round(samples[namespace, name], 3) if (namespace, name) in samples else None,
            gpu_utilization=round(min(max(util, 0.0), 100.0), 1) if util is not None else None,
            at=at,
        )
