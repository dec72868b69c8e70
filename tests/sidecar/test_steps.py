"""The step receiver and book: running totals to increments, bounded, every drop counted."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from gpuwise.instrument import wire
from gpuwise.sidecar import receiver as receiving
from gpuwise.sidecar.receiver import Receiver, SocketPathError
from gpuwise.sidecar.steps import MAX_PROCESSES, StepBook
from tests.support.waiting import eventually

NOW = 1_700_000_000.0


def totals(
    steps: int,
    *,
    pid: int = 10,
    rank: int = 0,
    seconds: float | None = None,
    wait: float | None = None,
    last: float = 0.1,
    dropped: int = 0,
) -> bytes:
    seconds = steps * 0.1 if seconds is None else seconds
    wait = steps * 0.04 if wait is None else wait
    flags = wire.SAMPLES_KNOWN | wire.PIN_MEMORY_KNOWN | wire.AUTOCAST_KNOWN | wire.AUTOCAST_ON
    return wire.encode(
        wire.StepEvent(
            pid, rank, flags, steps, steps * 32, seconds, wait, last, 4, 32, 1 << 30, 2 << 30, dropped, time.time()
        )
    )


@pytest.fixture
def receiver(short_tmp: Path):
    r = Receiver(short_tmp / "steps.sock", StepBook())
    yield r
    r.stop()


def test_increments_from_running_totals(receiver: Receiver) -> None:
    receiver.handle(totals(1), NOW)
    receiver.handle(totals(2), NOW + 0.1)
    receiver.handle(totals(5, last=0.25), NOW + 0.5)  # two datagrams were lost on the way
    (process,) = receiver.book.processes()
    assert process.steps == 5 and process.samples == 160
    assert process.step_seconds == pytest.approx(0.5)
    assert process.wait_seconds == pytest.approx(0.2)
    assert sum(process.bucket_counts) == 5, "the lost steps are in the histogram too"
    assert (process.num_workers, process.batch_size, process.pin_memory, process.autocast) == (4, 32, False, True)
    assert process.cuda_reserved_peak == 2 << 30
    assert process.wait_ratio(NOW + 1) == pytest.approx(0.4)
    assert process.wait_ratio(NOW + 100) is None, "no step in the window: no ratio"


def test_a_restarted_process_adds_from_zero(receiver: Receiver) -> None:
    receiver.handle(totals(100, pid=10, dropped=3), NOW)
    receiver.handle(totals(7, pid=11), NOW + 1)
    receiver.handle(totals(9, pid=11, dropped=1), NOW + 2)
    (process,) = receiver.book.processes()
    assert process.steps == 109
    assert process.dropped == 4


def test_duplicates_and_reordering_add_nothing(receiver: Receiver) -> None:
    receiver.handle(totals(3), NOW)
    receiver.handle(totals(3), NOW)
    assert receiver.book.processes()[0].steps == 3


def test_ranks_are_separate(receiver: Receiver) -> None:
    for rank in range(3):
        receiver.handle(totals(rank + 1, pid=100 + rank, rank=rank), NOW)
    assert [(p.rank, p.steps) for p in receiver.book.processes()] == [(0, 1), (1, 2), (2, 3)]


def test_malformed_datagrams_are_dropped_and_counted(receiver: Receiver) -> None:
    for garbage in (b"", b"hello", totals(1)[:-1], b"GW" + bytes(200)):
        receiver.handle(garbage, NOW)
    receiver.handle(totals(1), NOW)
    assert receiver.dropped == {"malformed": 4}
    assert receiver.received == 5
    assert receiver.book.processes()[0].steps == 1


def test_a_flood_is_capped(short_tmp: Path) -> None:
    r = Receiver(short_tmp / "flood.sock", StepBook(), rate=100)
    try:
        for n in range(1, 1001):
            r.handle(totals(n), NOW)
        assert r.dropped["flood"] >= 800
        assert r.book.processes()[0].steps < 1000, "only what the bucket allowed was parsed"
        r.handle(totals(1001), NOW)
    finally:
        r.stop()


def test_the_number_of_processes_is_bounded(receiver: Receiver) -> None:
    for rank in range(MAX_PROCESSES + 5):
        receiver.handle(totals(1, rank=rank), NOW)
    assert len(receiver.book.processes()) == MAX_PROCESSES
    assert receiver.dropped["too_many_sources"] == 5


def test_datagrams_arrive_over_the_socket(receiver: Receiver) -> None:
    receiver.start()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.sendto(totals(4), str(receiver.path))
        sender.sendto(b"\x00" * 4096, str(receiver.path))  # oversized: truncated, malformed
    eventually(lambda: receiver.received == 2)
    assert receiver.book.processes()[0].steps == 4
    assert receiver.dropped == {"malformed": 1}


def test_a_stale_socket_is_replaced_and_the_socket_is_writable_by_all(short_tmp: Path) -> None:
    path = short_tmp / "stale.sock"
    first = receiving.bind(path)
    first.close()  # a crashed sidecar leaves its socket file behind
    second = receiving.bind(path)
    try:
        assert path.stat().st_mode & 0o777 == 0o666
    finally:
        second.close()


def test_a_socket_path_that_cannot_work_is_a_clear_error(short_tmp: Path) -> None:
    regular = short_tmp / "file"
    regular.write_text("not a socket")
    with pytest.raises(SocketPathError, match="exists and is not a socket"):
        receiving.bind(regular)
    with pytest.raises(SocketPathError, match="longer than 107 bytes"):
        receiving.bind(short_tmp / ("x" * 120))
    assert regular.read_text() == "not a socket", "never deleted"


def test_a_step_is_timed_when_it_ended_not_when_its_datagram_arrived() -> None:
    """The totals owed at exit arrive after the DataLoader's workers shut down: 50 s late, say."""
    book = StepBook()
    fields = (1, 0, 0, 10, 320, 1.0, 0.1, 0.1, 4, 32, -1, -1, 0)
    delta = book.record(wire.StepEvent(*fields, 1_795_000_000.0), now=1_795_000_050.0)
    assert delta is not None and delta.ended_at == 1_795_000_000.0
    assert book.processes()[0].last_step_at == 1_795_000_000.0
    # A version 1 sender says nothing: arrival it is. A clock ahead of the sidecar's is not believed.
    old = book.record(wire.StepEvent(1, 0, 0, 11, 352, 1.1, 0.1, 0.1, 4, 32, -1, -1, 0), now=1_795_000_060.0)
    assert old is not None and old.ended_at == 1_795_000_060.0
    ahead = book.record(
        wire.StepEvent(1, 0, 0, 12, 384, 1.2, 0.1, 0.1, 4, 32, -1, -1, 0, 1_795_009_999.0), 1_795_000_070.0
    )
    assert ahead is not None and ahead.ended_at == 1_795_000_070.0


