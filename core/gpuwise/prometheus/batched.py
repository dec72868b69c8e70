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

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import Any, Final

from gpuwise.diagnose.straggler import step_extremes_by_job
from gpuwise.diagnose.window import CLOCK_SLOWDOWNS, REPORTED_FIELDS, Points, Reported
from gpuwise.hardware.compute_capability import capability
from gpuwise.metrics import Metric, catalog
from gpuwise.metrics.promql import sel, with_trainingjob
from gpuwise.prometheus import answers
from gpuwise.prometheus.client import Prometheus, PrometheusError
from gpuwise.prometheus.heap import read_heap
from gpuwise.prometheus.incremental import Reader, Splice, columns, take_over
from gpuwise.prometheus.labels import JobKey, LabelSets
from gpuwise.prometheus.snapshot import Snapshot

BY_JOB: Final = "by (namespace, trainingjob)"
MIB: Final = 1024 * 1024
PARALLEL_QUERIES: Final = 4


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


# How much further back than the window the clock-reasons filter looks (`clock_reasons_query`):
# a range query's first point may show a sample up to Prometheus' lookback delta (5 min by
# default) older than itself.
CLOCK_FILTER_MARGIN_SECONDS: Final = 600


def clock_reasons_query(window_seconds: float) -> str:
    """Per worker, at each sample, the clock-event reasons mask of its GPU with the highest one;
    only for the jobs one of whose GPUs set a `CLOCK_SLOWDOWNS` bit, or a higher one, lately.

    PromQL has no bitwise operators, and the arithmetic that extracts bits costs Prometheus three
    times this whole query at 10,000 jobs, so the slowdown bits are taken in Python
    (`slowdown_bits`). The max of a worker's GPUs is one GPU's real mask, so it never invents a
    slowdown; it can hide one where another GPU has a higher benign bit at that sample (sync boost
    0x10, display clocks 0x100), which datacenter GPUs rarely set.

    A mask under the lowest slowdown bit has none, so a job whose masks all were stays out of
    the answer: what the throttling rule makes of its series of zeros (nothing) is what it makes
    of none. "Lately" is since the window and `CLOCK_FILTER_MARGIN_SECONDS` before the query's
    end (`@ end()`), so that every point of the answer is of a job that passed, whichever sample
    it shows. Most GPUs of a fleet are never throttled: at 10,000 jobs of 4 workers the answer
    held 40,000 series of zeros, a sixth of the read's CPU.
    """
    reasons, lately = sel(catalog.CLOCKS_EVENT_REASONS), int(window_seconds) + CLOCK_FILTER_MARGIN_SECONDS
    worst = f"max_over_time({reasons}[{lately}s] @ end())"
    per_worker = f"max by (namespace, trainingjob, worker) ({with_trainingjob(reasons, worker=True)})"
    slowed = f"max {BY_JOB} ({with_trainingjob(worst)}) >= {min(CLOCK_SLOWDOWNS)}"
    return f"{per_worker} and on (namespace, trainingjob) ({slowed})"


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
        # The least capable of the job's GPUs, as NVML reported it (absent from dcgm-exporter's series).
        "compute_capability": f"min {BY_JOB} ({sel(catalog.COMPUTE_CAPABILITY)})",
        "last_step": _job_max(catalog.LAST_STEP),
        "batch_size": _job_max(catalog.BATCH_SIZE),
        "num_workers": _job_max(catalog.NUM_WORKERS),
        "pin_memory": f"min {BY_JOB} ({sel(catalog.PIN_MEMORY)})",
        # Per process, whether any step of the window ran under autocast; a job without is one process without.
        "autocast": f"min {BY_JOB} (max_over_time({sel(catalog.AUTOCAST)}[{window}]))",
        "cuda_reserved_peak_bytes": _job_max(catalog.CUDA_RESERVED_PEAK),
    }


def _facts(name: str, samples: Sequence[answers.Pair], labels: LabelSets) -> dict[JobKey, Any]:
    raws, values = columns(samples)
    said = labels.of(raws)
    if name == "gpu_model":
        return {key: model for key, _, model in said}
    # Each distinct value parsed once, one float object for all the jobs with it: most facts take
    # a few values across a fleet (batch sizes, worker counts, flags), and 10,000 floats are 240 kB.
    parsed = {text: float(text) for text in set(values)}
    keys = [key for key, _, _ in said]
    if all(map(math.isfinite, parsed.values())):
        return dict(zip(keys, map(parsed.__getitem__, values), strict=True))
    # Prometheus writes NaN and infinities as such ("NaN", "+Inf"): not a measurement, so absent.
    numbers = zip(keys, map(parsed.__getitem__, values), strict=True)
    return {key: number for key, number in numbers if math.isfinite(number)}


