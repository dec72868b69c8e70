"""The sidecar killed mid-run (issue 20): the trainer keeps training, and no step is counted twice.

A real `gpuwise sidecar` (simulated GPUs) and a real instrumented process; the sidecar is killed
with SIGKILL, as an OOM kill would, and a new one binds the same socket, as the kubelet restarts a
native sidecar. What the first one exported (`before`, its last scrape, which Prometheus holds)
plus what the second counts (`after`, a counter that starts again from zero) never exceeds what
the trainer did: the steps made while no sidecar listened are lost, none is doubled.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.sidecar.support import ROOT, SidecarProcess, select, sidecar
from tests.support.waiting import eventually

TRAINER = textwrap.dedent(
    """
    import pathlib, sys, time
    from gpuwise import instrument
    stop, steps = pathlib.Path(sys.argv[1]), 0
    while not stop.exists():
        time.sleep(0.01)
        instrument.step_end(samples=8)
        steps += 1
    print(steps)
    """
)
SIMULATED = ("--backend", "simulated", "--gpus", "1", "--interval", "0.5")


def steps(side: SidecarProcess) -> float:
    return sum(s.value for s in select(side.scrape(), "gpuwise_steps_total"))


def test_a_killed_sidecar_costs_the_trainer_nothing_and_counts_no_step_twice(short_tmp: Path) -> None:
    stop = short_tmp / "stop"
    with sidecar(short_tmp, *SIMULATED) as first:
        trainer = subprocess.Popen(
            [sys.executable, "-c", TRAINER, str(stop)],
            env=first.trainer_env("manual"),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        eventually(lambda: steps(first) >= 50, what="steps counted by the first sidecar")
        before = steps(first)
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(timeout=10)
    time.sleep(0.5)  # the trainer runs on with nobody listening
    assert trainer.poll() is None, "the trainer does not notice the sidecar is gone"
    with sidecar(short_tmp, *SIMULATED) as second:
        eventually(lambda: steps(second) >= 20, what="steps counted by the restarted sidecar")
        stop.touch()
        out, _ = trainer.communicate(timeout=20)
        assert trainer.returncode == 0
        done = int(out)
        time.sleep(0.3)  # the final totals, sent at exit, arrive
        after = steps(second)
    assert before + after <= done, f"{before:g} + {after:g} counted of {done} steps: some counted twice"
    assert after < done - before, "the steps made while no sidecar listened are lost, not invented"
