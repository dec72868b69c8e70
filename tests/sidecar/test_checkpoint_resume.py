"""End to end without Kubernetes: gpuwise asks for a checkpoint, a real PyTorch trainer saves one,
the sidecar shows the acknowledgement, and the trainer restarted with a new batch size resumes there.

The trainer is `examples/resumable_train.py`, unchanged and auto-instrumented from the sidecar's
instrumentation directory as in a pod; the test plays the operator and the kubelet: it swaps the
request id into the downward-API file, reads /metrics, stops the trainer, and starts it again with
the new value of the tunable's variable.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.sidecar.support import ROOT, SidecarProcess, select, sidecar
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch (CPU build is enough)"),
]

EXAMPLE = ROOT / "examples" / "resumable_train.py"
ACK = "gpuwise_checkpoint_ack_timestamp_seconds"
CHECKPOINT_EVERY = 50  # steps


def start(
    side: SidecarProcess, tmp: Path, request_file: Path, batch_size: int, max_steps: int, *, resume_from: str = ""
) -> subprocess.Popen[str]:
    env = side.trainer_env("auto") | {
        "GPUWISE_RESUME_FROM": resume_from,
        "GPUWISE_CHECKPOINT_REQUEST_FILE": str(request_file),
        "BATCH_SIZE": str(batch_size),
        "NUM_WORKERS": "0",
        "CHECKPOINT_DIR": str(tmp / "checkpoints"),
        "CHECKPOINT_EVERY": str(CHECKPOINT_EVERY),
        "MAX_STEPS": str(max_steps),
        "OMP_NUM_THREADS": "1",
    }
    return subprocess.Popen(
        [sys.executable, str(EXAMPLE)], env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def next_event(trainer: subprocess.Popen[str]) -> dict[str, Any]:
    assert trainer.stdout is not None
    line = trainer.stdout.readline()
    assert line, trainer.stderr.read() if trainer.stderr else "no output"
    event: dict[str, Any] = json.loads(line)
    return event


def start_event(trainer: subprocess.Popen[str]) -> tuple[dict[str, Any], list[str]]:
    """The trainer's start event, and the checkpoints it skipped as broken before it."""
    skipped = []
    while (event := next_event(trainer))["event"] == "skipped":
        skipped.append(event["checkpoint"])
    return event, skipped


def newest_loadable_step(directory: Path) -> int:
    """What a resumed trainer must start from: the newest checkpoint that loads."""
    import torch

    for path in sorted(directory.glob("step-*.pt"), reverse=True):
        try:
            step: int = torch.load(path, weights_only=True)["step"]
        except Exception:
            continue
        return step
    raise AssertionError(f"no checkpoint in {directory}")


def test_a_trainer_checkpoints_on_request_and_resumes_with_a_new_batch_size(short_tmp: Path) -> None:
    request_file = short_tmp / "checkpoint-request"
    request_file.write_text("")  # the annotation is not set yet: the kubelet projects an empty file
    with sidecar(short_tmp, "--backend", "simulated", "--interval", "0.5") as side:
        trainer = start(side, short_tmp, request_file, batch_size=16, max_steps=10**9)
        try:
            assert next_event(trainer) == {"event": "start", "resumed_from": 0, "batch_size": 16, "num_workers": 0}
            eventually(lambda: select(side.scrape(), "gpuwise_dataloader_batch_size"), timeout=20, what="steps")

            staged = short_tmp / ".staged"
            staged.write_text("adjustconfig-1")
            staged.replace(request_file)  # the operator annotates the pod; the kubelet swaps the file
            answered = eventually(
                lambda: select(side.scrape(), ACK, request_id="adjustconfig-1"), timeout=10, what="the acknowledgement"
            )
            answered_at = answered[0].value
            saved = answered[0].labels["path"]  # the path torch.save wrote, as the trainer gave it
            assert Path(saved).parent.name == "checkpoints" and Path(saved).name.startswith("step-"), saved
            assert trainer.poll() is None, "acknowledging is not stopping: the operator restarts the job"
        finally:
            trainer.terminate()  # the restart: the pod is deleted, the trainer gets SIGTERM
            trainer.communicate(timeout=20)

        checkpoints = short_tmp / "checkpoints"
        resume_at = newest_loadable_step(checkpoints)
        assert resume_at >= CHECKPOINT_EVERY
        # The save SIGTERM cut short, whether or not this run's timing cut one: the next save, truncated.
        cut_short = checkpoints / f"step-{resume_at + CHECKPOINT_EVERY:08d}.pt"
        cut_short.write_bytes((checkpoints / f"step-{resume_at:08d}.pt").read_bytes()[:1000])
        # gpuwise's new value for the tunable, in the variable the TrainingJob declared.
        # Restarted as the operator renders it: GPUWISE_RESUME_FROM is the acknowledged checkpoint.
        restarted = start(side, short_tmp, request_file, batch_size=64, max_steps=resume_at + 100, resume_from=saved)
        try:
            started, skipped = start_event(restarted)
            assert skipped == [cut_short.name]
            assert started == {"event": "start", "resumed_from": resume_at, "batch_size": 64, "num_workers": 0}
            out, err = restarted.communicate(timeout=60)
        finally:
            if restarted.poll() is None:
                restarted.kill()
                restarted.communicate()
        assert restarted.returncode == 0, err
        assert json.loads(out.splitlines()[-1]) == {
            "event": "done",
            "step": resume_at + 100,
            "batch_size": 64,
            "num_workers": 0,
        }
        # The sidecar saw the new configuration from the trainer itself, not from the test.
        series = eventually(
            lambda: [s for s in select(side.scrape(), "gpuwise_dataloader_batch_size") if s.value == 64], timeout=10
        )
        assert series
        # The request file still names the request (here nobody cleared it): the restarted process
        # answers it again with its first save, and the sidecar keeps the first answer's time.
        assert select(side.scrape(), ACK, request_id="adjustconfig-1")[0].value == answered_at


def test_the_example_resumes_from_the_checkpoint_gpuwise_names_wherever_it_is(tmp_path: Path) -> None:
    def run(directory: str, max_steps: int, resume_from: str = "") -> list[dict[str, Any]]:
        env = {"CHECKPOINT_DIR": directory, "MAX_STEPS": str(max_steps), "CHECKPOINT_EVERY": "50"}
        env |= {"GPUWISE_RESUME_FROM": resume_from, "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
        done = subprocess.run(
            [sys.executable, str(EXAMPLE)], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
        )
        return [json.loads(line) for line in done.stdout.splitlines()]

    run("first", 100)
    # A new checkpoint directory (another volume, say) holds nothing: the named checkpoint is found anyway.
    events = run("second", 150, resume_from=str(tmp_path / "first" / "step-00000100.pt"))
    assert events[0]["resumed_from"] == 100 and events[-1]["step"] == 150
    assert run("third", 60, resume_from=str(tmp_path / "gone.pt"))[0]["resumed_from"] == 0, "a missing one: ignored"
