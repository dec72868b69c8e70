"""The training-side library: the wire format, the tracker's totals, sending that never hurts."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from gpuwise.instrument import wire
from gpuwise.instrument.sender import Sender
from gpuwise.instrument.tracker import Tracker
from tests.conftest import Inbox
from tests.sidecar.support import ROOT, environment


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def event(**changes: Any) -> wire.StepEvent:
    base = wire.StepEvent(1, 0, 0, 1, 32, 0.5, 0.2, 0.5, 2, 32, -1, -1, 0, 1_795_000_000.0)
    return base._replace(**changes)


def test_an_event_is_88_bytes_and_round_trips() -> None:
    original = event(steps=7, wait_seconds=0.25, flags=wire.SAMPLES_KNOWN | wire.PIN_MEMORY_KNOWN)
    data = wire.encode(original)
    assert len(data) == wire.SIZE == 88
    assert wire.decode(data) == original


def test_a_version_1_event_is_read_without_an_end_time() -> None:
    """A trainer with an older copy of the library: its steps count, and are timed on arrival."""
    fields = event(steps=7)[:-1]
    data = wire.LAYOUT_V1.pack(wire.MAGIC, 1, wire.KIND_STEP, *fields)
    assert len(data) == 80
    decoded = wire.decode(data)
    assert decoded[:-1] == fields and math.isnan(decoded.ended_at)
    with pytest.raises(wire.MalformedEvent):  # a version 2 header on the version 1 layout
        wire.decode(wire.LAYOUT_V1.pack(wire.MAGIC, 2, wire.KIND_STEP, *fields))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"GW" + bytes(78),  # wrong version and kind
        b"XX" + wire.encode(event())[2:],  # wrong magic
        wire.encode(event()) + b"!",  # too long
        wire.encode(event(step_seconds=math.nan)),
        wire.encode(event(step_seconds=1e308, last_step_seconds=1e308)),  # finite, but two of them are inf
        wire.encode(event(last_step_seconds=-1.0)),
        wire.encode(event(wait_seconds=-0.1)),  # each of the three durations is checked, not only some
        wire.encode(event(wait_seconds=math.nan)),
        wire.encode(event(step_seconds=1.0, wait_seconds=5.0)),  # waited longer than it stepped
        wire.encode(event(ended_at=math.nan)),  # version 2 says when its step ended
        wire.encode(event(ended_at=math.inf)),
        wire.encode(event(ended_at=-5.0)),
    ],
)
def test_malformed_datagrams_are_rejected(data: bytes) -> None:
    with pytest.raises(wire.MalformedEvent):
        wire.decode(data)


def test_tracker_reports_running_totals(inbox: Inbox) -> None:
    clock = Clock()
    tracker = Tracker(Sender(str(inbox.path)), rank=3, clock=clock)
    tracker.fetched(100.0, 100.3, 16)  # the first batch is requested: the first step starts
    clock.now = 100.5
    tracker.end_step()
    tracker.fetched(100.5, 100.6, 16)
    clock.now = 101.0
    tracker.end_step(samples=20)  # an explicit count wins over the loader's
    first, second = inbox.receive(2)
    assert (first.rank, first.steps, first.samples) == (3, 1, 16)
    assert first.step_seconds == pytest.approx(0.5)
    assert first.wait_seconds == pytest.approx(0.3)
    assert (second.steps, second.samples) == (2, 36)
    assert second.step_seconds == pytest.approx(1.0)
    assert second.wait_seconds == pytest.approx(0.4)
    assert second.last_step_seconds == pytest.approx(0.5)
    assert second.flags & wire.SAMPLES_KNOWN
    assert (second.num_workers, second.batch_size, second.dropped) == (wire.UNKNOWN, wire.UNKNOWN, 0)


def test_steps_close_together_are_reported_together(inbox: Inbox) -> None:
    clock = Clock()
    tracker = Tracker(Sender(str(inbox.path)), clock=clock)
    for _ in range(11):  # a step every 3 ms
        clock.now += 0.003
        tracker.end_step()
    assert [e.steps for e in inbox.pending()] == [1, 5, 9], "at most one datagram per 10 ms"
    tracker.flush()  # at exit: steps 10 and 11 are still owed
    (last,) = inbox.pending()
    assert last.steps == 11 and last.step_seconds == pytest.approx(0.033)
    tracker.flush()
    assert inbox.pending() == [], "nothing owed any more"


def test_tracker_reports_the_loader_autocast_and_memory(inbox: Inbox) -> None:
    clock = Clock()
    tracker = Tracker(Sender(str(inbox.path)), clock=clock)
    tracker.set_loader(num_workers=4, pin_memory=True, batch_size=64)
    tracker.autocast_known = True
    probes: list[float] = []

    def probe() -> tuple[int, int]:
        probes.append(clock.now)
        return 1000, 2000

    tracker.memory_probe = probe
    tracker.saw_autocast()
    tracker.end_step()
    clock.now += 0.5
    tracker.end_step()
    clock.now += 0.6
    tracker.end_step()
    first, second, _ = inbox.receive(3)
    assert (first.num_workers, first.batch_size) == (4, 64)
    assert first.flags & wire.PIN_MEMORY_KNOWN and first.flags & wire.PIN_MEMORY_ON
    assert first.flags & wire.AUTOCAST_ON and not second.flags & wire.AUTOCAST_ON
    assert second.flags & wire.AUTOCAST_KNOWN
    assert (first.cuda_allocated_peak, first.cuda_reserved_peak) == (1000, 2000)
    assert probes == [100.0, 101.1], "the probe runs at most once a second"


def test_autocast_on_at_a_steps_end_is_reported_in_every_datagram(inbox: Inbox) -> None:
    """One autocast context around the whole loop is entered once; every report must still say so."""
    clock = Clock()
    tracker = Tracker(Sender(str(inbox.path)), clock=clock)
    tracker.autocast_known = True
    calls: list[float] = []
    on = True

    def probe() -> bool:
        calls.append(clock.now)
        return on

    tracker.autocast_probe = probe
    for _ in range(3):  # a report per step, each seeing autocast on
        clock.now += 0.02
        tracker.end_step()
    for _ in range(3):  # three steps in one report: probed at the first only
        clock.now += 0.004
        tracker.end_step()
    on = False
    clock.now += 0.02
    tracker.end_step()
    flags = [e.flags for e in inbox.pending()]
    assert [bool(f & wire.AUTOCAST_ON) for f in flags] == [True, True, True, True, False]
    assert all(f & wire.AUTOCAST_KNOWN for f in flags)
    assert len(calls) == 5, "not probed again once seen in the current report"


def test_a_broken_autocast_probe_is_dropped(inbox: Inbox) -> None:
    tracker = Tracker(Sender(str(inbox.path)))
    tracker.autocast_known = True
    tracker.autocast_probe = lambda: bool(1 // 0)
    tracker.end_step()
    assert not inbox.receive()[0].flags & wire.AUTOCAST_ON
    assert getattr(tracker, "autocast_probe") is None  # noqa: B009 - mypy narrowed the attribute


def test_a_broken_memory_probe_costs_the_reading_only(inbox: Inbox) -> None:
    tracker = Tracker(Sender(str(inbox.path)))
    tracker.memory_probe = lambda: (1 // 0, 0)
    tracker.end_step()
    assert inbox.receive()[0].cuda_allocated_peak == wire.UNKNOWN


def test_sending_without_a_sidecar_is_counted_and_never_raises(short_tmp: Path) -> None:
    sender = Sender(str(short_tmp / "nobody-listens.sock"))
    tracker = Tracker(sender, send_interval=0.0)
    for _ in range(5):
        tracker.end_step()
    assert sender.dropped == 5


def test_a_full_queue_drops_without_blocking_and_later_events_say_so(inbox: Inbox) -> None:
    sender = Sender(str(inbox.path))
    tracker = Tracker(sender, send_interval=0.0)
    started = time.perf_counter()
    for _ in range(500):  # nobody reads: the socket queue fills after a few datagrams
        tracker.end_step()
    assert time.perf_counter() - started < 1.0
    assert sender.dropped > 0
    queued = inbox.pending()
    tracker.end_step()
    last = inbox.receive()[0]
    assert last.steps == 501, "running totals: the dropped steps are still counted"
    assert last.dropped == sender.dropped == 500 - len(queued)


API_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from gpuwise import instrument
    with instrument.step(samples=8):
        with instrument.data_wait():
            time.sleep(0.05)
        time.sleep(0.05)
    try:
        with instrument.step(samples=8):
            raise RuntimeError("a failed step is not a step")
    except RuntimeError:
        pass
    instrument.step_end(samples="not a number")  # never raises into the training loop
    instrument.step_end(samples=4)
    print("done")
    """
)


