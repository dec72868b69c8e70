"""Fill a `JobWindow` for every job from Prometheus, in a fixed number of queries.

The operator evaluates all running TrainingJobs each cycle. One query per job would mean 10,000
queries for 10,000 jobs; here every query aggregates `by (namespace, trainingjob)`, so a cycle
costs `len(RANGE_QUERIES) + len(INSTANT_QUERIES)` requests whatever the number of jobs. Per-pod
device series (dcgm-exporter's names know only the pod) get their TrainingJob label through the
sidecar's info series (`with_trainingjob`). All PromQL is built from the metric catalog.

Missing data stays missing: a job without a series gets None for that quantity, never 0.

From one round to the next the window slides by a cycle: the range queries then ask only for the
last few steps and join them to what the previous round read (`fetch(previous=)`).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import gc
import itertools
import json
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from gpuwise.diagnose import matrix
from gpuwise.diagnose.window import JobWindow, Points, slowdown_bits
from gpuwise.metrics import Metric, catalog
from gpuwise.observability.promql import sel, with_trainingjob

JobKey = tuple[str, str]  # (namespace, trainingjob)
BY_JOB: Final = "by (namespace, trainingjob)"
MIB: Final = 1024 * 1024
PARALLEL_QUERIES: Final = 4
CHUNK_BYTES: Final = 1 << 20  # read from an answer at a time
OVERLAP_STEPS: Final = 2  # re-read by an incremental read before the previous one's last point (see `fetch`)
K = TypeVar("K")
V = TypeVar("V")

# Compute capability by GPU family, from the modelName label NVML reports (e.g. "NVIDIA H100 80GB HBM3").
# NVML writes "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB": match a token.
COMPUTE_CAPABILITY: Final[dict[str, tuple[int, int]]] = {
    "B200": (10, 0), "GB200": (10, 0), "H200": (9, 0), "H100": (9, 0), "H800": (9, 0), "GH200": (9, 0),
    "L40S": (8, 9), "L40": (8, 9), "L4": (8, 9), "A100": (8, 0), "A800": (8, 0), "A30": (8, 0),
    "A40": (8, 6), "A10": (8, 6), "A10G": (8, 6), "T4": (7, 5), "V100": (7, 0), "P100": (6, 0),
}  # fmt: skip


@functools.cache  # a handful of models, asked for by every job each cycle
def compute_capability(model: str | None) -> tuple[int, int] | None:
    """A GPU's CUDA compute capability from its NVML model name; None for a model not listed."""
    tokens = re.split(r"[^A-Za-z0-9]+", model or "")
    return next((COMPUTE_CAPABILITY[t] for t in tokens if t in COMPUTE_CAPABILITY), None)


def _job_mean(metric: Metric) -> str:
    return f"avg {BY_JOB} ({with_trainingjob(sel(metric))})"


def _job_max(metric: Metric) -> str:
    return f"max {BY_JOB} ({sel(metric)})"


def range_queries() -> dict[str, str]:
    """Series sampled across the window: what must hold *most of the time*."""
    return {
        "gpu_utilization": _job_mean(catalog.GPU_UTIL),
        "data_wait_fraction": f"avg {BY_JOB} ({sel(catalog.DATA_WAIT_RATIO)})",
        "sm_active": f"max {BY_JOB} ({with_trainingjob(sel(catalog.SM_ACTIVE))})",
    }


def clock_reasons_query() -> str:
    """Per worker, at each sample, the clock-event reasons mask of its GPU with the highest one.

    PromQL has no bitwise operators, and the arithmetic that extracts bits costs Prometheus three
    times this whole query at 10,000 jobs, so the slowdown bits are taken in Python
    (`slowdown_bits`). The max of a worker's GPUs is one GPU's real mask, so it never invents a
    slowdown; it can hide one where another GPU has a higher benign bit at that sample (sync boost
    0x10, display clocks 0x100), which datacenter GPUs rarely set.
    """
    return (
        f"max by (namespace, trainingjob, worker) ({with_trainingjob(sel(catalog.CLOCKS_EVENT_REASONS), worker=True)})"
    )