def _by_job(
    now: float,
    facts: Mapping[str, Mapping[JobKey, Any]],
    *,
    series: Mapping[str, Mapping[JobKey, Points]],
    worker_steps: Mapping[JobKey, Mapping[int, Points]],
    extremes: Mapping[JobKey, tuple[float, float]],
    slowdowns: Mapping[JobKey, Mapping[int, Points]],
) -> dict[JobKey, Reported]:
    """Each job's `Reported` record, from each query's answer by job: `facts` and `series` by the
    name of their query. Every field is one column for all the jobs, then one record a job."""
    answers = [*facts.values(), *series.values(), worker_steps, extremes, slowdowns]
    keys = list(dict.fromkeys(itertools.chain.from_iterable(answers)))

    def column(answer: Mapping[JobKey, Any]) -> list[Any]:
        return list(map(answer.get, keys))

    def fact(name: str) -> list[Any]:
        return column(facts[name])

    def values(name: str) -> list[Sequence[float]]:
        return [points.values if points is not None else () for points in column(series[name])]

    def whole(name: str) -> list[int | None]:
        return [int(value) if value is not None else None for value in fact(name)]

    def flag(name: str) -> list[bool | None]:
        return [bool(value) if value is not None else None for value in fact(name)]

    models, batches = fact("gpu_model"), whole("batch_size")
    no_workers: Mapping[int, Points] = MappingProxyType({})
    columns: dict[str, list[Any]] = {
        **{name: values(name) for name in range_queries()},
        **{name: fact(name) for name in ("sm_activity", "tensor_activity", "memory_used_mib", "memory_total_mib")},
        "seconds_since_last_step": [now - last if last is not None else None for last in fact("last_step")],
        "gpus": [int(gpus) if gpus is not None else 0 for gpus in fact("gpus")],
        "gpu_model": models,
        "compute_capability": list(map(capability, fact("compute_capability"), models)),
        "batch_size": batches,
        "num_workers": whole("num_workers"),
        "pin_memory": flag("pin_memory"),
        "autocast": flag("autocast"),
        "memory_by_batch": [
            ((batch, reserved / MIB),) if batch and reserved else ()
            for batch, reserved in zip(batches, fact("cuda_reserved_peak_bytes"), strict=True)
        ],
        "worker_step_seconds": [workers or no_workers for workers in column(worker_steps)],
        "worker_step_extremes": column(extremes),
        "clock_slowdowns": [
            {worker: points.values for worker, points in workers.items()} if workers else no_workers
            for workers in column(slowdowns)
        ],
        **{name: fact(name) for name in ("pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second")},
    }
    if columns.keys() != set(REPORTED_FIELDS):  # a field added to `Reported` and not read here, or the reverse
        raise AssertionError(f"columns and Reported differ: {sorted(columns.keys() ^ set(REPORTED_FIELDS))}")
    return dict(zip(keys, map(Reported, *(columns[name] for name in REPORTED_FIELDS)), strict=True))


