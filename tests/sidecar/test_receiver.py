"""The receiver around the step book: acks, the per-step callback, the socket's edges and its thread.
Each case here was a mutant of `receiver.py` the other tests let live (`make mutation`)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from gpuwise.instrument import wire
from gpuwise.sidecar import receiver as receiving
from gpuwise.sidecar.receiver import Receiver, SocketPathError
from gpuwise.sidecar.steps import StepBook, StepDelta
from tests.support.waiting import eventually

NOW = 1_700_000_000.0


def step(steps: int) -> bytes:
    event = wire.StepEvent(10, 0, 0, steps, 0, steps * 0.1, 0.0, 0.1, 2, 32, -1, -1, 0, NOW)
    return wire.encode(event)


def test_an_ack_goes_to_the_checkpoint_book(short_tmp: Path) -> None:
    receiver = Receiver(short_tmp / "s.sock", StepBook())
    try:
        receiver.handle(wire.encode_ack(wire.CheckpointAck(7, 0, 0, "resize-1", "/ckpt/9.pt")), NOW)
        assert receiver.acks.latest() == [("resize-1", NOW, "/ckpt/9.pt")]
        assert receiver.book.processes() == []
    finally:
        receiver.stop()


def test_each_step_that_added_something_is_handed_on(short_tmp: Path) -> None:
    seen: list[StepDelta] = []
    receiver = Receiver(short_tmp / "s.sock", StepBook(), on_step=seen.append)
    try:
        receiver.handle(step(2), NOW)
        receiver.handle(step(2), NOW + 1)  # nothing new: nothing handed on
        assert [(d.rank, d.steps, d.ended_at) for d in seen] == [(0, 2, NOW)]
    finally:
        receiver.stop()


def test_a_flood_drop_counts_one_per_datagram(short_tmp: Path) -> None:
    receiver = Receiver(short_tmp / "s.sock", StepBook(), rate=1)
    try:
        receiver.handle(step(1), NOW)
        receiver.handle(step(2), NOW)
        receiver.handle(step(3), NOW)
        assert receiver.dropped == {"flood": 2} and receiver.received == 3
    finally:
        receiver.stop()


def test_the_bucket_holds_its_rate_and_refills_at_it(short_tmp: Path) -> None:
    receiver = Receiver(short_tmp / "s.sock", StepBook(), rate=2)
    try:
        for n in (1, 2, 3):
            receiver.handle(step(n), NOW)
        assert receiver.dropped == {"flood": 1}, "two tokens: two datagrams"
        time.sleep(0.6)  # 1.2 tokens back
        receiver.handle(step(4), NOW)
        assert receiver.dropped == {"flood": 1} and receiver.book.processes()[0].steps == 4
    finally:
        receiver.stop()


def test_stop_gives_up_on_a_stuck_thread_after_two_seconds(short_tmp: Path) -> None:
    release = threading.Event()

    def stuck(_: StepDelta) -> None:
        release.wait(10)

    receiver = Receiver(short_tmp / "s.sock", StepBook(), on_step=stuck)
    receiver.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.sendto(step(1), str(receiver.path))
        eventually(lambda: receiver.received == 1)  # the thread is now stuck in the callback
        started = time.monotonic()
        receiver.stop()
        assert 1.9 <= time.monotonic() - started < 2.8
    finally:
        release.set()


def test_the_longest_socket_path_binds_in_a_directory_made_for_it(short_tmp: Path) -> None:
    parent = short_tmp / "a" / "b"
    name = "x" * (receiving.MAX_PATH_BYTES - len(os.fsencode(parent)) - 1)
    path = parent / name
    assert len(os.fsencode(path)) == receiving.MAX_PATH_BYTES
    sock = receiving.bind(path)
    try:
        assert path.is_socket()
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= 1 << 20
    finally:
        sock.close()


def test_a_socket_that_cannot_be_bound_says_why(short_tmp: Path) -> None:
    blocked = short_tmp / "ro"
    blocked.mkdir()
    (blocked / "sub").write_text("a file where a directory should be")
    with pytest.raises(SocketPathError, match=r"^cannot bind --socket .*/ro/sub/s\.sock: File exists$"):
        receiving.bind(blocked / "sub" / "s.sock")


def test_a_maximal_datagram_arrives_whole(short_tmp: Path) -> None:
    receiver = Receiver(short_tmp / "s.sock", StepBook())
    receiver.start()
    try:
        ack = wire.CheckpointAck(7, 0, 0, "r" * wire.MAX_REQUEST_ID_BYTES, "/" + "p" * (wire.MAX_PATH_BYTES - 1))
        data = wire.encode_ack(ack)
        assert len(data) == wire.MAX_SIZE
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.sendto(data, str(receiver.path))
        eventually(lambda: receiver.received == 1)
        assert receiver.dropped == {} and receiver.acks.latest()[0][0] == ack.request_id
    finally:
        receiver.stop()


def test_the_thread_is_a_named_daemon_that_waits_out_quiet_spells_and_stops_promptly(short_tmp: Path) -> None:
    receiver = Receiver(short_tmp / "s.sock", StepBook())
    receiver.start()
    (thread,) = [t for t in threading.enumerate() if t.name == "gpuwise-steps"]
    assert thread.daemon, "a stuck receiver must not keep the sidecar from exiting"
    time.sleep(0.6)  # longer than the socket's timeout: the thread reads on
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.sendto(step(1), str(receiver.path))
    eventually(lambda: receiver.received == 1)
    started = time.monotonic()
    receiver.stop()
    assert time.monotonic() - started < 1.0
    assert not thread.is_alive()


def test_a_failing_socket_is_logged_and_retried_twice_a_second(
    short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    receiver = Receiver(short_tmp / "s.sock", StepBook())
    caplog.set_level(logging.WARNING, logger="gpuwise.sidecar.receiver")
    receiver.start()
    (thread,) = [t for t in threading.enumerate() if t.name == "gpuwise-steps"]
    receiver._socket.close()  # the socket fails under the thread: it says so and keeps going
    time.sleep(1.3)
    try:
        failures = [r.getMessage() for r in caplog.records if r.name == "gpuwise.sidecar.receiver"]
        assert 2 <= len(failures) <= 4, failures
        assert failures[0] == "receiving step events failed: [Errno 9] Bad file descriptor"
        assert thread.is_alive()
    finally:
        receiver.stop()
    assert not thread.is_alive()