def worker_step_query(step_seconds: float) -> str:
    """Each worker's mean step time, for the straggler rule (one series per worker, not per job)."""
    rate_window = f"{int(max(60.0, 4 * step_seconds))}s"  # a rate needs several scrapes in its window
    step_sum = f"rate({sel(catalog.STEP_DURATION, suffix='_sum')}[{rate_window}])"
    step_count = f"rate({sel(catalog.STEP_DURATION, suffix='_count')}[{rate_window}])"
    return f"avg by (namespace, trainingjob, worker) ({step_sum} / {step_count})"


def instant_queries(window: str) -> dict[str, str]:
    """Single facts at the end of the window."""

    def over_window(aggregate: str, metric: Metric) -> str:
        return f"{aggregate} {BY_JOB} ({with_trainingjob(f'{aggregate}_over_time({sel(metric)}[{window}])')})"

    fb_total = f"({sel(catalog.FB_USED)} + {sel(catalog.FB_FREE)})"
    return {
        "sm_activity": over_window("avg", catalog.SM_ACTIVE),
        "tensor_activity": over_window("avg", catalog.TENSOR_ACTIVE),
        "memory_used_mib": over_window("max", catalog.FB_USED),
        "memory_total_mib": f"max {BY_JOB} ({with_trainingjob(fb_total)})",
        "pcie_tx_bytes_per_second": over_window("avg", catalog.PCIE_TX),
        "pcie_rx_bytes_per_second": over_window("avg", catalog.PCIE_RX),
        "gpus": f"count {BY_JOB} ({with_trainingjob(sel(catalog.GPU_UTIL))})",
        "gpu_model": f"count by (namespace, trainingjob, modelName) ({with_trainingjob(sel(catalog.GPU_UTIL))})",
        "last_step": _job_max(catalog.LAST_STEP),
        "batch_size": _job_max(catalog.BATCH_SIZE),
        "num_workers": _job_max(catalog.NUM_WORKERS),
        "pin_memory": f"min {BY_JOB} ({sel(catalog.PIN_MEMORY)})",
        # Per process, whether any step of the window ran under autocast; a job without is one process without.
        "autocast": f"min {BY_JOB} (max_over_time({sel(catalog.AUTOCAST)}[{window}]))",
        "cuda_reserved_peak_bytes": _job_max(catalog.CUDA_RESERVED_PEAK),
    }


class PrometheusError(RuntimeError):
    """Prometheus could not answer; the message says which query and why."""


@dataclass(frozen=True)
class Prometheus:
    url: str
    timeout: float = 10.0

    def _chunks(self, path: str, params: Mapping[str, str]) -> Iterator[bytes]:
        """The answer's body as it arrives, `CHUNK_BYTES` at a time: the one request every query makes."""
        address = f"{self.url.rstrip('/')}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(address, timeout=self.timeout) as response:
                while chunk := response.read(CHUNK_BYTES):
                    yield chunk
        except (urllib.error.URLError, OSError) as exc:
            raise PrometheusError(f"{self.url}: {params.get('query')!r} failed: {exc}") from exc

    def _get(self, path: str, params: Mapping[str, str]) -> bytes:
        return b"".join(self._chunks(path, params))

    def _result(self, body: bytes, query: str) -> Any:
        try:
            answer = json.loads(body)
        except ValueError as exc:
            raise PrometheusError(f"{self.url}: {query!r} failed: {exc}") from exc
        if answer.get("status") != "success":
            raise PrometheusError(f"{self.url}: {query!r}: {answer.get('error', answer)}")
        return answer["data"]["result"]

    def instant(self, query: str, at: float) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._result(
            self._get("/api/v1/query", {"query": query, "time": f"{at:.3f}"}), query
        )
        return result

    def vector(self, query: str, at: float) -> list[matrix.Pair]:
        """An instant query's samples as (label set as written, value text): see `gpuwise.diagnose.matrix`."""
        body = self._get("/api/v1/query", {"query": query, "time": f"{at:.3f}"})
        try:
            samples = matrix.vector(body)
        except matrix.MalformedAnswer as exc:
            raise PrometheusError(f"{self.url}: {query!r}: {exc}") from exc
        if samples is None:
            self._result(body, query)  # raises with Prometheus' own error
            raise PrometheusError(f"{self.url}: {query!r}: the answer is not a vector of samples")
        return samples

    def range(self, query: str, start: float, end: float, step: float) -> Iterator[matrix.RangeSeries]:
        """The series of a range query, decoded as the answer arrives (see `gpuwise.diagnose.matrix`)."""
        for piece in self.range_texts(query, start, end, step):
            for raw, text in piece.pairs:
                yield matrix.RangeSeries(raw, text)

    def range_texts(self, query: str, start: float, end: float, step: float) -> Iterator[matrix.Piece]:
        """A range query's series as (label set as written, points text), a `matrix.Piece` at a time.

        A piece is freed once its series are cut from it: at 10,000 jobs of 4 workers an answer
        is up to 66 MB, which need never be in memory whole.
        """
        params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        chunks = self._chunks("/api/v1/query_range", params)
        head = b""
        for chunk in chunks:
            head += chunk
            if len(head) >= len(matrix.SUCCESSFUL_MATRIX):
                break
        if not head.startswith(matrix.SUCCESSFUL_MATRIX):
            self._result(head + b"".join(chunks), query)  # raises with Prometheus' own error
            raise PrometheusError(f"{self.url}: {query!r}: the answer is not a range of series")
        try:
            yield from matrix.matrix_in(itertools.chain([head], chunks))
        except matrix.MalformedAnswer as exc:
            raise PrometheusError(f"{self.url}: {query!r}: {exc}") from exc


