"""The wire format's edges: what a datagram may carry, and why the sidecar refuses one (it logs the reason)."""

from __future__ import annotations

import pytest

from gpuwise.instrument import wire

NOW = 1_795_000_000.0


def event(**changes: float) -> wire.StepEvent:
    fields = {
        "pid": 7,
        "rank": 0,
        "flags": 0,
        "steps": 10,
        "samples": 320,
        "step_seconds": 5.0,
        "wait_seconds": 1.0,
        "last_step_seconds": 0.5,
        "num_workers": 2,
        "batch_size": 32,
        "cuda_allocated_peak": -1,
        "cuda_reserved_peak": -1,
        "dropped": 0,
        "ended_at": NOW,
    }
    return wire.StepEvent(**{**fields, **changes})  # type: ignore[arg-type]


def ack_bytes(
    request_id: bytes, path: bytes, *, version: int = wire.VERSION, kind: int = wire.KIND_CHECKPOINT_ACK
) -> bytes:
    header = wire.ACK_HEADER.pack(wire.MAGIC, version, kind, 1, 0, 3, len(request_id), len(path))
    return header + request_id + path


def test_the_edges_of_a_step_event_are_accepted() -> None:
    for accepted in (
        event(ended_at=1.0),  # any positive unix time
        event(step_seconds=wire.MAX_SECONDS, last_step_seconds=wire.MAX_SECONDS),
        event(step_seconds=1000.0, wait_seconds=1000.0 * 1.001 + 1.0),  # the tolerance, to the bit
        event(step_seconds=0.0, wait_seconds=1.0),  # a second of slack on no step time at all
    ):
        assert wire.decode(wire.encode(accepted)) == accepted


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (wire.encode(event())[:-1], "87 bytes, expected 88"),
        (b"XX" + wire.encode(event())[2:], "unknown header b'XX' v2 kind 1"),
        (wire.encode(event(ended_at=0.0)), "the step's end must be a unix time"),
        (wire.encode(event(last_step_seconds=wire.MAX_SECONDS * 2)), "durations must be numbers from 0 to 1e\\+09 s"),
        (wire.encode(event(step_seconds=0.0, wait_seconds=1.5)), "data wait exceeds step time"),
        (wire.encode(event(step_seconds=1000.0, wait_seconds=1500.0)), "data wait exceeds step time"),
    ],
)
def test_a_refused_step_event_says_why(data: bytes, reason: str) -> None:
    with pytest.raises(wire.MalformedEvent, match=f"^{reason}$"):
        wire.decode(data)


def test_the_longest_request_id_is_one() -> None:
    longest = "r" * wire.MAX_REQUEST_ID_BYTES
    assert wire.is_request_id(longest)
    ack = wire.CheckpointAck(1, 0, 3, longest, "/ckpt")
    assert wire.parse(wire.encode_ack(ack)) == ack


def test_a_version_1_ack_is_read() -> None:
    assert wire.parse(ack_bytes(b"r-1", b"/ckpt", version=1)) == wire.CheckpointAck(1, 0, 3, "r-1", "/ckpt")


def test_a_path_cut_inside_a_character_still_decodes() -> None:
    # Only the path's tail travels, so its first byte can be the middle of a UTF-8 character.
    decoded = wire.parse(ack_bytes(b"r-1", "é/step-1.pt".encode()[1:]))
    assert isinstance(decoded, wire.CheckpointAck)
    assert decoded.path == "\ufffd/step-1.pt"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (ack_bytes(b"r-1", b"")[: wire.ACK_HEADER.size - 1], "16 bytes, shorter than an ack's header"),
        (ack_bytes(b"", b""), "not a checkpoint request id: ''"),  # exactly a header: read, then refused
        (ack_bytes(b"r-1", b"", version=3), "unknown header b'GW' v3 kind 2"),
        (ack_bytes(b"r-1", b"/p") + b"!", "23 bytes do not match the lengths the header gives"),
        (ack_bytes(b"r\xff", b""), "not a checkpoint request id: 'r\ufffd'"),  # not ASCII: refused, not raised
    ],
)
def test_a_refused_ack_says_why(data: bytes, reason: str) -> None:
    with pytest.raises(wire.MalformedEvent, match=f"^{reason}$"):
        wire.parse(data)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"GW\x02", "3 bytes, expected 88"),  # too short to have a kind byte
        (b"GW\x02\x02", "4 bytes, shorter than an ack's header"),  # the kind byte alone says ack
    ],
)
def test_a_stub_is_refused_by_the_decoder_its_kind_names(data: bytes, reason: str) -> None:
    with pytest.raises(wire.MalformedEvent, match=f"^{reason}$"):
        wire.parse(data)
