"""The step book: what the sidecar knows about each training process, from its step events.

Events carry running totals (see `gpuwise.instrument.wire`); the book turns consecutive totals
into increments, so a lost datagram costs the histogram some resolution and nothing else, and a
process that restarts (a new pid on the same rank) simply starts adding from zero again. Memory is
bounded: at most `MAX_PROCESSES` ranks, a fixed histogram and a one-second-bucket ring per rank.

A sidecar that restarts (killed, OOM, a new image) while its trainer runs on hears totals from a
process it never saw: the steps before were already exported by the sidecar that died (Prometheus
has them, and reads the new counter's start from zero as a reset). Adding them again would count
every one of them twice, so a process that must have been stepping before this book started (more
step time than the book has been up) is taken as a baseline: its next totals add from there. The
steps made while no sidecar listened are lost, never doubled.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Final

from gpuwise.instrument import wire
from gpuwise.instrument.wire import StepEvent
from gpuwise.metrics import RATIO_WINDOW_SECONDS, catalog

MAX_PROCESSES: Final = 64
# Processes remembered per rank. Several can share one (multiprocessing, or mp.spawn without
# torchrun, where every LOCAL_RANK is 0): each pid's totals are its own, and a datagram adds what
# changed since that pid's previous one. A pid forgotten and heard again counts as a new process.
PIDS_PER_RANK: Final = 32
BOUNDS: Final = catalog.STEP_DURATION.buckets


@dataclass(frozen=True, slots=True)
class StepDelta:
    """What one event added: steps, seconds, data wait and samples since the previous one."""

    rank: int
    steps: int
    seconds: float
    wait_seconds: float
    samples: int | None
    last_step_seconds: float
    ended_at: float  # unix time its last step ended, as the trainer said (arrival, from a version 1 sender)


@dataclass(slots=True)
class ProcessSteps:
    """Everything exposed about one rank; a copy is handed out, never the live record."""

    rank: int
    pid: int = 0
    steps: int = 0
    samples: int | None = None
    step_seconds: float = 0.0
    wait_seconds: float = 0.0
    bucket_counts: list[int] = field(default_factory=lambda: [0] * (len(BOUNDS) + 1))
    dropped: int = 0
    last_step_at: float = 0.0
    num_workers: int | None = None
    batch_size: int | None = None
    pin_memory: bool | None = None
    autocast: bool | None = None
    cuda_allocated_peak: int | None = None
    cuda_reserved_peak: int | None = None
    # (whole second, step seconds, wait seconds) buckets for the recent data-wait ratio.
    recent: deque[list[float]] = field(default_factory=lambda: deque(maxlen=int(RATIO_WINDOW_SECONDS) + 1))
    last: StepEvent | None = None
    # Each pid's latest event, the least recently heard first (see PIDS_PER_RANK).
    latest: dict[int, StepEvent] = field(default_factory=dict)

    def wait_ratio(self, now: float) -> float | None:
        since = now - RATIO_WINDOW_SECONDS
        step = wait = 0.0
        for second, step_s, wait_s in self.recent:
            if second >= since:
                step += step_s
                wait += wait_s
        return min(wait / step, 1.0) if step > 0 else None

    def copy(self) -> ProcessSteps:
        return replace(
            self,
            bucket_counts=list(self.bucket_counts),
            recent=deque(self.recent, self.recent.maxlen),
            last=None,
            latest={},
        )


class StepBook:
    def __init__(self, started_at: float | None = None) -> None:
        """`started_at`: unix time the sidecar started listening; None: every unseen pid is new."""
        self._lock = threading.Lock()
        self._processes: dict[int, ProcessSteps] = {}
        self._started_at = started_at

    def record(self, event: StepEvent, now: float) -> StepDelta | None:
        """Add an event received at unix time `now`; its steps are timed when they ended, if it says.

        Return what it added (None when it added nothing); raise OverflowError when the rank is
        new and the book already holds `MAX_PROCESSES`.
        """
        with self._lock:
            process = self._processes.get(event.rank)
            if process is None:
                if len(self._processes) >= MAX_PROCESSES:
                    raise OverflowError(f"more than {MAX_PROCESSES} training processes")
                process = self._processes[event.rank] = ProcessSteps(event.rank)
            if self._resumed(process, event, now):
                process.latest[event.pid] = event  # a baseline: what it did before was exported already
                process.pid, process.last = event.pid, event
                _configure(process, event)
                return None
            return _apply(process, event, now)

    def _resumed(self, process: ProcessSteps, event: StepEvent, now: float) -> bool:
        """Whether `event` is the first this book hears from a process that stepped before it started.

        A process started after the book cannot have more step time than the book has been up; one
        that has was heard (and its steps exported) by a sidecar before this one.
        """
        return (
            self._started_at is not None
            and event.pid not in process.latest
            and event.step_seconds > now - self._started_at
        )

    def processes(self) -> list[ProcessSteps]:
        with self._lock:
            return [process.copy() for _, process in sorted(self._processes.items())]


def _apply(process: ProcessSteps, event: StepEvent, now: float) -> StepDelta | None:
    previous = process.latest.pop(event.pid, None)
    if previous is not None and event.steps < previous.steps:
        previous = None  # the counts went backwards: a new process that reused the pid
    process.latest[event.pid] = event  # heard last: evicted last
    if len(process.latest) > PIDS_PER_RANK:
        del process.latest[next(iter(process.latest))]
    process.pid, process.last = event.pid, event
    _configure(process, event)
    steps = event.steps - (previous.steps if previous else 0)
    dropped = event.dropped - (previous.dropped if previous else 0)
    process.dropped += max(dropped, 0)
    if steps <= 0:
        return None
    seconds = max(event.step_seconds - (previous.step_seconds if previous else 0.0), 0.0)
    wait = min(max(event.wait_seconds - (previous.wait_seconds if previous else 0.0), 0.0), seconds)
    samples = None
    if event.flags & wire.SAMPLES_KNOWN:
        samples = max(event.samples - (previous.samples if previous else 0), 0)
        process.samples = (process.samples or 0) + samples
    process.steps += steps
    process.step_seconds += seconds
    process.wait_seconds += wait
    # When the step ended, never later than its datagram arrived (a clock the sidecar does not share).
    ended = min(event.ended_at, now) if math.isfinite(event.ended_at) else now
    process.last_step_at = ended
    # The last step is known exactly; steps whose datagrams were lost share the rest evenly.
    process.bucket_counts[bisect.bisect_left(BOUNDS, event.last_step_seconds)] += 1
    if steps > 1:
        average = max(seconds - event.last_step_seconds, 0.0) / (steps - 1)
        process.bucket_counts[bisect.bisect_left(BOUNDS, average)] += steps - 1
    second = float(int(ended))
    if process.recent and process.recent[-1][0] == second:
        process.recent[-1][1] += seconds
        process.recent[-1][2] += wait
    else:
        process.recent.append([second, seconds, wait])
    return StepDelta(event.rank, steps, seconds, wait, samples, event.last_step_seconds, ended)


def _configure(process: ProcessSteps, event: StepEvent) -> None:
    flags = event.flags
    process.num_workers = event.num_workers if event.num_workers >= 0 else None
    process.batch_size = event.batch_size if event.batch_size >= 0 else None
    process.pin_memory = bool(flags & wire.PIN_MEMORY_ON) if flags & wire.PIN_MEMORY_KNOWN else None
    process.autocast = bool(flags & wire.AUTOCAST_ON) if flags & wire.AUTOCAST_KNOWN else None
    process.cuda_allocated_peak = event.cuda_allocated_peak if event.cuda_allocated_peak >= 0 else None
    process.cuda_reserved_peak = event.cuda_reserved_peak if event.cuda_reserved_peak >= 0 else None
