"""The checkpoint handshake on the training side: the request file, the callback, the acknowledgement."""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuwise.instrument import wire
from gpuwise.instrument.checkpoint import Checkpoints
from gpuwise.instrument.sender import Sender
from gpuwise.instrument.tracker import Tracker
from tests.conftest import Inbox
from tests.sidecar.support import ROOT, environment


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def request(file: Path, request_id: str) -> None:
    """Change the request as the kubelet does: a new file swapped in, never one written in place."""
    staged = file.with_name(".staged")
    staged.write_text(request_id)
    os.replace(staged, file)


def acks(inbox: Inbox) -> list[wire.CheckpointAck]:
    """The acknowledgements waiting in the inbox (step events are not expected here)."""
    found = []
    inbox.socket.setblocking(False)
    try:
        while True:
            found.append(wire.decode_ack(inbox.socket.recv(wire.MAX_SIZE)))
    except BlockingIOError:
        return found
    finally:
        inbox.socket.settimeout(2.0)


class Recorder:
    """A callback that records its calls, and fails when told to."""

    def __init__(self, path: str | None = "/ckpt/step-100.pt", fail: bool = False) -> None:
        self.calls: list[str] = []
        self.path = path
        self.fail = fail

    def __call__(self, request_id: str) -> str | None:
        self.calls.append(request_id)
        if self.fail:
            raise OSError("disk full")
        return self.path


@pytest.fixture
def warnings() -> list[str]:
    return []


@pytest.fixture
def requests(inbox: Inbox, warnings: list[str]) -> Checkpoints:
    file = inbox.path.with_name("checkpoint-request")
    file.write_text("")  # the kubelet projects an absent annotation as an empty file
    return Checkpoints(str(file), Sender(str(inbox.path)).send, warnings.append, local_rank=0, rank=0)


def request_file(requests: Checkpoints) -> Path:
    return Path(requests._file)


# --- the wire ---------------------------------------------------------------------------------------


def test_an_ack_round_trips_and_is_told_from_a_step_event() -> None:
    ack = wire.CheckpointAck(4242, 1, 9, "adjustconfig-7f3a", "/ckpt/step-00000400.pt")
    data = wire.encode_ack(ack)
    assert wire.parse(data) == ack
    step = wire.StepEvent(1, 0, 0, 1, 32, 0.5, 0.2, 0.5, 2, 32, -1, -1, 0, 1_795_000_000.0)
    assert wire.parse(wire.encode(step)) == step
    assert len(data) <= wire.MAX_SIZE


def test_only_the_tail_of_a_long_path_travels() -> None:
    path = "/" + "d" * 2000 + "/step-00000400.pt"
    decoded = wire.decode_ack(wire.encode_ack(wire.CheckpointAck(1, 0, 0, "r", path)))
    assert len(decoded.path) == wire.MAX_PATH_BYTES and decoded.path.endswith("/step-00000400.pt")


@pytest.mark.parametrize("request_id", ["", "a b", "x" * 254, "ünïcode", 'quote"', "new\nline"])
def test_request_ids_are_label_safe(request_id: str) -> None:
    assert not wire.is_request_id(request_id)
    with pytest.raises(ValueError, match="not a checkpoint request id"):
        wire.encode_ack(wire.CheckpointAck(1, 0, 0, request_id, ""))


def _ack_bytes(request_id: bytes, path: bytes, id_length: int | None = None, path_length: int | None = None) -> bytes:
    header = wire.ACK_HEADER.pack(
        wire.MAGIC,
        wire.VERSION,
        wire.KIND_CHECKPOINT_ACK,
        1,
        0,
        0,
        len(request_id) if id_length is None else id_length,
        len(path) if path_length is None else path_length,
    )
    return header + request_id + path


@pytest.mark.parametrize(
    "data",
    [
        _ack_bytes(b"r-1", b"/p")[:10],  # shorter than the header
        _ack_bytes(b"r-1", b"/p", id_length=2),  # lengths do not add up
        _ack_bytes(b"r-1", b"/p") + b"!",
        _ack_bytes(b"r 1", b""),  # not a request id
        _ack_bytes(b"", b"/p"),
        _ack_bytes(b"r-1", b"p" * (wire.MAX_PATH_BYTES + 1)),
        b"XX" + _ack_bytes(b"r-1", b"")[2:],
    ],
)
def test_malformed_acks_are_rejected(data: bytes) -> None:
    with pytest.raises(wire.MalformedEvent):
        wire.parse(data)


# --- the request, the callback and the acknowledgement ------------------------------------------------


def test_no_request_file_means_no_request(inbox: Inbox, warnings: list[str]) -> None:
    requests = Checkpoints(str(inbox.path.with_name("absent")), Sender(str(inbox.path)).send, warnings.append)
    requests.callback = callback = Recorder()
    requests.poll()
    assert requests.saved("/ckpt/a.pt") is False
    assert (callback.calls, acks(inbox), warnings) == ([], [], [])


