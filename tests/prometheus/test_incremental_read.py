"""`fetch(previous=)` against a real Prometheus: an incremental read holds what a full read does.

Two servers over backfilled history: `before` holds what Prometheus had at one round, `after`
what it has at the next, where some samples changed within the re-read overlap, one changed
further back, a job is new, one is gone, a worker stopped reporting and a job's GPU slowed down
(only such jobs' clock reasons are read: `clock_reasons_query`). Every job has two
GPUs of whole-number utilization: Prometheus' `avg` of a join adds its inputs in no fixed order,
and only so are its results the same double whatever the order (see `history`).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from gpuwise.diagnose.window import REPORTED_FIELDS, Reported
from gpuwise.metrics import Metric, catalog
from gpuwise.prometheus import batched as source
from gpuwise.prometheus.client import Prometheus
from gpuwise.prometheus.incremental import OVERLAP_STEPS
from gpuwise.prometheus.labels import JobKey
from gpuwise.prometheus.snapshot import NOT_REPORTED, JobFacts, Snapshot
from tests.support.prometheus import AVAILABLE, running

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(not AVAILABLE or shutil.which("promtool") is None, reason="needs prometheus (make system-deps)"),
]
STEP = 15
WINDOW = 300
END = int(time.time()) // STEP * STEP - 600  # the history's last sample; rounds are read around it
REREAD = END - OVERLAP_STEPS * STEP  # where a round after one at END starts reading again
NS = "ml"
# Jobs, by what happens to them between the two servers' histories.
STEADY, LATE, BACKFILLED, NEW, GONE, SHRUNK, STARTED, STOPPED, HEATED, COOLED = (
    "steady",  # its GPUs at their software power cap throughout: busy, not slowed down
    "late",  # utilization samples changed from one step before the first round's last point
    "backfilled",  # one utilization sample changed further back
    "new",  # only in `after`, with all its history
    "gone",  # only in `before`
    "shrunk",  # worker 1's step times and clock reasons only in `before`; worker 0 slowed down throughout
    "started",  # series from END - 150 on
    "stopped",  # series up to END - 60
    "heated",  # worker 0's GPU slowed down at END, in `after` only: new in the clock reasons' answer
    "cooled",  # worker 0's GPU slowed down once, long enough before END that only `before`'s round reads it
)
JOBS = (STEADY, LATE, BACKFILLED, NEW, GONE, SHRUNK, STARTED, STOPPED, HEATED, COOLED)
# The one slowdown of `cooled`: the oldest sample the clock reasons' filter sees at END, not at END + 30.
COOLED_AT = END - WINDOW - source.CLOCK_FILTER_MARGIN_SECONDS + STEP
CLOCKED = (SHRUNK, COOLED)  # the jobs whose clock reasons `before` answers with


def history(*, after: bool) -> str:
    """OpenMetrics text of every job's series for 20 minutes up to END, as `before` or `after` holds them."""
    lines: dict[Metric, list[str]] = {}

    def series(metric: Metric, labels: str, samples: Mapping[int, str], suffix: str = "") -> None:
        lines.setdefault(metric, []).extend(f"{metric.name}{suffix}{{{labels}}} {v} {t}" for t, v in samples.items())

    for i, job in enumerate(JOBS):
        if job == (GONE if after else NEW):
            continue
        first = END - 150 if job == STARTED else END - 1200
        last = END - 60 if job == STOPPED else END
        times = range(first, last + 1, STEP)
        for worker in (0, 1):
            pod = f'namespace="{NS}",pod="{job}-{worker}"'
            process = f'{pod},trainingjob="{job}",worker="{worker}"'
            late_change = job == LATE and after
            utilization = {
                t: str(30 + (3 * i + 5 * worker + k) % 40 + (10 if late_change and t >= END - STEP else 0))
                for k, t in enumerate(times)
            }
            if job == BACKFILLED and after:
                utilization[END - 120] = "99"
            series(catalog.GPU_UTIL, f'{pod},gpu="0",UUID="GPU-{i}-{worker}"', utilization)
            # The same on both GPUs of a job: what its avg of a join reads is then one double.
            series(catalog.SM_ACTIVE, f'{pod},gpu="0"', {t: str(((i + k) % 8) / 8) for k, t in enumerate(times)})
            series(catalog.SIDECAR_INFO, process, dict.fromkeys(times, "1"))
            series(
                catalog.DATA_WAIT_RATIO, process, {t: str(((i + worker + k) % 10) / 20) for k, t in enumerate(times)}
            )
            series(catalog.LAST_STEP, process, {t: str(t) for t in times})
            series(catalog.BATCH_SIZE, process, dict.fromkeys(times, "32"))
            if job == SHRUNK and worker == 1 and after:
                continue
            throttled = {
                SHRUNK: lambda k, t: k % 3 == 0,
                HEATED: lambda k, t: after and t == END,
                COOLED: lambda k, t: t == COOLED_AT,
            }.get(job, lambda k, t: False)
            unthrottled = "4" if job == STEADY else "0"
            series(
                catalog.CLOCKS_EVENT_REASONS,
                pod,
                {t: "96" if worker == 0 and throttled(k, t) else unthrottled for k, t in enumerate(times)},
            )
            seconds = [0.5 * (1 + 0.1 * worker + 0.02 * (k % 5)) for k in range(len(times))]
            counts = [sum(STEP / s for s in seconds[: k + 1]) for k in range(len(times))]
            series(
                catalog.STEP_DURATION,
                f'{process},le="+Inf"',
                {t: f"{c:.0f}" for t, c in zip(times, counts, strict=True)},
                "_bucket",
            )
            series(
                catalog.STEP_DURATION, process, {t: f"{c:.0f}" for t, c in zip(times, counts, strict=True)}, "_count"
            )
            series(catalog.STEP_DURATION, process, {t: str(STEP * (k + 1)) for k, t in enumerate(times)}, "_sum")
    text = []
    for metric, family in lines.items():
        kind = "histogram" if metric is catalog.STEP_DURATION else "gauge"
        text += [f"# HELP {metric.name} {metric.help}", f"# TYPE {metric.name} {kind}", *family]
    return "\n".join([*text, "# EOF", ""])