@dataclass(frozen=True)
class JobFacts:
    """What the caller knows of a job that Prometheus does not: its age, CPU and configuration."""

    age_seconds: float
    cpu_cores: float | None = None
    processes_per_node: int = 1
    gradient_accumulation_steps: int | None = None  # no metric reports it: the job's env says it


def _key(labels: Mapping[str, str]) -> JobKey:
    return labels.get("namespace", ""), labels.get("trainingjob", "")


# What a series' label set says, decoded: its job, its worker index (None where it has none that
# is a whole number) and its GPU model (the gpu_model fact's only label of its own).
Labels = tuple[JobKey, int | None, str | None]


class LabelSets:
    """What each series' label set says, decoded once per label set rather than once per series.

    Every query aggregates `by (namespace, trainingjob)` or by those and one more label, and
    Prometheus writes a given label set the same way every time (names sorted, one JSON
    encoder), so the label set's bytes as written are a key, looked up here (`of`); only those
    not seen before are decoded. At 10,000 jobs of 4 workers a round reads 250,000 series but
    60,000 label sets, all seen before from the second round on: `json.loads` of each series'
    labels was 0.5 s of CPU a round. One table goes from round to round (`Snapshot.label_sets`).

    Bounded: once it has grown by a quarter since it was last pruned, the label sets of jobs that
    the round did not see are dropped (`prune`), so it holds at most 5/4 of what a round sees
    (some 15 MB at 10,000 jobs). Pruning every round would cost a set of every job and a new
    table, 50 ms, each round. Each job gets one (namespace, trainingjob) tuple, whichever answer
    spells it and in whichever round it was decoded (19 tuples and 38 strings per job where one
    of each does, some 30 MB at 10,000 jobs). Dict operations are atomic, so the fetching
    threads share it.
    """

    def __init__(self) -> None:
        self._labels: dict[bytes, Labels] = {}
        self._keys: dict[JobKey, JobKey] = {}
        self._pruned_size = 0

    def __len__(self) -> int:
        return len(self._labels)

    def of(self, raws: Sequence[bytes]) -> list[Labels]:
        """What each of `raws` says, in order."""
        said: list[Labels | None] = list(map(self._labels.get, raws))
        if None in said:
            said = [labels or self._learn(raw) for raw, labels in zip(raws, said, strict=True)]
        return said  # type: ignore[return-value]  # no None left

    def _learn(self, raw: bytes) -> Labels:
        try:
            decoded: dict[str, str] = json.loads(raw)
        except ValueError as exc:
            raise matrix.MalformedAnswer(f"not a label set: {raw[:200]!r}") from exc
        key = _key(decoded)
        worker = decoded.get("worker", "")
        labels = (
            self._keys.setdefault(key, key),
            int(worker) if worker.isdecimal() else None,
            decoded.get("modelName"),
        )
        return self._labels.setdefault(raw, labels)

    def prune(self, jobs: Callable[[], Collection[JobKey]]) -> None:
        """Drop the label sets of jobs not in `jobs()`, the round's, once the table has grown by a quarter."""
        if len(self._labels) <= self._pruned_size * 5 // 4:
            return
        live = set(jobs())
        self._labels = {raw: labels for raw, labels in self._labels.items() if labels[0] in live}
        self._keys = {key: key for key in self._keys if key in live}
        self._pruned_size = len(self._labels)