def test_an_empty_file_is_no_request(requests: Checkpoints, inbox: Inbox) -> None:
    requests.callback = callback = Recorder()
    requests.poll()
    assert requests.pending is None and requests.saved() is False
    assert (callback.calls, acks(inbox)) == ([], [])


def test_the_callback_answers_a_request_once(requests: Checkpoints, inbox: Inbox) -> None:
    requests.callback = callback = Recorder()
    request(request_file(requests), "resize-1\n")
    requests.poll()
    assert callback.calls == ["resize-1"]
    assert acks(inbox) == [wire.CheckpointAck(os.getpid(), 0, 0, "resize-1", "/ckpt/step-100.pt")]
    # The annotation stays on the pod: the same request, even rewritten, is not answered again.
    requests.poll()
    request(request_file(requests), "resize-1")
    requests.poll()
    assert requests.saved("/ckpt/step-200.pt") is False
    assert (callback.calls, acks(inbox)) == (["resize-1"], [])
    # A new request is.
    request(request_file(requests), "resize-2")
    requests.poll()
    assert callback.calls == ["resize-1", "resize-2"]
    assert [ack.request_id for ack in acks(inbox)] == ["resize-2"]


def test_a_failing_callback_is_counted_not_acknowledged_and_not_retried(
    requests: Checkpoints, inbox: Inbox, warnings: list[str]
) -> None:
    requests.callback = callback = Recorder(fail=True)
    request(request_file(requests), "resize-1")
    requests.poll()  # never raises into the training loop
    requests.poll()
    assert callback.calls == ["resize-1"]
    assert requests.failures == 1
    assert acks(inbox) == []
    assert warnings == ["the checkpoint callback failed on request resize-1, not acknowledged: OSError('disk full')"]
    # The request is still pending: the program's own next checkpoint answers it.
    assert requests.saved("/ckpt/step-300.pt") is True
    assert [(ack.request_id, ack.path) for ack in acks(inbox)] == [("resize-1", "/ckpt/step-300.pt")]


def test_without_a_callback_the_next_save_answers(requests: Checkpoints, inbox: Inbox) -> None:
    requests.poll()
    assert requests.saved("/ckpt/early.pt") is False  # saved before any request: answers nothing
    request(request_file(requests), "move-3")
    # The save looks at the file itself: a request that came since the last step boundary counts.
    assert requests.saved() is True
    assert acks(inbox) == [wire.CheckpointAck(os.getpid(), 0, 0, "move-3", "")]
    assert requests.saved("/ckpt/again.pt") is False


def test_saves_inside_the_callback_do_not_answer_for_it(requests: Checkpoints, inbox: Inbox) -> None:
    inner: list[bool] = []

    def save_model_then_optimizer(request_id: str) -> str:
        inner.append(requests.saved("/ckpt/model.pt"))  # a torch.save inside the callback
        inner.append(requests.saved("/ckpt/optimizer.pt"))
        return "/ckpt"

    requests.callback = save_model_then_optimizer
    request(request_file(requests), "resize-1")
    requests.poll()
    assert inner == [False, False]
    assert [(ack.request_id, ack.path) for ack in acks(inbox)] == [("resize-1", "/ckpt")]


def test_a_withdrawn_request_is_not_answered(requests: Checkpoints, inbox: Inbox) -> None:
    request(request_file(requests), "resize-1")
    requests.poll()
    assert requests.pending == "resize-1"
    request(request_file(requests), "")
    assert requests.saved("/ckpt/a.pt") is False
    assert acks(inbox) == []


def test_a_file_that_is_no_request_id_is_reported_once(
    requests: Checkpoints, inbox: Inbox, warnings: list[str]
) -> None:
    requests.callback = callback = Recorder()
    request(request_file(requests), "rm -rf /")
    requests.poll()
    assert (requests.pending, callback.calls, acks(inbox)) == (None, [], [])
    assert warnings == [f"ignoring checkpoint request 'rm -rf /' in {request_file(requests)}: not a request id"]


def test_an_ack_that_cannot_leave_is_sent_at_the_next_poll(short_tmp: Path, warnings: list[str]) -> None:
    file = short_tmp / "checkpoint-request"
    file.write_text("resize-1")
    sender = Sender(str(short_tmp / "steps.sock"))
    requests = Checkpoints(str(file), sender.send, warnings.append)
    requests.callback = Recorder()
    requests.poll()  # the sidecar is not there yet
    assert sender.dropped == 1
    inbox = Inbox(short_tmp / "steps.sock")
    try:
        requests.poll()
        assert [ack.request_id for ack in acks(inbox)] == ["resize-1"]
        assert requests.resend() is True
    finally:
        inbox.socket.close()


