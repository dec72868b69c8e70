"""On a real NVIDIA GPU: the NVML backend, the sidecar, and CUDA training. Skipped without one."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpuwise.metrics import catalog
from gpuwise.sidecar import backend as reasons
from gpuwise.sidecar.backend import Sample
from tests.sidecar.support import ROOT, Series, select, sidecar, value
from tests.support.waiting import eventually

pytestmark = pytest.mark.gpu


def readings(sample: Sample, name: str) -> dict[tuple[int, int | None], float]:
    return {(r.device.index, r.device.mig_instance): r.value for r in sample.readings if r.metric.name == name}


def test_every_gpu_reports_or_says_why() -> None:
    from gpuwise.sidecar.nvml import NvmlBackend

    nvml = NvmlBackend()
    try:
        nvml.sample()
        time.sleep(0.3)  # GPM needs two samples >= 100 ms apart
        sample = nvml.sample()
    finally:
        nvml.close()
    failed = {(f.device.index if f.device else None, f.metric.name): f.reason for f in sample.failures}
    assert reasons.EXCEPTION not in failed.values(), failed
    gpus = sorted({d.index for d in nvml.devices})
    for metric in (catalog.FB_USED, catalog.FB_FREE, catalog.POWER_USAGE, catalog.GPU_TEMP, catalog.SM_CLOCK):
        seen = {index for index, _ in readings(sample, metric.name)}
        for gpu in gpus:
            assert gpu in seen or (gpu, metric.name) in failed, f"{metric.name} on GPU {gpu}: no value, no reason"
    for (_, instance), util in readings(sample, catalog.GPU_UTIL.name).items():
        assert instance is None and 0 <= util <= 100
    used, free = readings(sample, catalog.FB_USED.name), readings(sample, catalog.FB_FREE.name)
    for key in used:
        assert used[key] >= 0 and free[key] >= 0
    for (gpu, _), watts in readings(sample, catalog.POWER_USAGE.name).items():
        assert 5 < watts < 2000, f"GPU {gpu} draws {watts} W: a unit slip?"
    for ratio in readings(sample, catalog.SM_ACTIVE.name).values():
        assert 0.0 <= ratio <= 1.0


def test_the_sidecar_serves_the_real_gpus(short_tmp: Path) -> None:
    import pynvml

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    with sidecar(short_tmp, "--backend", "nvml", "--interval", "0.5") as side:
        series = eventually(lambda: (s := side.scrape()) and select(s, "DCGM_FI_DEV_FB_USED") and s)
    assert len({s.labels["gpu"] for s in select(series, "DCGM_FI_DEV_FB_USED")}) == count
    assert value(series, "gpuwise_sidecar_info", backend="nvml") == 1
    assert not [s for s in series if s.labels.get("simulated")]
    # The compute capability the sidecar exports is the one nvidia-smi reports, for every GPU.
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,compute_cap", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    )
    expected = {index.strip(): float(cap) for index, cap in (line.split(",") for line in smi.stdout.splitlines())}
    exported = {s.labels["gpu"]: s.value for s in select(series, "gpuwise_gpu_compute_capability")}
    assert exported == expected


CUDA_TRAINING = textwrap.dedent(
    """
    import json, torch
    from torch.utils.data import DataLoader, TensorDataset
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)).cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    data = TensorDataset(torch.randn(64 * 200, 512), torch.randint(0, 10, (64 * 200,)))
    steps = 0
    for x, y in DataLoader(data, batch_size=64, pin_memory=True):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x.cuda(non_blocking=True)), y.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
    torch.cuda.synchronize()
    print(json.dumps({"steps": steps, "peak": torch.cuda.max_memory_allocated()}))
    """
)


@pytest.mark.slow
def test_cuda_training_reports_memory_peaks_and_autocast(short_tmp: Path) -> None:
    probe = "import torch; print(torch.cuda.is_available())"
    if (
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False).stdout.strip()
        != "True"
    ):
        pytest.skip("this torch build has no CUDA")
    with sidecar(short_tmp, "--backend", "nvml") as side:
        script = short_tmp / "train.py"
        script.write_text(CUDA_TRAINING)
        result = subprocess.run(
            [sys.executable, str(script)], env=side.trainer_env(), cwd=ROOT, capture_output=True, text=True, check=True
        )
        books = json.loads(result.stdout)

        def settled() -> list[Series] | None:
            series = side.scrape()
            steps = select(series, "gpuwise_steps_total")
            return series if steps and steps[0].value == books["steps"] else None

        series = eventually(settled)
    assert value(series, "gpuwise_autocast_enabled") == 1
    assert value(series, "gpuwise_dataloader_pin_memory") == 1
    peak = value(series, "gpuwise_cuda_memory_allocated_peak_bytes")
    assert 0 < peak <= books["peak"]
    assert value(series, "gpuwise_cuda_memory_reserved_peak_bytes") >= peak