@dataclass(frozen=True)
class Snapshot:
    """Every job's series and facts from one round of queries; windows are cut from it per job.

    A series keeps its times as well as its values, so that the next round can join its new
    points to these (`fetch(previous=)`); a `JobWindow` gets the values (`Points.values`).
    """

    now: float
    window_seconds: float
    step_seconds: float
    series: Mapping[str, Mapping[JobKey, Points]]
    facts: Mapping[str, Mapping[JobKey, Any]]
    # Per job, per worker index: (unix time, mean step seconds).
    worker_steps: Mapping[JobKey, Mapping[int, Points]] = field(default_factory=dict)
    # Per job, per worker index: the clock-slowdown bits at each sample.
    clock_slowdowns: Mapping[JobKey, Mapping[int, Points]] = field(default_factory=dict)
    # The times the range queries were evaluated at (`matrix.Grid.ending(now, ...)`).
    grid: matrix.Grid | None = None
    # What the label sets of this round's answers and earlier ones say: the next round decodes
    # only those it has not seen.
    label_sets: LabelSets = field(default_factory=LabelSets, repr=False, compare=False)

    def jobs(self) -> list[JobKey]:
        """Every (namespace, trainingjob) that some query returned, sorted; unlabelled series left out."""
        keys = {key for by_job in (*self.series.values(), *self.facts.values()) for key in by_job}
        return sorted(key for key in keys if all(key))

    def window(self, key: JobKey, job: JobFacts) -> JobWindow:
        facts = {name: by_job.get(key) for name, by_job in self.facts.items()}  # read several times each
        fact = facts.get

        def whole(name: str) -> int | None:
            value = fact(name)
            return int(value) if value is not None else None

        def flag(name: str) -> bool | None:
            value = fact(name)
            return bool(value) if value is not None else None

        last_step, reserved = fact("last_step"), fact("cuda_reserved_peak_bytes")
        batch, model = whole("batch_size"), fact("gpu_model")
        return JobWindow(
            window_seconds=self.window_seconds,
            sample_interval_seconds=self.step_seconds,
            job_age_seconds=job.age_seconds,
            gpu_utilization=self._values("gpu_utilization", key),
            data_wait_fraction=self._values("data_wait_fraction", key),
            sm_active=self._values("sm_active", key),
            sm_activity=fact("sm_activity"),
            tensor_activity=fact("tensor_activity"),
            memory_used_mib=fact("memory_used_mib"),
            memory_total_mib=fact("memory_total_mib"),
            seconds_since_last_step=self.now - last_step if last_step is not None else None,
            gpus=whole("gpus") or 0,
            gpu_model=model,
            compute_capability=compute_capability(model),
            cpu_cores=job.cpu_cores,
            processes_per_node=job.processes_per_node,
            gradient_accumulation_steps=job.gradient_accumulation_steps,
            batch_size=batch,
            num_workers=whole("num_workers"),
            pin_memory=flag("pin_memory"),
            autocast=flag("autocast"),
            memory_by_batch=[(batch, reserved / MIB)] if batch and reserved else [],
            worker_step_seconds=self.worker_steps.get(key, {}),
            clock_slowdowns={worker: points.values for worker, points in self.clock_slowdowns.get(key, {}).items()},
            pcie_tx_bytes_per_second=fact("pcie_tx_bytes_per_second"),
            pcie_rx_bytes_per_second=fact("pcie_rx_bytes_per_second"),
        )

    def _values(self, name: str, key: JobKey) -> Sequence[float]:
        points = self.series[name].get(key)
        return points.values if points is not None else []


