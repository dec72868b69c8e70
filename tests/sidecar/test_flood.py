"""A running sidecar flooded through its real unix socket: drops are counted, memory stays put."""

from __future__ import annotations

import math
import os
import socket
import time
from pathlib import Path

from gpuwise.instrument import wire
from gpuwise.sidecar.checkpoints import MAX_REQUESTS
from gpuwise.sidecar.receiver import MAX_EVENTS_PER_SECOND
from gpuwise.sidecar.steps import MAX_PROCESSES
from tests.sidecar.support import Series, SidecarProcess, select, sidecar, value
from tests.support.waiting import eventually

RANKS = 3 * MAX_PROCESSES  # more senders than the sidecar keeps


def mix(start: int, count: int) -> list[bytes]:
    """`count` datagrams: step events from too many ranks, garbage of every shape, checkpoint acks."""
    datagrams = []
    for n in range(start, start + count):
        kind = n % 10
        if kind < 5:
            rank = n % RANKS
            event = wire.StepEvent(1000 + rank, rank, 0, n, 0, n * 0.01, 0.0, 0.01, 0, 0, -1, -1, 0, time.time())
            datagrams.append(wire.encode(event))
        elif kind == 5:
            datagrams.append(os.urandom(wire.SIZE))  # the right size, garbage inside
        elif kind == 6:
            datagrams.append(b"GW\x01")  # too short for either kind
        elif kind == 7:
            datagrams.append(b"GW\x01\x01" + bytes(4092))  # longer than any datagram: arrives truncated
        elif kind == 8:
            bad = wire.StepEvent(7, 0, 0, n, 0, math.nan, 0.0, 0.01, 0, 0, -1, -1, 0, time.time())
            datagrams.append(wire.encode(bad))
        else:
            datagrams.append(wire.encode_ack(wire.CheckpointAck(7, 0, 0, f"request-{n}", "/ckpt/x.pt")))
    return datagrams


def send(path: Path, datagrams: list[bytes]) -> None:
    """Blocking sends: when the sidecar's queue is full the sender waits, so every datagram arrives."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.settimeout(30.0)
        sender.connect(str(path))
        for data in datagrams:
            sender.send(data)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def received(side: SidecarProcess, count: int) -> list[Series]:
    def scrape() -> list[Series] | None:
        series = side.scrape()
        found = select(series, "gpuwise_step_events_received_total")
        return series if found and found[0].value >= count else None

    return eventually(scrape, timeout=60.0)


def test_a_flood_through_the_socket_is_dropped_counted_and_bounded(short_tmp: Path) -> None:
    warm_up, flood = 20_000, 60_000  # datagrams; the flood alone is 12 seconds' worth of the bucket
    with sidecar(short_tmp, "--backend", "simulated", "--log-level", "WARNING") as side:
        started = time.monotonic()
        send(side.socket, mix(0, warm_up))
        received(side, warm_up)
        before = rss_kib(side.process.pid)
        send(side.socket, mix(warm_up, flood))
        series = received(side, warm_up + flood)
        elapsed = time.monotonic() - started
        side.scrape()
        after = rss_kib(side.process.pid)
        assert side.process.poll() is None, "the sidecar survived"
    total = warm_up + flood
    assert value(series, "gpuwise_step_events_received_total") == total, "every datagram was read"
    dropped = {s.labels["reason"]: s.value for s in select(series, "gpuwise_step_events_dropped_total")}
    assert set(dropped) == {"flood", "malformed", "too_many_sources"}, dropped
    # The token bucket parses at most its rate per second, plus one second's burst.
    parsed = total - dropped["flood"]
    assert parsed <= MAX_EVENTS_PER_SECOND * (elapsed + 1), (parsed, elapsed)
    assert 0.3 < dropped["malformed"] / parsed < 0.5, "4 in 10 datagrams are garbage"
    assert 0.2 < dropped["too_many_sources"] / parsed < 0.5, "a third are step events of ranks beyond the book"
    assert len(select(series, "gpuwise_steps_total")) == MAX_PROCESSES, "no more ranks than the book keeps"
    assert len(select(series, "gpuwise_checkpoint_ack_timestamp_seconds")) == MAX_REQUESTS
    # Everything the flood could leave behind is bounded; a leak of 30 bytes a datagram would show.
    assert after - before < 2 * 1024, f"RSS grew from {before} KiB to {after} KiB"
