"""The running totals of one training process, and the hot path that reports them.

One `Tracker` per process. Every step ends in `end_step`, which is what the 20 µs budget is
about: a clock read, some additions, one `struct.pack` and one non-blocking `sendto`. Anything
slower (CUDA memory statistics) runs at most once a second. There is no lock: a training loop
steps from one thread, and a lost update in a racy corner costs a count, never a crash.

Since datagrams carry running totals, a dropped one is made good by the next; only the last of a
run has no successor, so `flush` (registered at exit) sends it again if it did not leave.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Final

from gpuwise.instrument import wire
from gpuwise.instrument.sender import Sender

# How often the (slower) memory probe may run, in seconds.
PROBE_INTERVAL: Final = 1.0
# At exit, how long to keep retrying the final totals if the sidecar's queue is full.
FLUSH_SECONDS: Final = 0.2

MemoryProbe = Callable[[], "tuple[int, int] | None"]


class Tracker:
    __slots__ = (
        "_autocast_seen",
        "_boundary",
        "_clock",
        "_last_duration",
        "_owed",
        "_paused",
        "_pending_samples",
        "_pending_wait",
        "_probe_at",
        "_rank",
        "_samples_known",
        "_sender",
        "_started",
        "autocast_known",
        "batch_size",
        "cuda_allocated_peak",
        "cuda_reserved_peak",
        "hooked",
        "manual",
        "memory_probe",
        "num_workers",
        "pid",
        "pin_memory",
        "samples",
        "step_seconds",
        "steps",
        "wait_seconds",
    )

    def __init__(self, sender: Sender, rank: int = 0, clock: Callable[[], float] = time.perf_counter) -> None:
        self._sender = sender
        self._rank = rank
        self._clock = clock
        self._started = clock()
        self.pid = os.getpid()
        # perf_counter() of the previous step's end, or of the first step's start once known.
        self._boundary: float | None = None
        # Input is being fetched outside training (evaluation): the next step starts afresh.
        self._paused = False
        self._pending_wait = 0.0
        self._pending_samples = 0
        self._samples_known = False
        self._autocast_seen = False
        self._probe_at = float("-inf")
        self._last_duration = 0.0
        self._owed = False  # the latest totals did not leave
        # An explicit step_end() was seen: the optimizer hook stops marking steps.
        self.manual = False
        # Framework hooks (torch_hooks) feed this tracker.
        self.hooked = False
        self.steps = 0
        self.samples = 0
        self.step_seconds = 0.0
        self.wait_seconds = 0.0
        self.num_workers = wire.UNKNOWN
        self.batch_size = wire.UNKNOWN
        self.pin_memory: bool | None = None
        self.autocast_known = False
        self.cuda_allocated_peak = wire.UNKNOWN
        self.cuda_reserved_peak = wire.UNKNOWN
        self.memory_probe: MemoryProbe | None = None

    def begin(self, at: float | None = None) -> None:
        """Mark that a step is under way: the first step, or the first after a pause, starts now."""
        if self._boundary is None or self._paused:
            self._boundary = self._clock() if at is None else at
            self._paused = False

    def pause(self) -> None:
        """Input is fetched for something other than training (evaluation, say): not a step's.

        The time until training resumes belongs to no step: the next `begin` restarts the clock.
        """
        self._paused = True

    def add_wait(self, seconds: float, samples: int | None) -> None:
        """Account time spent waiting for input, and the samples that input carried."""
        self._pending_wait += seconds
        if samples is not None:
            self._pending_samples += samples
            self._samples_known = True

    def saw_autocast(self) -> None:
        self._autocast_seen = True

    def set_loader(self, num_workers: int, pin_memory: bool, batch_size: int | None) -> None:
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.batch_size = wire.UNKNOWN if batch_size is None else batch_size

    def end_step(self, samples: int | None = None) -> None:
        """Close the current step and report the totals. Never raises."""
        now = self._clock()
        boundary = self._boundary
        duration = now - (self._started if boundary is None else boundary)
        self._boundary = now
        wait = min(self._pending_wait, duration)
        self._pending_wait = 0.0
        if samples is None:
            samples = self._pending_samples
        else:
            self._samples_known = True
        self._pending_samples = 0
        self.steps += 1
        self.samples += samples
        self.step_seconds += duration
        self.wait_seconds += wait
        if self.memory_probe is not None and now - self._probe_at >= PROBE_INTERVAL:
            self._probe_at = now
            self._probe_memory()
        self._last_duration = duration
        self._owed = not self._sender.send(self._encode())
        self._autocast_seen = False

    def flush(self) -> None:
        """Resend the latest totals if they did not leave; briefly retry. For the end of a run."""
        deadline = self._clock() + FLUSH_SECONDS
        while self._owed and self._clock() < deadline:
            self._owed = not self._sender.send(self._encode())
            if self._owed:
                time.sleep(0.002)

    def _encode(self) -> bytes:
        flags = 0
        if self.autocast_known:
            flags |= wire.AUTOCAST_KNOWN | (wire.AUTOCAST_ON if self._autocast_seen else 0)
        if self.pin_memory is not None:
            flags |= wire.PIN_MEMORY_KNOWN | (wire.PIN_MEMORY_ON if self.pin_memory else 0)
        if self._samples_known:
            flags |= wire.SAMPLES_KNOWN
        return wire.pack(
            self.pid,
            self._rank,
            flags,
            self.steps,
            self.samples,
            self.step_seconds,
            self.wait_seconds,
            self._last_duration,
            self.num_workers,
            self.batch_size,
            self.cuda_allocated_peak,
            self.cuda_reserved_peak,
            self._sender.dropped & 0xFFFFFFFF,
        )

    def _probe_memory(self) -> None:
        try:
            peaks = self.memory_probe() if self.memory_probe is not None else None
        except Exception:
            peaks = None
        if peaks is not None:
            self.cuda_allocated_peak, self.cuda_reserved_peak = peaks

    def forked(self) -> None:
        """In a forked child (a DataLoader worker): a new pid, and nothing owed."""
        self.pid = os.getpid()
        self._owed = False
