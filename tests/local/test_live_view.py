"""The live terminal view of `gpuwise run`, rendered from a real session: sidecar, socket, recorder."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from rich.console import Console

from gpuwise.instrument.sender import Sender
from gpuwise.instrument.tracker import Tracker
from gpuwise.local import live, session
from gpuwise.local.recorder import Recorder
from gpuwise.metrics import catalog
from gpuwise.sidecar.assembly import Sidecar
from gpuwise.sidecar.backend import Backend
from gpuwise.sidecar.identity import Identity
from gpuwise.sidecar.simulated import SimulatedBackend
from tests.support.waiting import eventually


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        """The same moment as a unix time, which step events carry."""
        return 1_795_000_000.0 + self.now


@contextmanager
def running(where: Path, backend: Backend | None, clock: Clock) -> Iterator[tuple[Sidecar, Recorder]]:
    """The sidecar and recorder of `gpuwise run`, wired as its session wires them."""
    recorder = Recorder(clock=clock, wall_clock=clock.wall)
    sidecar = Sidecar(
        backend=backend,
        identity=Identity(hostname="here"),
        socket_path=where / "steps.sock",
        interval=3600.0,  # the first sample only: the figures cannot move under the test
        on_sample=recorder.on_sample,
        on_step=recorder.on_step,
        started_at=0.0,  # the trackers' step time is their own test clock's, not the wall clock's
    )
    sidecar.start()
    try:
        yield sidecar, recorder
    finally:
        sidecar.stop()


def train(sidecar: Sidecar, steps: int, step_s: float, wait_s: float, batch: int, *, run: Clock) -> None:
    """A training process's tracker reporting over the real socket (its own clock: exact figures;
    each report's steps end at the run's clock's time)."""
    clock = Clock()
    assert sidecar.receiver is not None
    tracker = Tracker(Sender(str(sidecar.receiver.path)), clock=clock, send_interval=1e9, wall_clock=run.wall)
    for _ in range(steps):
        tracker.fetched(clock.now, clock.now + wait_s, batch)
        clock.now += step_s
        tracker.end_step()
    tracker.flush()  # the first step went at once, the rest leave together
    eventually(lambda: sum(p.steps for p in sidecar.book.processes()) == steps)


def render(sidecar: Sidecar, recorder: Recorder, note: str) -> str:
    console = Console(record=True, width=120, color_system=None, force_terminal=False)
    console.print(live.view(sidecar, recorder, "python train.py", note)())
    return console.export_text()


def test_steps_and_simulated_gpus(short_tmp: Path) -> None:
    clock = Clock()
    backend = SimulatedBackend("data-starved", 2)
    with running(short_tmp, backend, clock) as (sidecar, recorder):
        clock.now = 1.0  # the steps arrive one second into the run
        train(sidecar, steps=10, step_s=0.1, wait_s=0.025, batch=32, run=clock)
        clock.now = 2.0
        text = render(sidecar, recorder, "simulated: 2 GPU(s) playing 'data-starved'")
        assert sidecar.sampler is not None and sidecar.sampler.snapshot is not None
        readings = sidecar.sampler.snapshot.sample.readings
    lines = [line.strip("│ ") for line in text.splitlines()]
    assert "python train.py" in lines[0] and "simulated: 2 GPU(s) playing 'data-starved'" in lines
    # Two datagrams: the first step (0.1 s, ended at 1.0 s) and the nine others; so the window
    # spans 2.0 - 1.0 + 0.1 s.
    assert "steps              10  (9.1/s over the last 1 s)" in lines
    assert "step time          100.0 ms" in lines
    assert "waiting for input  █████░░░░░░░░░░░░░░░ 25%" in lines
    assert "samples/s          291" in lines
    assert lines[lines.index("samples/s          291") + 1].split() == ["GPU", "model", "util", "memory", "power"]
    for gpu in (0, 1):
        values = {r.metric.name: r.value for r in readings if r.device.index == gpu}
        util, used, free = (values[m.name] for m in (catalog.GPU_UTIL, catalog.FB_USED, catalog.FB_FREE))
        row = next(line for line in lines if line.startswith(f"{gpu}  "))
        assert backend.devices[gpu].model in row
        assert f" {util / 100:.0%}" in row and "█" in row
        assert f"{used / 1024:.1f} / {(used + free) / 1024:.1f} GiB" in row
        assert f"{values[catalog.POWER_USAGE.name]:.0f} W" in row


def test_without_a_gpu_step_metrics_only(short_tmp: Path) -> None:
    backend, note = session._backend(None, 1)
    if backend is not None:
        backend.close()
        pytest.skip("NVML found a GPU here")
    assert note == "no NVIDIA GPU found (NVML did not initialise): showing step metrics only"
    clock = Clock()
    with running(short_tmp, None, clock) as (sidecar, recorder):
        text = render(sidecar, recorder, note)
        assert "steps  0" in text, "before the first step"
        clock.now = 0.5
        train(sidecar, steps=4, step_s=0.2, wait_s=0.15, batch=8, run=clock)
        clock.now = 20.0  # steps older than the window: the total alone
        idle = render(sidecar, recorder, note)
        clock.now = 1.5
        text = render(sidecar, recorder, note)
    assert note in text
    assert "steps              4  (3.3/s over the last 1 s)" in text  # 4 steps over 1.5 - 0.5 + 0.2 s
    assert "step time          200.0 ms" in text and "███████████████░░░░░ 75%" in text
    assert "samples/s          27" in text
    assert "GPU" not in text.replace("no NVIDIA GPU found", ""), "no device table"
    assert "steps  4" in idle and "step time" not in idle