class _GcPause:
    """Cyclic garbage collection paused while any thread holds it, and restored after the last.

    Decoding a round of answers for 10,000 jobs allocates some 500,000 dicts and lists; every
    700 allocations start a collection over what is alive, about 1,000 collections and 0.6 s of
    CPU per round on the benchmark, to find no cycle: JSON has none. Reference counting still
    frees everything meanwhile; cycles made elsewhere wait for the next collection.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._restore = False

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._holders == 0:
                self._restore = gc.isenabled()
                gc.disable()
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0 and self._restore:
                    gc.enable()


gc_paused: Final = _GcPause()


class _Splice:
    """How a round's answers over its last few steps join the previous round's points (see `fetch`).

    A series' points over the new window are the previous round's from the window's start up to
    the re-read start (`read`), then the new answer's. Mostly both lie on their query's grid
    (`Grid.times`, which their points share): then it is a slice of the previous values and one
    concatenation, onto the new window's shared times, and a series of zeros before and now
    stays the one shared array of zeros (`matrix.zeros`). Any other (a series with gaps, one
    that started late) is cut by its times, and shares what a full read's would.
    """

    def __init__(self, previous: Snapshot, before: matrix.Grid, window: matrix.Grid, read: matrix.Grid) -> None:
        self.previous, self.window, self.read = previous, window, read
        step = window.step_ms
        # A series on its grid before (`before_times`) keeps the values at `kept`.
        self.before_times, self._before_first = before.times, before.first_ms
        self.kept = slice((window.first_ms - before.first_ms) // step, (read.first_ms - before.first_ms) // step)
        self.before_zeros, self.read_zeros = before.zeros(), read.zeros()
        self.zeros = Points(window.times, window.zeros())  # for every series of zeros throughout
        self._start, self._reread = window.start, read.start

    @classmethod
    def after(cls, previous: Snapshot | None, window: matrix.Grid, window_seconds: float) -> _Splice | None:
        """How to join this round to `previous`; None when it cannot be: the round reads the whole window."""
        before = previous.grid if previous is not None else None
        if previous is None or before is None or previous.window_seconds != window_seconds:
            return None
        if (before.step_ms, before.count) != (window.step_ms, window.count):
            return None
        reread_ms = before.last_ms - OVERLAP_STEPS * window.step_ms
        if before.last_ms > window.last_ms or reread_ms <= window.first_ms:
            return None  # the clock went back, or the previous round is about as old as the window
        count = (window.last_ms - reread_ms) // window.step_ms + 1
        return cls(previous, before, window, matrix.Grid(reread_ms, window.step_ms, count))

    def join(self, old: Points, new: Points) -> Points:
        """The points of a series in both answers, whatever their times."""
        return self.cut(old, new) or new

    def cut(self, old: Points, new: Points | None = None) -> Points | None:
        """`old`'s points from the window's start to the re-read start, then `new`'s; None if there are none.

        Where each has a point at every step from its first to its last (a series that started,
        or stopped, within the window), that is index arithmetic, as on the grid.
        """
        step, start, reread = self.window.step_ms, self.window.first_ms, self.read.first_ms
        first = self._first(old)
        new_first = self._first(new) if new is not None else None
        if first is None or (new is not None and new_first is None):
            return self._cut_by_times(old, new)
        low = max(0, (start - first) // step)
        high = max(low, min(len(old), (reread - first) // step))
        kept_first, zeros = first + low * step, matrix.shared_zeros(old.values)
        values = old.values[low:high]
        if not values:
            return new
        if new is None:
            return Points(self.times(kept_first, len(values)), matrix.zeros_of(len(values)) if zeros else values)
        zeros = zeros and matrix.shared_zeros(new.values)
        count = len(values) + len(new)
        if kept_first + len(values) * step == new_first:  # no step missing between them
            times = self.times(kept_first, count)
        else:
            times = self.times(kept_first, len(values)) + new.times
        return Points(times, matrix.zeros_of(count) if zeros else values + new.values)

    def _first(self, points: Points) -> int | None:
        """The time of the first of `points`, in ms, where they are at every step from it to the last; else None."""
        times = points.times
        if times is self.before_times:
            return self._before_first
        count, step = len(times), self.window.step_ms
        if not count:
            return None
        first = round(times[0] * 1000)
        every_step = round(times[-1] * 1000) - first == (count - 1) * step
        return first if every_step and (first - self.window.first_ms) % step == 0 else None

    def times(self, first_ms: int, count: int) -> array[float]:
        """The shared times of `count` steps from `first_ms`: the window's own when they are the window."""
        window = self.window
        if (first_ms, count) == (window.first_ms, window.count):
            return window.times
        return matrix.grid_times(first_ms, window.step_ms, count)

    def _cut_by_times(self, old: Points, new: Points | None) -> Points | None:
        """`cut` for series with steps missing: by their times."""
        low, high = bisect.bisect_left(old.times, self._start), bisect.bisect_left(old.times, self._reread)
        times, values = old.times[low:high], old.values[low:high]
        if new is not None:
            times, values = times + new.times, values + new.values
        return Points(matrix.shared(times, self.window.step_ms), values) if values else None

    def series(self, new: dict[JobKey, Points], gone: Mapping[JobKey, Points]) -> dict[JobKey, Points]:
        """`new` with the `gone` series that it no longer has, cut to their points before the re-read."""
        kept = {key: points for key, old in gone.items() if key not in new and (points := self.cut(old))}
        # Sorted as Prometheus sorts its series (by label values), as a full read would be.
        return dict(sorted({**new, **kept}.items())) if kept else new

    def workers(
        self, new: dict[JobKey, dict[int, Points]], gone: Iterable[tuple[JobKey, Mapping[int, Points]]]
    ) -> dict[JobKey, dict[int, Points]]:
        """`new` with the `gone` workers that it no longer has, like `series`."""
        resort = False
        for key, before in gone:
            now = new.get(key, {})
            kept = {worker: points for worker, old in before.items() if worker not in now and (points := self.cut(old))}
            if kept:
                resort = True
                # Prometheus sorts a job's series by the worker label's text: "10" before "2".
                new[key] = dict(sorted({**now, **kept}.items(), key=lambda item: str(item[0])))
        return dict(sorted(new.items())) if resort else new