def serve(tmp: Path, text: str) -> Iterator[str]:
    (tmp / "data").mkdir()
    (tmp / "history.txt").write_text(text)
    promtool = shutil.which("promtool") or "promtool"
    create = [promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp / "history.txt"), str(tmp / "data")]
    subprocess.run(create, check=True, capture_output=True)
    with running(tmp, {"global": {"scrape_interval": f"{STEP}s"}}) as server:
        yield server.url


@pytest.fixture(scope="module")
def before(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve(tmp_path_factory.mktemp("before"), history(after=False))


@pytest.fixture(scope="module")
def after(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve(tmp_path_factory.mktemp("after"), history(after=True))


class Recording(Prometheus):
    """A client that records the start of each range query it makes."""

    starts: list[float]

    def __init__(self, url: str) -> None:
        super().__init__(url)
        object.__setattr__(self, "starts", [])

    def _chunks(self, path: str, params: Mapping[str, str]) -> Iterator[bytes]:
        if path.endswith("query_range"):
            self.starts.append(float(params["start"]))
        return super()._chunks(path, params)


def fetch(url: str, now: float, previous: Snapshot | None = None) -> Snapshot:
    return source.fetch(Prometheus(url), now=now, window_seconds=WINDOW, step_seconds=STEP, previous=previous)


def flat(snapshot: Snapshot) -> dict[tuple[Any, ...], list[tuple[float, float]]]:
    """Every series' points by (quantity, job[, worker]), in the snapshot's order."""
    points: dict[tuple[Any, ...], list[tuple[float, float]]] = {}
    for name, by_job in snapshot.series.items():
        points.update(((name, key), list(series)) for key, series in by_job.items())
    for name, per_worker in (("steps", snapshot.worker_steps), ("clocks", snapshot.clock_slowdowns)):
        for key, workers in per_worker.items():
            points.update(((name, key, worker), list(series)) for worker, series in workers.items())
    return points


# A record's fields that hold the snapshot's series (`records_hold_the_series`); the others are facts.
SERIES_FIELDS = (*source.range_queries(), "worker_step_seconds", "worker_step_extremes", "clock_slowdowns")


def facts(snapshot: Snapshot) -> dict[JobKey, tuple[Any, ...]]:
    """The instant queries' answers in each job's record (the fields holding no series), where it has any."""

    def answers(read: Reported) -> tuple[Any, ...]:
        return tuple(getattr(read, name) for name in REPORTED_FIELDS if name not in SERIES_FIELDS)

    nothing = answers(NOT_REPORTED)
    return {key: answers(read) for key, read in snapshot.by_job.items() if answers(read) != nothing}


def records_hold_the_series(snapshot: Snapshot) -> bool:
    """Whether each job's record holds the snapshot's very series of the job, and every job has one."""
    ranges = [snapshot.series[name] for name in source.range_queries()]
    tables = [*ranges, snapshot.worker_steps, snapshot.clock_slowdowns]
    if not all(key in snapshot.by_job for table in tables for key in table):
        return False
    for key, record in snapshot.by_job.items():
        for name in source.range_queries():
            points, held = snapshot.series[name].get(key), getattr(record, name)
            if (held is not points.values) if points is not None else held != ():
                return False
        steps, clocks = snapshot.worker_steps.get(key), snapshot.clock_slowdowns.get(key) or {}
        if (record.worker_step_seconds is not steps) if steps else record.worker_step_seconds != {}:
            return False
        if list(record.clock_slowdowns) != list(clocks) or any(
            record.clock_slowdowns[worker] is not points.values for worker, points in clocks.items()
        ):
            return False
    return True


def extremes(snapshot: Snapshot) -> dict[JobKey, tuple[float, float]]:
    """Each job's smallest and largest step time, where its record has them."""
    return {key: read.worker_step_extremes for key, read in snapshot.by_job.items() if read.worker_step_extremes}


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN (a rate over no steps is NaN)."""
    return repr(a) == repr(b)


def order(snapshot: Snapshot) -> list[Any]:
    return [list(by_job) for by_job in snapshot.series.values()] + [
        [(key, list(workers)) for key, workers in per_worker.items()]
        for per_worker in (snapshot.worker_steps, snapshot.clock_slowdowns)
    ]


def test_rounds_joined_to_the_previous_hold_what_a_full_read_does(before: str) -> None:
    client = Recording(before)
    rounds = [END - 90 + 7.5, END - 60 + 1, END - 30 + 14.9, END]  # every 30 s, at any time within a step
    snapshot = None
    for now in rounds:
        client.starts.clear()
        snapshot = source.fetch(client, now=now, window_seconds=WINDOW, step_seconds=STEP, previous=snapshot)
    assert snapshot is not None
    # The last round asked for the last steps only, on the grid of the multiples of the step.
    assert len(client.starts) == 5 and set(client.starts) == {END - 30 - OVERLAP_STEPS * STEP}
    assert snapshot.grid is not None and (snapshot.grid.start, snapshot.grid.end) == (END - WINDOW, END)
    full = fetch(before, END)
    assert same(flat(snapshot), flat(full)) and order(snapshot) == order(full)
    assert facts(snapshot) == facts(full) and records_hold_the_series(snapshot) and records_hold_the_series(full)
    # Each job's smallest and largest step time, taken as read, are its workers' own.
    assert extremes(snapshot) == extremes(full)
    assert set(extremes(full)) == set(full.worker_steps)
    for key, (low, high) in extremes(full).items():
        steps = [value for points in full.worker_steps[key].values() for _, value in points]
        assert (low, high) == (min(steps), max(steps)), key
    # Every job but `new`: 3 series and each worker's step times; the clock reasons of two jobs' workers.
    assert len(flat(full)) == (3 + 2) * (len(JOBS) - 1) + 2 * len(CLOCKED)
    assert list(full.clock_slowdowns) == sorted((NS, job) for job in CLOCKED)
    # Series that started or stopped within the window, joined as they are.
    assert flat(snapshot)["gpu_utilization", (NS, STARTED)][0][0] == END - 150
    assert flat(snapshot)["steps", (NS, STOPPED), 0][-1][0] < END
    # What the rules get is the values, as before.
    window = snapshot.window((NS, STEADY), JobFacts(age_seconds=3600))
    assert list(window.gpu_utilization) == [v for _, v in full.series["gpu_utilization"][NS, STEADY]]
    assert window.clock_slowdowns == {}, "no slowdown bit, nor any higher one: not read"
    window = snapshot.window((NS, SHRUNK), JobFacts(age_seconds=3600))
    assert set(window.clock_slowdowns) == {0, 1} and not any(window.clock_slowdowns[1])


def test_a_round_after_the_data_changed(before: str, after: str) -> None:
    previous = fetch(before, END)
    was = flat(previous)  # `fetch` takes the previous round's series over
    client = Recording(after)
    joined = source.fetch(client, now=END + 30, window_seconds=WINDOW, step_seconds=STEP, previous=previous)
    full = fetch(after, END + 30)
    # `heated` is new in the clock reasons' answer: that query read the whole window again.
    assert sorted(client.starts) == [END + 30 - WINDOW] + [END - OVERLAP_STEPS * STEP] * 5
    now, whole = flat(joined), flat(full)
    start = END + 30 - WINDOW

    def kept(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
        return [(t, v) for t, v in points if start <= t < REREAD]

    for name, *rest in set(now) | set(whole):
        key, series = rest[0], (name, *rest)
        job = key[1]
        if job == GONE or (job == SHRUNK and rest[1:] == [1] and name in ("steps", "clocks")):
            # Gone from the answer: its points from before the re-read start, as the previous round had them.
            assert series not in whole and same(now[series], kept(was[series])) and now[series], series
        elif job == COOLED and name == "clocks":
            # Its slowdown is before what the filter sees now: out of the answer, and its points all zeros.
            assert series not in whole and same(now[series], kept(was[series])) and now[series], series
            assert not any(value for _, value in now[series])
        elif job == NEW:
            # New in the answer: its points from the re-read start on (a full read also has its older ones).
            assert same(now[series], [(t, v) for t, v in whole[series] if t >= REREAD]), series
        elif job == BACKFILLED and name == "gpu_utilization":
            # A sample changed before the re-read start: seen by full reads only.
            changed = [t for (t, v), (_, w) in zip(now[series], whole[series], strict=True) if v != w]
            assert changed == [END - 120] and dict(now[series])[END - 120] == dict(was[series])[END - 120]
        else:
            assert same(now[series], whole[series]), series
    # The overlap re-read a sample stored a step late: what the previous round had there was replaced.
    late = ("gpu_utilization", (NS, LATE))
    assert dict(now[late])[END - STEP] == dict(whole[late])[END - STEP] != dict(was[late])[END - STEP]
    # In Prometheus' order, with what was kept where a full read would have it.
    assert list(joined.series["gpu_utilization"]) == sorted([*full.series["gpu_utilization"], (NS, GONE)])
    assert list(joined.worker_steps[NS, SHRUNK]) == [0, 1] and list(full.worker_steps[NS, SHRUNK]) == [0]
    assert facts(joined) == facts(full) and records_hold_the_series(joined)


def test_a_full_read_when_the_previous_round_cannot_be_joined(before: str) -> None:
    def starts(now: float, previous: Snapshot, window: float = WINDOW) -> set[float]:
        client = Recording(before)
        source.fetch(client, now=now, window_seconds=window, step_seconds=STEP, previous=previous)
        return set(client.starts)

    assert starts(END, fetch(before, END - 30)) == {END - 30 - OVERLAP_STEPS * STEP}
    assert starts(END, fetch(before, END - WINDOW)) == {END - WINDOW}, "as old as the window"
    at_the_start = fetch(before, END - WINDOW + OVERLAP_STEPS * STEP)
    assert starts(END, at_the_start) == {END - WINDOW}, "the re-read would start at the window's"
    assert starts(END - 60, fetch(before, END)) == {END - 60 - WINDOW}, "the clock went back"
    assert starts(END, fetch(before, END - 30), window=240) == {END - 240}, "another window"
    other_step = source.fetch(Prometheus(before), now=END - 30, window_seconds=WINDOW, step_seconds=30)
    assert starts(END, other_step) == {END - WINDOW}, "another step"
    # A gap longer than the window: what a full read holds.
    previous = fetch(before, END - 2 * WINDOW)
    assert same(flat(fetch(before, END, previous)), flat(fetch(before, END)))


def test_label_sets_are_decoded_once_and_each_job_is_one_tuple(before: str) -> None:
    first = fetch(before, END)
    table, decoded = first.label_sets, len(first.label_sets)
    assert decoded == 3 * (len(JOBS) - 1), "a job's own label set (with no GPU model here), and one per worker"
    keys = {key: key for key in first.jobs()}
    again = fetch(before, END + 30, first)
    assert again.label_sets is table and len(table) == decoded, "nothing new to decode"
    by_job = (*again.series.values(), again.by_job, again.worker_steps, again.clock_slowdowns)
    assert all(key is keys[key] for mapping in by_job for key in mapping), "one tuple per job, round after round"
