"""Recorded device traces: what the simulated backend replays and `gpuwise run` records.

A trace is JSON Lines, one record per GPU per moment:
`{"t": 12.0, "gpu": 0, "values": {"DCGM_FI_DEV_GPU_UTIL": 41.0, "DCGM_FI_DEV_FB_USED": 30211}}`
with `t` in seconds from the start and values in the catalog's units. A `gpuwise run` JSON report
holds the same records under its `"trace"` key and can be replayed as it is.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwise.metrics import BY_NAME, Metric, Scope
from gpuwise.sidecar.backend import Sample


class TraceError(ValueError):
    """The trace file cannot be replayed; the message names the file, the line and the fix."""


def replayable(metric: Metric) -> bool:
    return metric.scope in (Scope.DEVICE, Scope.GPU) and not metric.extra_labels


@dataclass(frozen=True)
class Trace:
    """Per GPU, the records in time order; `at` holds each record until the next one."""

    times: tuple[tuple[float, ...], ...]
    values: tuple[tuple[Mapping[str, float], ...], ...]
    duration: float

    @property
    def gpus(self) -> int:
        return len(self.times)

    def at(self, t: float, gpu: int) -> Mapping[str, float]:
        """The values of `gpu` at `t` seconds; the trace loops when it ends."""
        if self.duration > 0:
            t %= self.duration
        times = self.times[gpu]
        return self.values[gpu][max(bisect.bisect_right(times, t) - 1, 0)]


def load(path: Path) -> Trace:
    try:
        text = path.read_text()
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror}") from exc
    if path.suffix == ".json":
        try:
            document = json.loads(text)
            lines: Iterable[tuple[int, Any]] = enumerate(document["trace"], 1)
        except (ValueError, KeyError, TypeError) as exc:
            raise TraceError(f"{path}: expected a gpuwise run report with a 'trace' list ({exc})") from exc
    else:
        lines = (
            (number, _parse(path, number, line)) for number, line in enumerate(text.splitlines(), 1) if line.strip()
        )
    per_gpu: dict[int, list[tuple[float, dict[str, float]]]] = {}
    for number, record in lines:
        t, gpu, values = _check(path, number, record)
        per_gpu.setdefault(gpu, []).append((t, values))
    if not per_gpu:
        raise TraceError(f"{path}: the trace has no records")
    if sorted(per_gpu) != list(range(len(per_gpu))):
        raise TraceError(f"{path}: GPUs must be numbered 0..{len(per_gpu) - 1}, found {sorted(per_gpu)}")
    ordered = [sorted(per_gpu[gpu], key=lambda entry: entry[0]) for gpu in range(len(per_gpu))]
    last = max(entries[-1][0] for entries in ordered)
    step = min((b[0] - a[0] for entries in ordered for a, b in itertools.pairwise(entries)), default=1.0)
    return Trace(
        times=tuple(tuple(t for t, _ in entries) for entries in ordered),
        values=tuple(tuple(values for _, values in entries) for entries in ordered),
        duration=last + max(step, 0.0),
    )


def _parse(path: Path, number: int, line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError as exc:
        raise TraceError(f"{path}:{number}: not JSON ({exc})") from exc


def _check(path: Path, number: int, record: Any) -> tuple[float, int, dict[str, float]]:
    where = f"{path}:{number}"
    if not isinstance(record, dict) or not isinstance(record.get("values"), dict):
        raise TraceError(f'{where}: expected {{"t": seconds, "gpu": index, "values": {{metric: value}}}}')
    t, gpu = record.get("t"), record.get("gpu")
    if not isinstance(t, int | float) or t < 0 or not isinstance(gpu, int) or gpu < 0:
        raise TraceError(f"{where}: 't' must be seconds >= 0 and 'gpu' an index >= 0")
    values: dict[str, float] = {}
    for name, value in record["values"].items():
        metric = BY_NAME.get(name)
        if metric is None or not replayable(metric):
            raise TraceError(f"{where}: {name!r} is not a per-device metric of the catalog")
        if not isinstance(value, int | float):
            raise TraceError(f"{where}: {name} must be a number, not {value!r}")
        values[name] = float(value)
    return float(t), gpu, values


def records(sample: Sample, t: float) -> Iterator[dict[str, Any]]:
    """The trace records of one sample (whole GPUs only; MIG instances are not replayed)."""
    per_gpu: dict[int, dict[str, float]] = {}
    for reading in sample.readings:
        if not reading.device.is_mig and not reading.extra and replayable(reading.metric):
            per_gpu.setdefault(reading.device.index, {})[reading.metric.name] = reading.value
    for gpu, values in sorted(per_gpu.items()):
        yield {"t": round(t, 3), "gpu": gpu, "values": values}