class _Reader:
    """A range query's answer, read into each series' points over the window.

    Without a `_Splice` the answer covers the window; with one, it covers the last few steps and
    is joined to the previous round's points. A range answer has a point at a step of the query
    or none, so a series with as many points as the grid has times has one at each: its times
    are the grid's (`Grid.times`, shared), and where every series of a piece of the answer has
    them all, each one's values are a slice of the piece's, parsed in one pass (`Piece.values`).
    """

    def __init__(self, grid: matrix.Grid, splice: _Splice | None, labels: LabelSets) -> None:
        self.read = grid if splice is None else splice.read
        self.splice = splice
        self.labels = labels
        # `old.times is self._before` only for a previous series that lay on its grid.
        self._before: array[float] | None = splice.before_times if splice is not None else None
        self._zeros = Points(self.read.times, self.read.zeros())  # for every series of zeros throughout

    def _values(self, piece: matrix.Piece) -> list[array[float]]:
        """Each series' values."""
        count, every = self.read.count, piece.values()
        if len(every) == count * len(piece.pairs):
            return [every[at : at + count] for at in range(0, len(every), count)]
        ends = list(itertools.accumulate(text.count(b"],[") + 1 for _, text in piece.pairs))
        if ends[-1] != len(every):
            raise matrix.MalformedAnswer("not a Prometheus matrix answer: its points are misshapen")
        return [every[start:end] for start, end in zip([0, *ends], ends, strict=False)]

    def _points(self, text: bytes, values: array[float], old: Points | None) -> Points:
        """A series' points from its points text and values, joined to its `old` ones."""
        read, splice, count = self.read, self.splice, len(values)
        at = 0 if count == read.count else read.span(text, count)  # a point at each time from `at`
        if at == 0 and old is not None and splice is not None and old.times is self._before:
            # At every step before, and now from the re-read start on (to its end, or stopped since).
            window = splice.window
            if old.values is splice.before_zeros and values is splice.read_zeros:  # zeros throughout
                return splice.zeros
            # A new array of just the right size (`+=` would allocate an eighth more, to grow it).
            kept = old.values[splice.kept] + values
            return Points(window.times if count == read.count else splice.times(window.first_ms, len(kept)), kept)
        if at is None:
            times = matrix.times(text, count, read.step)
        elif count == read.count:
            if values is self._zeros.values and (old is None or splice is None):
                return self._zeros
            times = read.times
        else:
            times = matrix.grid_times(read.first_ms + at * read.step_ms, read.step_ms, count)
        new = Points(times, values)
        return new if old is None or splice is None else splice.join(old, new)

    def per_job(self, answer: Iterable[matrix.Piece], old: Mapping[JobKey, Points]) -> dict[JobKey, Points]:
        """Per job, the points of its series in a per-job range answer; `old`'s are taken from it (see `fetch`)."""
        previous = _taken(old)
        points, take, found = self._points, previous.pop, {}
        for piece in answer:
            raws, texts = _columns(piece.pairs)
            for labels, text, values in zip(self.labels.of(raws), texts, self._values(piece), strict=True):
                found[labels[0]] = points(text, values, take(labels[0], None))
        if self.splice is not None and previous:
            found = self.splice.series(found, previous)  # what is left in `previous` is no longer answered
        previous.clear()
        return found

    def per_worker(
        self, answer: Iterable[matrix.Piece], old: Mapping[JobKey, Mapping[int, Points]], *, clocks: bool = False
    ) -> dict[JobKey, dict[int, Points]]:
        """Per job, per worker index, the points of that worker's series; series without a worker index left out.

        `old`'s are taken from it, like `per_job`. `clocks`: the values are clock-event reasons
        masks, kept as their slowdown bits (`slowdowns`).
        """
        previous, points = _taken(old), self._points
        by_job: dict[JobKey, dict[int, Points]] = {}
        taken: list[tuple[JobKey, dict[int, Points]]] = []  # the jobs' previous workers, as they are taken
        job: JobKey | None = None
        workers: dict[int, Points] = {}
        before: dict[int, Points] = {}
        for piece in answer:
            raws, texts = _columns(piece.pairs)
            values = list(map(_slowdowns, texts)) if clocks else self._values(piece)
            for (key, worker, _), text, found in zip(self.labels.of(raws), texts, values, strict=True):
                if worker is None:
                    continue
                if key is not job:  # a job's series come one after another: look it up once
                    job, before = key, _taken(previous.pop(key, {}))
                    taken.append((key, before))
                    workers = by_job.setdefault(key, {})
                workers[worker] = points(text, found, before.pop(worker, None))
        if self.splice is not None:  # what is left in `taken` and `previous` is no longer answered
            by_job = self.splice.workers(by_job, itertools.chain(taken, previous.items()))
        previous.clear()
        return by_job