def test_processes_sharing_a_rank_count_each_step_once(receiver: Receiver) -> None:
    """mp.spawn without torchrun: two processes both report LOCAL_RANK 0. 600 real steps are 600."""
    for step in range(1, 301):
        receiver.handle(totals(step, pid=20), NOW + step * 0.01)
        receiver.handle(totals(step, pid=21), NOW + step * 0.01)
    (process,) = receiver.book.processes()
    assert process.steps == 600
    assert process.step_seconds == pytest.approx(60.0)


def test_a_forgotten_pid_is_bounded_and_a_restart_still_counts(receiver: Receiver) -> None:
    for pid in range(100, 100 + 40):  # more processes on one rank than are remembered
        receiver.handle(totals(1, pid=pid), NOW)
    (process,) = receiver.book.processes()
    assert process.steps == 40
    receiver.handle(totals(2, pid=139), NOW + 1)  # still remembered: one step more
    assert receiver.book.processes()[0].steps == 41


def test_a_restarted_sidecar_counts_no_step_of_a_running_process_twice() -> None:
    """The old sidecar exported the first 1,000 steps; the new one, up 5 s, adds only what follows."""
    book = StepBook(started_at=NOW)
    assert book.record(wire.decode(totals(1_000, seconds=100.0)), NOW + 5) is None, "a baseline, not 1,000 steps"
    added = book.record(wire.decode(totals(1_003, seconds=100.3)), NOW + 5.3)
    assert added is not None and added.steps == 3
    assert book.processes()[0].steps == 3


def test_a_process_started_after_the_sidecar_counts_from_zero() -> None:
    book = StepBook(started_at=NOW)
    added = book.record(wire.decode(totals(40, seconds=4.0)), NOW + 5)
    assert added is not None and added.steps == 40, "4 s of steps in a sidecar up 5 s: all of them new"
