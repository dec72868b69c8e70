"""The datagrams a training process sends the sidecar: step events (88 bytes) and checkpoint acks.

Why running totals and not one event per step: the socket is a unix *datagram* socket whose
queue is short (`net.unix.max_dgram_qlen`, often 10) and the sender must never block, so a burst
of fast steps can lose datagrams. Each datagram therefore carries the process's cumulative
counts and sums; the sidecar adds the difference from the previous datagram it saw, and a lost
datagram costs resolution (the histogram), never a step from the counters.

Why a fixed binary layout and not JSON: packing a precompiled `struct` costs well under a
microsecond; encoding JSON costs several, and the whole per-step budget is 20 µs.
Unknown integers are -1 (never a fake 0); a version byte lets the layout evolve, and a kind
byte tells the two datagrams apart. Version 2 adds the unix time the latest step ended: a
datagram can leave long after its step (the totals owed at exit wait for DataLoader workers to
shut down), and the sidecar must not stamp a step with the time its datagram arrived. Version 1
datagrams (80 bytes, no end time) are still read; their steps are timed on arrival.

A checkpoint acknowledgement is rare (once per request of the operator) and says which request
it answers, so it carries text: a fixed header, then the request id and the checkpoint's path.
The path is for people reading the sidecar's log, never a label; only its last `MAX_PATH_BYTES`
travel, which keep the file name.
"""

from __future__ import annotations

import functools
import math
import os
import string
import struct
from typing import Final, NamedTuple

MAGIC: Final = b"GW"
VERSION: Final = 2
KIND_STEP: Final = 1
KIND_CHECKPOINT_ACK: Final = 2
UNKNOWN: Final = -1
# The longest running total of seconds an event may carry (31 years): finite, and far enough from
# the largest double that the sidecar's sums of them can never become infinite.
MAX_SECONDS: Final = 1e9

# Flag bits.
AUTOCAST_KNOWN: Final = 1 << 0
AUTOCAST_ON: Final = 1 << 1
PIN_MEMORY_KNOWN: Final = 1 << 2
PIN_MEMORY_ON: Final = 1 << 3
SAMPLES_KNOWN: Final = 1 << 4

# magic, version, kind, pid, local rank, flags, steps, samples, step s, wait s, last step s,
# num_workers, batch_size, cuda allocated peak, cuda reserved peak, dropped datagrams, and (from
# version 2) the unix time the latest step ended.
LAYOUT: Final = struct.Struct("<2sBBIHHQQdddiiqqId")
SIZE: Final = LAYOUT.size
LAYOUT_V1: Final = struct.Struct("<2sBBIHHQQdddiiqqI")
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
    ended_at: float = math.nan  # unix time the latest step ended; NaN: a version 1 sender did not say


# magic, version, kind, pid, local rank, global rank (RANK, -1 unknown), request id bytes, path bytes.
ACK_HEADER: Final = struct.Struct("<2sBBIHiBH")
# A Kubernetes DNS subdomain's length: request ids are the operator's action record ids.
MAX_REQUEST_ID_BYTES: Final = 253
MAX_PATH_BYTES: Final = 1024
# The longest datagram of either kind: what the sidecar must be ready to receive.
MAX_SIZE: Final = max(SIZE, ACK_HEADER.size + MAX_REQUEST_ID_BYTES + MAX_PATH_BYTES)
_REQUEST_ID_CHARACTERS: Final = frozenset(string.ascii_letters + string.digits + ".-_")


class CheckpointAck(NamedTuple):
    """A training process saved its checkpoint in answer to request `request_id`."""

    pid: int
    local_rank: int
    rank: int
    request_id: str
    path: str


class MalformedEvent(ValueError):
    """A datagram that is not a step event (or a checkpoint ack) this sidecar understands."""


def is_request_id(value: str) -> bool:
    """Whether `value` can be a checkpoint request id: 1-253 letters, digits, `.`, `-` or `_`.

    Ids travel into label values and PromQL string literals; anything else is refused on both sides.
    """
    return 0 < len(value) <= MAX_REQUEST_ID_BYTES and _REQUEST_ID_CHARACTERS.issuperset(value)


def encode_ack(ack: CheckpointAck) -> bytes:
    """The datagram for `ack`; raise ValueError for a request id `is_request_id` refuses."""
    if not is_request_id(ack.request_id):
        raise ValueError(f"not a checkpoint request id: {ack.request_id!r}")
    request_id = ack.request_id.encode("ascii")
    path = os.fsencode(ack.path)[-MAX_PATH_BYTES:]
    header = ACK_HEADER.pack(
        MAGIC, VERSION, KIND_CHECKPOINT_ACK, ack.pid, ack.local_rank, ack.rank, len(request_id), len(path)
    )
    return header + request_id + path


def encode(event: StepEvent) -> bytes:
    return pack(*event)


def decode(data: bytes) -> StepEvent:
    """Parse and sanity-check one datagram; raise MalformedEvent rather than trust it."""
    layout, expected = (LAYOUT, VERSION) if len(data) == SIZE else (LAYOUT_V1, 1)
    if len(data) != layout.size:
        raise MalformedEvent(f"{len(data)} bytes, expected {SIZE}")
    magic, version, kind, *fields = layout.unpack(data)
    if magic != MAGIC or version != expected or kind != KIND_STEP:
        raise MalformedEvent(f"unknown header {magic!r} v{version} kind {kind}")
    event = StepEvent(*fields)
    if expected == VERSION and not (math.isfinite(event.ended_at) and event.ended_at > 0):
        raise MalformedEvent("the step's end must be a unix time")
    durations = (event.step_seconds, event.wait_seconds, event.last_step_seconds)
    if not all(0.0 <= value <= MAX_SECONDS for value in durations):  # NaN fails every comparison
        raise MalformedEvent(f"durations must be numbers from 0 to {MAX_SECONDS:g} s")
    if event.wait_seconds > event.step_seconds * 1.001 + 1.0:
        raise MalformedEvent("data wait exceeds step time")
    return event


def decode_ack(data: bytes) -> CheckpointAck:
    """Parse and sanity-check a checkpoint ack; raise MalformedEvent rather than trust it."""
    if len(data) < ACK_HEADER.size:
        raise MalformedEvent(f"{len(data)} bytes, shorter than an ack's header")
    magic, version, kind, pid, local_rank, rank, id_length, path_length = ACK_HEADER.unpack_from(data)
    if magic != MAGIC or version not in (1, VERSION) or kind != KIND_CHECKPOINT_ACK:
        raise MalformedEvent(f"unknown header {magic!r} v{version} kind {kind}")
    if len(data) != ACK_HEADER.size + id_length + path_length or path_length > MAX_PATH_BYTES:
        raise MalformedEvent(f"{len(data)} bytes do not match the lengths the header gives")
    body = data[ACK_HEADER.size :]
    request_id = body[:id_length].decode("ascii", errors="replace")
    if not is_request_id(request_id):
        raise MalformedEvent(f"not a checkpoint request id: {request_id!r}")
    return CheckpointAck(pid, local_rank, rank, request_id, body[id_length:].decode(errors="replace"))


def parse(data: bytes) -> StepEvent | CheckpointAck:
    """Either kind of datagram, told apart by its kind byte."""
    if len(data) > 3 and data[3] == KIND_CHECKPOINT_ACK:
        return decode_ack(data)
    return decode(data)