def _taken(old: Mapping[K, V]) -> dict[K, V]:
    """`old` itself, to take series from as they are joined (see `fetch`); a copy where it is not a dict."""
    return old if isinstance(old, dict) else dict(old)


def _columns(pairs: Sequence[matrix.Pair]) -> tuple[Sequence[bytes], Sequence[bytes]]:
    """The first and the second of each pair."""
    if not pairs:
        return (), ()
    first, second = zip(*pairs, strict=True)
    return first, second


def _slowdowns(text: bytes) -> array[float]:
    """The slowdown bits at each sample of a points text; for most GPUs nothing to parse or mask (`zeros`).

    A mask takes a handful of values, each repeated over many samples: each distinct one is
    parsed and masked once.
    """
    masked = matrix.zeros(text)
    if masked is None:
        texts = matrix.texts(text)
        bits = {text: float(slowdown_bits(float(text))) for text in set(texts)}
        masked = array("d", map(bits.__getitem__, texts))
    return masked


def _facts(name: str, samples: Sequence[matrix.Pair], labels: LabelSets) -> dict[JobKey, Any]:
    raws, values = _columns(samples)
    said = labels.of(raws)
    if name == "gpu_model":
        return {key: model for key, _, model in said}
    # Each distinct value parsed once, one float object for all the jobs with it: most facts take
    # a few values across a fleet (batch sizes, worker counts, flags), and 10,000 floats are 240 kB.
    parsed = {text: float(text) for text in set(values)}
    return dict(zip([key for key, _, _ in said], map(parsed.__getitem__, values), strict=True))


