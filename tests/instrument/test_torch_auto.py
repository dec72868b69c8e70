"""Auto-instrumentation of real PyTorch training loops (CPU), seen through a real sidecar."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.sidecar.support import ROOT, Series, SidecarProcess, select, sidecar, value
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch (CPU build is enough)"),
]

# The training script keeps its own books (optimizer steps, batches, time blocked on input)
# to compare with what the sidecar learnt without any change to the script.
TRAIN = textwrap.dedent(
    """
    import json, sys, time
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    STEPS, BATCH, ACCUMULATE, WORKERS = (int(a) for a in sys.argv[1:5])

    class Slow(Dataset):
        def __len__(self):
            return 10_000
        def __getitem__(self, i):
            time.sleep(0.0005)
            return torch.randn(8), torch.randn(1)

    torch.manual_seed(0)
    model, critic = nn.Linear(8, 1), nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    critic_optimizer = torch.optim.Adam(critic.parameters())  # a second optimizer: one step per iteration
    loader = DataLoader(Slow(), batch_size=BATCH, num_workers=WORKERS)
    books = {"optimizer_steps": 0, "wait": 0.0, "samples": 0}
    iterator = iter(loader)
    batches = 0
    while books["optimizer_steps"] < STEPS:
        started = time.perf_counter()
        x, y = next(iterator)
        books["wait"] += time.perf_counter() - started
        books["samples"] += len(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.mse_loss(model(x).float(), y)
        loss.backward()
        batches += 1
        if batches % ACCUMULATE == 0:
            optimizer.step()
            optimizer.zero_grad()
            critic_optimizer.step()
            books["optimizer_steps"] += 1
        if books["optimizer_steps"] == STEPS // 2 and batches % ACCUMULATE == 0:
            with torch.no_grad():  # evaluation: batches that belong to no step
                for _, (vx, vy) in zip(range(5), DataLoader(Slow(), batch_size=BATCH)):
                    model(vx)
    print(json.dumps(books))
    """
)


def run_script(tmp: Path, side: SidecarProcess, source: str, *args: object) -> str:
    """Run `source` as a training script, instrumented for `side`; its standard output."""
    script = tmp / "train.py"
    script.write_text(source)
    result = subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        env=side.trainer_env(),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def train(
    tmp: Path, side: SidecarProcess, *, steps: int, batch: int, accumulate: int, workers: int
) -> dict[str, float]:
    books: dict[str, float] = json.loads(run_script(tmp, side, TRAIN, steps, batch, accumulate, workers))
    return books


def settled(side: SidecarProcess, steps: int) -> list[Series]:
    """The scrape once the sidecar has read all `steps` (the last datagrams may still be queued)."""

    def scrape() -> list[Series] | None:
        series = side.scrape()
        return (
            series if select(series, "gpuwise_steps_total") and value(series, "gpuwise_steps_total") >= steps else None
        )

    return eventually(scrape)


def test_every_optimizer_step_and_the_input_wait_are_seen(short_tmp: Path) -> None:
    with sidecar(short_tmp, "--backend", "simulated") as side:
        books = train(short_tmp, side, steps=40, batch=16, accumulate=2, workers=0)
        series = settled(side, 40)
    assert books["optimizer_steps"] == 40
    assert value(series, "gpuwise_steps_total") == 40
    assert value(series, "gpuwise_step_duration_seconds_count") == 40
    assert value(series, "gpuwise_samples_total") == books["samples"] == 40 * 2 * 16
    assert value(series, "gpuwise_data_wait_seconds_total") == pytest.approx(books["wait"], rel=0.1)
    assert value(series, "gpuwise_dataloader_batch_size") == 16
    assert value(series, "gpuwise_dataloader_num_workers") == 0
    assert value(series, "gpuwise_dataloader_pin_memory") == 0
    assert value(series, "gpuwise_autocast_enabled") == 1
    assert value(series, "gpuwise_instrument_dropped_events_total") == 0
    ratio = value(series, "gpuwise_data_wait_ratio")
    assert 0.2 < ratio <= 1.0
    assert "gpuwise_cuda_memory_allocated_peak_bytes" not in {s.name for s in series}, "no CUDA, no series"


def test_dataloader_workers_do_not_report_steps(short_tmp: Path) -> None:
    with sidecar(short_tmp, "--backend", "simulated") as side:
        books = train(short_tmp, side, steps=30, batch=8, accumulate=1, workers=2)
        series = settled(side, 30)
    assert value(series, "gpuwise_steps_total") == books["optimizer_steps"] == 30
    assert value(series, "gpuwise_dataloader_num_workers") == 2
    assert value(series, "gpuwise_samples_total") == books["samples"]
    assert value(series, "gpuwise_step_events_received_total") <= 30, "close steps travel together"
    assert value(series, "gpuwise_data_wait_seconds_total") == pytest.approx(books["wait"], rel=0.2, abs=0.02)


def test_manual_mode_leaves_torch_alone(short_tmp: Path) -> None:
    with sidecar(short_tmp, "--backend", "simulated") as side:
        script = short_tmp / "train.py"
        script.write_text(TRAIN)
        env = side.trainer_env(mode="manual")
        subprocess.run(
            [sys.executable, str(script), "5", "4", "1", "0"],
            env=env,
            cwd=short_tmp,
            check=True,
            capture_output=True,
            timeout=120,
        )
        assert "gpuwise_steps_total" not in {s.name for s in side.scrape()}


def test_the_script_runs_the_same_without_gpuwise(short_tmp: Path) -> None:
    script = short_tmp / "train.py"
    script.write_text(TRAIN)
    command = [sys.executable, str(script), "3", "4", "1", "0"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(result.stdout)["optimizer_steps"] == 3


# One autocast context around the whole loop: entered once, before the first step, and on at
# every step's end. Each step sleeps past the tracker's send interval, so every step is a datagram.
WHOLE_LOOP_AUTOCAST = textwrap.dedent(
    """
    import time
    import torch
    from torch import nn

    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(20):
            loss = model(torch.randn(4, 8)).float().pow(2).mean()
            assert loss.dtype == torch.float32 and model(torch.randn(1, 8)).dtype == torch.bfloat16
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            time.sleep(0.015)
    """
)


def test_autocast_around_the_whole_loop_stays_reported(short_tmp: Path) -> None:
    with sidecar(short_tmp, "--backend", "simulated") as side:
        run_script(short_tmp, side, WHOLE_LOOP_AUTOCAST)
        series = settled(side, 20)
    assert value(series, "gpuwise_step_events_received_total") >= 10, "many reports, each after the first"
    assert value(series, "gpuwise_autocast_enabled") == 1


# Model set-up takes a second before a loop over tensors already in memory: no DataLoader marks
# where the first step starts, so the first forward pass with gradients on does. The script's own
# books time the loop from just before that forward pass.
SET_UP_THEN_TENSOR_LOOP = textwrap.dedent(
    """
    import json, time
    import torch
    from torch import nn

    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with torch.no_grad():
        model(torch.randn(2, 8))  # a shape check during set-up: not training
    time.sleep(1.0)  # building the model, loading weights...
    x = torch.randn(4, 8)
    started = time.perf_counter()
    for _ in range(10):
        time.sleep(0.02)
        model(x).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    print(json.dumps({"loop_seconds": time.perf_counter() - started}))
    """
)


def test_set_up_before_the_first_step_is_not_step_time(short_tmp: Path) -> None:
    with sidecar(short_tmp, "--backend", "simulated") as side:
        books = json.loads(run_script(short_tmp, side, SET_UP_THEN_TENSOR_LOOP))
        series = settled(side, 10)
    stepped = value(series, "gpuwise_step_duration_seconds_sum")
    assert books["loop_seconds"] * 0.9 <= stepped <= books["loop_seconds"] + 0.01, (stepped, books)