def run_api_script(**env: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", API_SCRIPT]
    return subprocess.run(
        command, env=environment(**env), cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_explicit_api(inbox: Inbox) -> None:
    result = run_api_script(GPUWISE_SOCKET=str(inbox.path), GPUWISE_INSTRUMENT="manual")
    assert result.stdout == "done\n", result.stderr
    first, *_, last = inbox.receive(1) + inbox.pending()
    assert first.steps == 1 and first.samples == 8
    # A sleep never ends early but may end late on a loaded machine: bound the figures from below,
    # and from above only loosely.
    assert 0.045 <= first.wait_seconds < 1.0
    assert 0.045 <= first.step_seconds - first.wait_seconds < 1.0
    # The last two steps came within 10 ms: reported together, by the exit flush if need be.
    # A bad samples value counts the step but not the samples.
    assert (last.steps, last.samples) == (3, 12)


@pytest.mark.parametrize(
    ("mode", "warning"),
    [("disabled", ""), ("sometimes", "GPUWISE_INSTRUMENT='sometimes' is not one of auto, manual, disabled")],
)
def test_reporting_can_be_turned_off(inbox: Inbox, mode: str, warning: str) -> None:
    result = run_api_script(GPUWISE_SOCKET=str(inbox.path), GPUWISE_INSTRUMENT=mode)
    assert result.stdout == "done\n"
    assert warning in result.stderr and result.stderr.count("gpuwise:") == (1 if warning else 0)
    assert inbox.pending() == []


def test_without_a_socket_the_api_is_a_no_op() -> None:
    result = run_api_script()
    assert (result.stdout, result.stderr) == ("done\n", "")


def test_the_final_totals_are_resent_at_exit(inbox: Inbox) -> None:
    tracker = Tracker(Sender(str(inbox.path)), send_interval=0.0)
    for _ in range(100):  # the queue fills: the last datagrams do not leave
        tracker.end_step()
    received = inbox.pending()
    assert received[-1].steps < 100
    tracker.flush()
    assert inbox.receive()[0].steps == 100
    tracker.flush()  # nothing owed any more
    assert inbox.pending() == []


def test_samples_are_read_from_common_batch_shapes() -> None:
    from gpuwise.instrument.torch_hooks import _batch_length

    class Tensor:
        def __init__(self, *shape: int) -> None:
            self.shape = shape

    assert _batch_length((Tensor(32, 3), Tensor(32))) == 32
    assert _batch_length({"input_ids": Tensor(8, 128), "labels": Tensor(8)}) == 8
    assert _batch_length([[Tensor(4, 2)]]) == 4
    assert _batch_length(Tensor()) is None  # a scalar
    assert _batch_length("text") is None
    assert _batch_length([]) is None


def test_an_event_says_when_its_last_step_ended_on_the_wall_clock(inbox: Inbox) -> None:
    clock = Clock()
    tracker = Tracker(Sender(str(inbox.path)), clock=clock, wall_clock=lambda: clock.now + 1_795_000_000.0)
    tracker.fetched(100.0, 100.2, 16)
    clock.now = 100.5
    tracker.end_step()
    (first,) = inbox.receive(1)
    assert first.ended_at == pytest.approx(1_795_000_100.5)
    clock.now = 100.6
    tracker.end_step()  # within the send interval: owed until the flush at exit
    clock.now = 150.6  # the DataLoader's workers take 50 s to shut down
    tracker.flush()
    (last,) = inbox.receive(1)
    assert last.steps == 2 and last.ended_at == pytest.approx(1_795_000_100.6), "not stamped at the flush"