def fetch(
    source: Prometheus, *, now: float, window_seconds: float, step_seconds: float, previous: Snapshot | None = None
) -> Snapshot:
    """One round of `query_count()` queries covering every job Prometheus knows.

    `PARALLEL_QUERIES` are in flight at once: Prometheus evaluates them side by side, so a round
    takes about as long as its slowest query instead of their sum, for the same operator CPU.
    Each answer is decoded in the thread that fetched it, so that its body (up to 70 MB at
    10,000 jobs of 4 workers) is freed as soon as it is read rather than held with all the others.

    The range queries are evaluated on the multiples of the step (`matrix.Grid.ending`), so the
    newest point is up to one step older than `now`; the instant queries are at `now`.

    Incremental reads. Given the `previous` round's snapshot (same window and step), each range
    query asks only from `OVERLAP_STEPS` before that round's last point on; its answer replaces
    the previous points from there, and the previous points before it, still in the new window,
    are kept (`_Splice`). The overlap re-reads the points that a scrape ingested just after the
    previous round could have changed: a scrape's samples are stored at most its timeout, at
    most one scrape interval, after their time, and the step is the scrape interval. At 10,000
    jobs a series is then 5 points instead of 61. The snapshot holds what a full read would,
    value for value and in the same order, unless Prometheus' data changed further back than
    the overlap: a sample stored that late (a remote-write backlog, a backfill) is seen by full
    reads only, that is after the operator restarts, or after a pause longer than the window.
    A series absent from the new answer keeps its previous points older than the re-read; one
    new in it has its new points only (a full read would show any older ones too). A full read
    is done when there is no previous round, it had another window or step, its last point is
    after this one's (the clock went back), or the re-read would start at or before the window.
    (Prometheus' own `avg` of a join adds its inputs in no fixed order, so two full reads may
    differ in the last bit of a job's mean utilization: a joined read matches one of them.)

    `previous` is taken over: its series are moved into the new snapshot as they are joined, and
    its facts dropped, so that two rounds' series (some 60 MB at 10,000 jobs) are never in memory
    together. It must not be used afterwards; a read that fails leaves none to join to.
    """
    grid = matrix.Grid.ending(now, window_seconds, step_seconds)
    splice = _Splice.after(previous, grid, window_seconds)
    labels = previous.label_sets if previous is not None else LabelSets()
    if previous is not None:  # taken over: its facts are of no use, its series are taken as they are joined
        for by_job in previous.facts.values():
            _taken(by_job).clear()
    reader = _Reader(grid, splice, labels)
    read = reader.read

    def ranged(query: str) -> Iterator[matrix.Piece]:
        return source.range_texts(query, read.start, read.end, read.step)

    def job_series(name: str, query: str) -> dict[JobKey, Points]:
        return reader.per_job(ranged(query), splice.previous.series.get(name, {}) if splice is not None else {})

    def step_times() -> dict[JobKey, dict[int, Points]]:
        old = splice.previous.worker_steps if splice is not None else {}
        return reader.per_worker(ranged(worker_step_query(step_seconds)), old)

    def clock_slowdowns() -> dict[JobKey, dict[int, Points]]:
        old = splice.previous.clock_slowdowns if splice is not None else {}
        return reader.per_worker(ranged(clock_reasons_query()), old, clocks=True)

    def fact(name: str, query: str) -> dict[JobKey, Any]:
        return _facts(name, source.vector(query, now), labels)

    window = f"{int(window_seconds)}s"
    try:
        with gc_paused(), ThreadPoolExecutor(PARALLEL_QUERIES, thread_name_prefix="prometheus") as pool:
            # The two largest answers first: the others are decoded while Prometheus evaluates them.
            steps, clocks = pool.submit(step_times), pool.submit(clock_slowdowns)
            ranges = {name: pool.submit(job_series, name, query) for name, query in range_queries().items()}
            instants = {name: pool.submit(fact, name, query) for name, query in instant_queries(window).items()}
            series = {name: future.result() for name, future in ranges.items()}
            facts = {name: future.result() for name, future in instants.items()}
            worker_steps, slowdowns = steps.result(), clocks.result()
    except matrix.MalformedAnswer as exc:  # a label set that is not JSON
        raise PrometheusError(f"{source.url}: {exc}") from exc
    labels.prune(
        lambda: {key for by_job in (*series.values(), *facts.values(), worker_steps, slowdowns) for key in by_job}
    )
    return Snapshot(now, window_seconds, step_seconds, series, facts, worker_steps, slowdowns, grid, labels)


def query_count() -> int:
    """Requests per evaluation cycle, whatever the number of jobs."""
    return len(range_queries()) + len(instant_queries("1m")) + 2  # + the per-worker step times and clocks
