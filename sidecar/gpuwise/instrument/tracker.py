"""The running totals of one training process, and the hot path that reports them.

One `Tracker` per process. Every step ends in `end_step` and every batch in `fetched`; those two
are what the 20 µs budget is about, so each does a clock read and a few counter updates, nothing
more. The totals are brought up to date (`_fold`) and sent at most every `send_interval`: since
datagrams carry running totals, steps closer together than that travel together (the sidecar
spreads their time over its histogram), and a loop of 300 µs steps costs one `struct.pack` and
one non-blocking `sendto` every 10 ms, here and in the sidecar that would wake for each.
Anything slower (CUDA memory statistics, a look for a checkpoint request) runs at most once a
second. There is no lock: a
training loop steps from one thread, and a lost update in a racy corner costs a count, never a
crash.

Step time is the wall time from one step's end to the next's, except after a pause (input
fetched for evaluation): the time from the last step before it to the first fetch after it
belongs to no step.

A dropped datagram is made good by the next one; only the last of a run has no successor, so
`flush` (registered at exit) sends the totals still owed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Final

from gpuwise.instrument import checkpoint, wire
from gpuwise.instrument.checkpoint import Checkpoints
from gpuwise.instrument.sender import Sender

# How often the (slower) memory probe may run, in seconds.
PROBE_INTERVAL: Final = 1.0
# The least time between two datagrams, in seconds: at most 100 a second per process.
SEND_INTERVAL: Final = 0.01
# At exit, how long to keep retrying the final totals if the sidecar's queue is full.
FLUSH_SECONDS: Final = 0.2

MemoryProbe = Callable[[], "tuple[int, int] | None"]
# Whether mixed precision is on right now (for any device type).
AutocastProbe = Callable[[], bool]


class Tracker:
    __slots__ = (
        "_autocast_seen",
        "_carried",
        "_clock",
        "_ended_at",
        "_explicit_samples",
        "_last_end",
        "_owed",
        "_paused",
        "_pending_samples",
        "_pending_wait",
        "_poll_at",
        "_previous_end",
        "_probe_at",
        "_rank",
        "_samples_known",
        "_send_interval",
        "_sender",
        "_sent_at",
        "_since",
        "_started",
        "_unsent",
        "_wall_clock",
        "autocast_known",
        "autocast_probe",
        "batch_size",
        "checkpoints",
        "cuda_allocated_peak",
        "cuda_reserved_peak",
        "hooked",
        "last_step_seconds",
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

    def __init__(
        self,
        sender: Sender,
        rank: int = 0,
        clock: Callable[[], float] = time.perf_counter,
        send_interval: float = SEND_INTERVAL,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._sender = sender
        self._rank = rank
        self._clock = clock
        self._wall_clock = wall_clock
        self._ended_at = wall_clock()  # the unix time the latest folded step ended
        self._send_interval = send_interval
        self.pid = os.getpid()
        # Unfolded step time runs from `_since` to `_last_end`, plus `_carried` from before a pause.
        # `_since` is None until the first step starts (the first fetch, or `begin`).
        self._since: float | None = None
        self._carried = 0.0
        self._last_end = self._previous_end = float("-inf")
        self._paused = False
        self._unsent = 0  # steps not yet folded into the totals
        self._pending_wait = 0.0
        self._pending_samples = 0
        self._explicit_samples: int | None = None
        self._samples_known = False
        self._autocast_seen = False
        self._sent_at = self._probe_at = self._poll_at = float("-inf")
        self._owed = False  # folded totals that did not leave
        self._started = clock()
        # An explicit step_end() was seen: the optimizer hook stops marking steps.
        self.manual = False
        # Framework hooks (torch_hooks) feed this tracker.
        self.hooked = False
        self.steps = 0
        self.samples = 0
        self.step_seconds = 0.0
        self.wait_seconds = 0.0
        self.last_step_seconds = 0.0
        self.num_workers = wire.UNKNOWN
        self.batch_size = wire.UNKNOWN
        self.pin_memory: bool | None = None
        self.autocast_known = False
        # Read at a step's end until autocast is seen in the current report: a loop run entirely
        # under one autocast context enters it once, before the first step, and never again.
        self.autocast_probe: AutocastProbe | None = None
        self.cuda_allocated_peak = wire.UNKNOWN
        self.cuda_reserved_peak = wire.UNKNOWN
        self.memory_probe: MemoryProbe | None = None
        # gpuwise's checkpoint requests, where the pod projects them (see `checkpoint`).
        self.checkpoints: Checkpoints | None = None

    # --- the hot path ----------------------------------------------------------------------------

    def fetched(self, start: float, end: float, samples: int | None) -> None:
        """Input was waited for from `start` to `end` (clock readings) and carried `samples`.

        A fetch is where a step starts when none is under way (the first, or after a pause).
        """
        if self._since is None or self._paused:
            self._restart(start)
        self._pending_wait += end - start
        if samples is not None:
            self._pending_samples += samples
            self._samples_known = True

    def end_step(self, samples: int | None = None) -> None:
        """Close the current step; report the totals if the last report is old enough."""
        now = self._clock()
        if self._since is None:  # a step nobody saw start: it started with the tracker
            self._since = self._started
        self._unsent += 1
        self._previous_end = self._last_end
        self._last_end = now
        if samples is not None:
            self._explicit_samples = (self._explicit_samples or 0) + samples
        if not self._autocast_seen and self.autocast_probe is not None:
            try:
                self._autocast_seen = self.autocast_probe()
            except Exception:
                self.autocast_probe = None
        if now - self._sent_at >= self._send_interval:
            self._report(now)

    # --- everything else ---------------------------------------------------------------------------

    def begin(self) -> None:
        """Mark that a step is under way: the first step, or the first after a pause, starts now."""
        if self._since is None or self._paused:
            self._restart(self._clock())

    def pause(self) -> None:
        """Input is fetched for something other than training (evaluation, say): not a step's."""
        self._paused = True

    def saw_autocast(self) -> None:
        self._autocast_seen = True

    def set_loader(self, num_workers: int, pin_memory: bool, batch_size: int | None) -> None:
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.batch_size = wire.UNKNOWN if batch_size is None else batch_size

    def flush(self) -> None:
        """Send the totals still owed, retrying briefly if the sidecar is busy. For the end of a run."""
        if self._unsent:
            self._fold()
            self._owed = True
        deadline = self._clock() + FLUSH_SECONDS
        while self._owed and self._clock() < deadline:
            self._owed = not self._sender.send(self._encode())
            if self._owed:
                time.sleep(0.002)
        while self.checkpoints is not None and not self.checkpoints.resend() and self._clock() < deadline:
            time.sleep(0.002)

    def forked(self) -> None:
        """In a forked child (a DataLoader worker): a new pid, and nothing owed."""
        self.pid = os.getpid()
        self._owed = False
        self._unsent = 0

    def _restart(self, at: float) -> None:
        """Steps start again at `at`; keep what the unfolded steps before it took."""
        if self._since is not None and self._last_end > self._since:
            self._carried += self._last_end - self._since
        self._since = at
        self._paused = False

    def _fold(self) -> None:
        """Bring the totals up to date with the steps taken since the last fold."""
        assert self._since is not None
        end = self._last_end
        seconds = self._carried + max(end - self._since, 0.0)
        wait = min(self._pending_wait, seconds)
        self.steps += self._unsent
        # The loop's clock is monotonic; the sidecar's is the wall clock: when the step ended, in its terms.
        self._ended_at = self._wall_clock() - (self._clock() - end)
        self.step_seconds += seconds
        self.wait_seconds += wait
        self.last_step_seconds = end - max(self._previous_end, self._since)
        if self._explicit_samples is not None:
            self.samples += self._explicit_samples
            self._samples_known = True
        else:
            self.samples += self._pending_samples
        self._since, self._carried, self._unsent = end, 0.0, 0
        self._pending_wait, self._pending_samples, self._explicit_samples = 0.0, 0, None

    def _report(self, now: float) -> None:
        self._fold()
        self._sent_at = now
        if self.memory_probe is not None and now - self._probe_at >= PROBE_INTERVAL:
            self._probe_at = now
            self._probe_memory()
        self._owed = not self._sender.send(self._encode())
        self._autocast_seen = False
        # After the step's datagram: a checkpoint the callback saves here delays nothing reported.
        if self.checkpoints is not None and now - self._poll_at >= checkpoint.POLL_INTERVAL:
            self._poll_at = now
            self.checkpoints.poll()

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
            self.last_step_seconds,
            self.num_workers,
            self.batch_size,
            self.cuda_allocated_peak,
            self.cuda_reserved_peak,
            self._sender.dropped & 0xFFFFFFFF,
            self._ended_at,
        )

    def _probe_memory(self) -> None:
        try:
            peaks = self.memory_probe() if self.memory_probe is not None else None
        except Exception:
            peaks = None
        if peaks is not None:
            self.cuda_allocated_peak, self.cuda_reserved_peak = peaks