def fetch(
    source: Prometheus, *, now: float, window_seconds: float, step_seconds: float, previous: Snapshot | None = None
) -> Snapshot:
    """One round of `query_count()` queries covering every job Prometheus knows.

    `PARALLEL_QUERIES` are in flight at once: Prometheus evaluates them side by side, so a round
    takes about as long as its slowest query instead of their sum, for the same operator CPU.
    Each answer is decoded in the thread that fetched it, so that its body (up to 70 MB at
    10,000 jobs of 4 workers) is freed as soon as it is read rather than held with all the others.

    The range queries are evaluated on the multiples of the step (`answers.Grid.ending`), so the
    newest point is up to one step older than `now`; the instant queries are at `now`.

    Incremental reads (`gpuwise.prometheus.incremental`). Given the `previous` round's snapshot (same
    window and step), each range query asks only from `OVERLAP_STEPS` before that round's last
    point on; its answer replaces the previous points from there, and the previous points before
    it, still in the new window, are kept (`Splice`). The re-read covers the points that a scrape
    ingested just after the previous round could have changed: a scrape's samples are stored at
    most its timeout, at most one scrape interval, after their time, and the step is the scrape
    interval, so only the previous last point could have; the step before it is a margin for a
    scrape that late again, or a clock a step apart from Prometheus'. At 10,000 jobs a series is
    then 4 points instead of 61. The snapshot holds what a full read would, value for value and in
    the same order, unless Prometheus' data changed further back than the overlap: a sample stored
    that late (a remote-write backlog, a backfill) is seen by full reads only, that is after the
    operator restarts, or after a pause longer than the window. A series absent from the new
    answer keeps its previous points older than the re-read; one new in it has its new points only
    (a full read would show any older ones too). A full read is done when there is no previous
    round, it had another window or step, its last point is after this one's (the clock went
    back), or the re-read would start at or before the window. The clock reasons answer only for
    jobs whose GPUs slowed down lately (`clock_reasons_query`): one that was not answered before
    has had its series all along, so when there is one, that query reads the whole window again,
    a request more in that round. A job that leaves the answer keeps its previous points, all
    zeros then, as any series that is gone does. (Prometheus' own `avg` of a join adds its inputs
    in no fixed order, so two full reads may differ in the last bit of a job's mean utilization: a
    joined read matches one of them.)

    `previous` is taken over: its series are moved into the new snapshot as they are joined, and
    its facts dropped, so that two rounds' series (some 60 MB at 10,000 jobs) are never in memory
    together. It must not be used afterwards; a read that fails leaves none to join to.
    """
    grid = answers.Grid.ending(now, window_seconds, step_seconds)
    splice = Splice.after(previous, grid, window_seconds)
    labels = previous.label_sets if previous is not None else LabelSets()
    if previous is not None:  # taken over: its records are of no use, its series are taken as they are joined
        take_over(previous.by_job).clear()
    reader = Reader(grid, splice, labels)
    read = reader.read

    def ranged(query: str) -> Iterator[answers.Piece]:
        return source.range_texts(query, read.start, read.end, read.step)

    def job_series(name: str, query: str) -> dict[JobKey, Points]:
        return reader.per_job(ranged(query), splice.previous.series.get(name, {}) if splice is not None else {})

    def step_times() -> tuple[dict[JobKey, dict[int, Points]], dict[JobKey, tuple[float, float]]]:
        old = splice.previous.worker_steps if splice is not None else {}
        steps = reader.per_worker(ranged(worker_step_query(step_seconds)), old)
        return steps, step_extremes_by_job(steps)

    def clock_slowdowns() -> dict[JobKey, dict[int, Points]]:
        query = clock_reasons_query(window_seconds)

        def whole_window() -> dict[JobKey, dict[int, Points]]:
            answer = source.range_texts(query, grid.start, grid.end, grid.step)
            return Reader(grid, None, labels).per_worker(answer, {}, clocks=True)

        if splice is None:
            return whole_window()
        # A job new in the filtered answer may have had its GPUs' masks all along: read its window.
        old = splice.previous.clock_slowdowns
        answered = {key for key, workers in old.items() if any(splice.reached(points) for points in workers.values())}
        joined = reader.per_worker(ranged(query), old, clocks=True)
        return joined if answered.issuperset(joined) else whole_window()

    def fact(name: str, query: str) -> dict[JobKey, Any]:
        return _facts(name, source.vector(query, now), labels)

    window = f"{int(window_seconds)}s"
    try:
        with read_heap.read(), ThreadPoolExecutor(PARALLEL_QUERIES, thread_name_prefix="prometheus") as pool:
            # The two largest answers first: the others are decoded while Prometheus evaluates them.
            steps, clocks = pool.submit(step_times), pool.submit(clock_slowdowns)
            ranges = {name: pool.submit(job_series, name, query) for name, query in range_queries().items()}
            instants = {name: pool.submit(fact, name, query) for name, query in instant_queries(window).items()}
            try:
                series = {name: future.result() for name, future in ranges.items()}
                facts = {name: future.result() for name, future in instants.items()}
                (worker_steps, extremes), slowdowns = steps.result(), clocks.result()
            except BaseException:
                # One query failed: the round has. The queries not yet sent are not sent, so a
                # Prometheus that hangs costs the round one client timeout, not one per query.
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            by_job = _by_job(
                now, facts, series=series, worker_steps=worker_steps, extremes=extremes, slowdowns=slowdowns
            )
    except answers.MalformedAnswer as exc:  # a label set that is not JSON
        raise PrometheusError(f"{source.url}: {exc}") from exc
    del facts  # each fact is in its job's record now: not 14 tables of them besides
    labels.prune(lambda: set(by_job))
    return Snapshot(
        now,
        window_seconds,
        step_seconds,
        series,
        worker_steps,
        slowdowns,
        by_job,
        grid=grid,
        label_sets=labels,
    )


def query_count() -> int:
    """Requests per evaluation cycle, whatever the number of jobs: one more in a cycle where a
    job's GPUs newly slowed down (see `fetch`)."""
    return len(range_queries()) + len(instant_queries("1m")) + 2  # + the per-worker step times and clocks