def test_the_tracker_looks_at_most_once_a_second(requests: Checkpoints, inbox: Inbox) -> None:
    clock = Clock()
    looks: list[float] = []

    class Counted(Checkpoints):
        def _look(self) -> None:
            looks.append(clock.now)
            super()._look()

    counted = Counted(requests._file, Sender(str(inbox.path)).send, print)
    counted.callback = callback = Recorder()
    tracker = Tracker(Sender(str(inbox.path)), clock=clock, send_interval=0.0)
    tracker.checkpoints = counted
    tracker.end_step()  # the first step boundary looks
    request(request_file(requests), "resize-1")
    for _ in range(7):  # 0.875 s of 125 ms steps: no look, however many steps
        clock.now += 0.125
        tracker.end_step()
    assert (looks, callback.calls) == ([100.0], [])
    clock.now += 0.125
    tracker.end_step()
    assert looks == [100.0, 101.0]
    assert callback.calls == ["resize-1"]


# --- the public API in a training process -------------------------------------------------------------

API_SCRIPT = textwrap.dedent(
    """
    from gpuwise import instrument

    @instrument.on_checkpoint
    def save(request_id):
        print("saving for", request_id)
        return "/ckpt/step-1.pt"

    instrument.step_end()  # the first step boundary looks for a request
    print("again:", instrument.checkpoint_saved("/ckpt/step-2.pt"))
    """
)


def test_the_public_api_answers_through_the_step_socket(inbox: Inbox) -> None:
    file = inbox.path.with_name("checkpoint-request")
    file.write_text("resize-1")
    env = environment(
        GPUWISE_SOCKET=str(inbox.path), GPUWISE_INSTRUMENT="manual", GPUWISE_CHECKPOINT_REQUEST_FILE=str(file), RANK="3"
    )
    result = subprocess.run(
        [sys.executable, "-c", API_SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.stdout == "saving for resize-1\nagain: False\n", result.stderr
    datagrams = []
    inbox.socket.setblocking(False)
    try:
        while True:
            datagrams.append(wire.parse(inbox.socket.recv(wire.MAX_SIZE)))
    except BlockingIOError:
        pass
    answers = [d for d in datagrams if isinstance(d, wire.CheckpointAck)]
    assert [(a.request_id, a.rank, a.local_rank, a.path) for a in answers] == [("resize-1", 3, 0, "/ckpt/step-1.pt")]


def test_without_the_environment_the_api_is_a_no_op() -> None:
    from gpuwise import instrument

    assert instrument.on_checkpoint(None) is None
    assert instrument.checkpoint_saved() is False


# --- auto-instrumentation: torch.save and torch.distributed.checkpoint.save ---------------------------

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch (CPU)")


@needs_torch
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_torch_saves_of_checkpoints_answer_and_other_saves_do_not(
    requests: Checkpoints, inbox: Inbox, short_tmp: Path
) -> None:
    import torch

    from gpuwise.instrument import torch_hooks

    tracker = Tracker(Sender(str(inbox.path)))
    tracker.checkpoints = requests
    remove = torch_hooks.install(torch, tracker)
    try:
        request(request_file(requests), "resize-1")
        torch.save({"w": torch.ones(2)}, io.BytesIO())  # in memory: not a checkpoint
        torch.save(torch.ones(2), short_tmp / "predictions.pt")  # a tensor on its own: not a checkpoint
        assert acks(inbox) == []
        torch.save({"w": torch.ones(2)}, short_tmp / "a.pt")
        assert [(a.request_id, a.path) for a in acks(inbox)] == [("resize-1", str(short_tmp / "a.pt"))]

        request(request_file(requests), "resize-2")
        with open(short_tmp / "model.pt", "wb") as file:  # a whole module, into an open file
            torch.save(torch.nn.Linear(1, 1), file)
        assert [(a.request_id, a.path) for a in acks(inbox)] == [("resize-2", str(short_tmp / "model.pt"))]

        request(request_file(requests), "resize-3")
        import torch.distributed.checkpoint as dcp

        # dcp.save is how users call it, though torch does not list it among the package's exports.
        dcp.save({"w": torch.ones(2)}, checkpoint_id=short_tmp / "dcp", no_dist=True)  # type: ignore[attr-defined]
        assert [(a.request_id, a.path) for a in acks(inbox)] == [("resize-3", str(short_tmp / "dcp"))]
    finally:
        remove()
    assert not hasattr(torch.save, "__wrapped__"), "removing the hooks restores torch.save"


def test_a_trainer_cannot_forge_log_lines_or_flood_the_log(caplog: pytest.LogCaptureFixture) -> None:
    from gpuwise.sidecar.checkpoints import CheckpointAcks

    acks = CheckpointAcks()
    forged = "/ckpt/x.pt\n2026-11-26 ERROR gpuwise.operator: all jobs deleted"
    with caplog.at_level("INFO", logger="gpuwise.sidecar.checkpoints"):
        for _ in range(1000):  # a loop that acknowledges at every step, from a rank that does not answer
            assert not acks.record(wire.CheckpointAck(7, 1, 1, "req-1", forged), 1.0)
        assert acks.record(wire.CheckpointAck(7, 0, 0, "req-1", forged), 2.0)
        for _ in range(1000):
            assert not acks.record(wire.CheckpointAck(7, 0, 0, "req-1", forged), 3.0)
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2, lines
    assert all("\n" not in line and "\\n2026-11-26 ERROR" in line for line in lines)
