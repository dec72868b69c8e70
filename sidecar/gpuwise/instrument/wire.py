"""The step-event datagram: what a training process tells the sidecar, in 80 bytes.

Why running totals and not one event per step: the socket is a unix *datagram* socket whose
queue is short (`net.unix.max_dgram_qlen`, often 10) and the sender must never block, so a burst
of fast steps can lose datagrams. Each datagram therefore carries the process's cumulative
counts and sums; the sidecar adds the difference from the previous datagram it saw, and a lost
datagram costs resolution (the histogram), never a step from the counters.

Why a fixed binary layout and not JSON: packing a precompiled `struct` costs well under a
microsecond; encoding JSON costs several, and the whole per-step budget is 20 µs.
Unknown integers are -1 (never a fake 0); a version byte lets the layout evolve.
"""

from __future__ import annotations

import functools
import math
import struct
from typing import Final, NamedTuple

MAGIC: Final = b"GW"
VERSION: Final = 1
KIND_STEP: Final = 1
UNKNOWN: Final = -1

# Flag bits.
AUTOCAST_KNOWN: Final = 1 << 0
AUTOCAST_ON: Final = 1 << 1
PIN_MEMORY_KNOWN: Final = 1 << 2
PIN_MEMORY_ON: Final = 1 << 3
SAMPLES_KNOWN: Final = 1 << 4

# magic, version, kind, pid, local rank, flags, steps, samples, step s, wait s, last step s,
# num_workers, batch_size, cuda allocated peak, cuda reserved peak, dropped datagrams.
LAYOUT: Final = struct.Struct("<2sBBIHHQQdddiiqqI")
SIZE: Final = LAYOUT.size
# pack(pid, rank, flags, steps, ...) -> bytes: the header is bound once, the hot path packs the rest.
pack: Final = functools.partial(LAYOUT.pack, MAGIC, VERSION, KIND_STEP)


class StepEvent(NamedTuple):
    """The state of one training process after its latest step (all counts are running totals)."""

    pid: int
    rank: int
    flags: int
    steps: int
    samples: int
    step_seconds: float
    wait_seconds: float
    last_step_seconds: float
    num_workers: int
    batch_size: int
    cuda_allocated_peak: int
    cuda_reserved_peak: int
    dropped: int


class MalformedEvent(ValueError):
    """A datagram that is not a step event this sidecar understands."""


def encode(event: StepEvent) -> bytes:
    return pack(*event)


def decode(data: bytes) -> StepEvent:
    """Parse and sanity-check one datagram; raise MalformedEvent rather than trust it."""
    if len(data) != SIZE:
        raise MalformedEvent(f"{len(data)} bytes, expected {SIZE}")
    magic, version, kind, *fields = LAYOUT.unpack(data)
    if magic != MAGIC or version != VERSION or kind != KIND_STEP:
        raise MalformedEvent(f"unknown header {magic!r} v{version} kind {kind}")
    event = StepEvent(*fields)
    durations = (event.step_seconds, event.wait_seconds, event.last_step_seconds)
    if not all(math.isfinite(value) and value >= 0.0 for value in durations):
        raise MalformedEvent("durations must be finite and non-negative")
    if event.wait_seconds > event.step_seconds * 1.001 + 1.0:
        raise MalformedEvent("data wait exceeds step time")
    return event
