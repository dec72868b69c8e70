"""On a real GPU: does applying what gpuwise recommends do what it says? Predicted against measured.

Three jobs run under `gpuwise run` (NVML, auto-instrumented PyTorch): one starved by a slow,
single-process DataLoader, one compute-bound MLP in fp32, and the same MLP with bf16 autocast. For
each finding with concrete `changes`, the job runs again with exactly those settings, and the
script prints the finding, the engine's expected effect, and the measured samples per second
before and after (the trainer's own count over its training loop, and gpuwise's). The bf16 job is
the control: it should get no NoMixedPrecision finding.

    python -m bench.gpu_recommendations [--seconds 15] [--json OUT] [--keep DIR]

Needs a CUDA GPU and PyTorch with CUDA; without them it says so and exits 0 (CI has no GPU).
The trainer's settings are environment variables named as `gpuwise run`'s tunables are
(`num_workers`, `pin_memory`, `autocast`, `batch_size`), so a recommendation's changes apply as
they are written.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

TRAINER = textwrap.dedent(
    """
    import json, os, time
    import torch
    from torch.utils.data import DataLoader, Dataset

    workload = os.environ["WORKLOAD"]
    seconds = float(os.environ["SECONDS_TO_TRAIN"])
    autocast = os.environ.get("autocast", "0") == "1"
    device = torch.device("cuda")

    class SlowImages(Dataset):
        # Decoding and augmenting on the CPU: a few milliseconds of Python work per image.
        def __len__(self):
            return 1 << 20
        def __getitem__(self, i):
            deadline = time.perf_counter() + 0.002
            while time.perf_counter() < deadline:
                pass
            return torch.randn(3, 64, 64), i % 10

    if workload == "starved":
        batch = int(os.environ.get("batch_size", "128"))
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, padding=1),
            torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10),
        ).to(device)
        workers = int(os.environ.get("num_workers", "0"))
        loader = DataLoader(
            SlowImages(), batch_size=batch, num_workers=workers,
            pin_memory=os.environ.get("pin_memory", "0") == "1", persistent_workers=workers > 0,
        )
        batches = iter(loader)
    else:
        batch = int(os.environ.get("batch_size", "4096"))
        width = 8192
        model = torch.nn.Sequential(
            torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(),
            torch.nn.Linear(width, 10),
        ).to(device)
        x, y = torch.randn(batch, width, device=device), torch.randint(0, 10, (batch,), device=device)
        batches = iter(lambda: (x, y), None)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    torch.cuda.synchronize()
    start, samples, steps = time.perf_counter(), 0, 0
    while time.perf_counter() - start < seconds:
        inputs, labels = next(batches)
        inputs, labels = inputs.to(device, non_blocking=True), torch.as_tensor(labels).to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        samples += len(inputs)
        steps += 1
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(json.dumps({"trainer": {"samples_per_second": samples / elapsed, "steps_per_second": steps / elapsed}}))
    os._exit(0)  # DataLoader workers need not be joined: the measurement is taken
    """
)


def run(workload: str, settings: dict[str, str], seconds: float, work: Path, name: str) -> dict[str, Any]:
    script = work / "trainer.py"
    script.write_text(TRAINER)
    report = work / f"{name}.json"
    env = {**os.environ, "WORKLOAD": workload, "SECONDS_TO_TRAIN": str(seconds), **settings}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / r) for r in ("core", "operator", "sidecar")] + [env.get("PYTHONPATH", "")]
    )
    command = [sys.executable, "-m", "gpuwise.cli", "run", "--report", str(report), "--", sys.executable, str(script)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=seconds * 4 + 120, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{name} failed ({result.returncode}):\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    trainer = next(json.loads(line)["trainer"] for line in result.stdout.splitlines() if line.startswith('{"trainer"'))
    data = json.loads(report.read_text())
    return {
        "trainer_samples_per_second": trainer["samples_per_second"],
        "trainer_steps_per_second": trainer["steps_per_second"],
        "gpuwise_samples_per_second": data["breakdown"].get("samples_per_second"),
        "gpuwise_steps_per_second": data["breakdown"].get("steps_per_second"),
        "data_wait_ratio": data["breakdown"].get("data_wait_ratio"),
        "gpu_util": [gpu["mean_util"] for gpu in data["gpus"]],
        "diagnosis": data["diagnosis"],
    }


def counted(result: dict[str, Any]) -> str:
    """What gpuwise measured, beside the trainer's own count: samples where the DataLoader's batch
    size told it, else steps (a loop over tensors already on the GPU has no DataLoader)."""
    if result["gpuwise_samples_per_second"] is not None:
        return f"gpuwise counted {result['gpuwise_samples_per_second']:.0f} samples/s"
    return (
        f"gpuwise counted {result['gpuwise_steps_per_second'] or 0:.2f} steps/s against the trainer's "
        f"{result['trainer_steps_per_second']:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="training time of each run (default 15)")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    parser.add_argument("--keep", type=Path, help="copy every run's `gpuwise run` report into this directory")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("bench.gpu_recommendations: PyTorch is not installed; nothing to measure")
        return 0
    if not torch.cuda.is_available():
        print("bench.gpu_recommendations: no CUDA GPU here; nothing to measure")
        return 0
    major, minor = torch.cuda.get_device_capability(0)
    print(f"GPU: {torch.cuda.get_device_name(0)} (compute capability {major}.{minor})")
    jobs = {"starved": ("starved", {}), "fp32": ("compute", {"autocast": "0"}), "bf16": ("compute", {"autocast": "1"})}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gw-gpu-") as tmp:
        work = Path(tmp)
        for name, (workload, settings) in jobs.items():
            before = run(workload, settings, args.seconds, work, name)
            kinds = [finding["kind"] for finding in before["diagnosis"]]
            print(
                f"\n{name}: {before['trainer_samples_per_second']:.0f} samples/s, data wait "
                f"{(before['data_wait_ratio'] or 0) * 100:.0f} %, GPU {before['gpu_util']} %, findings {kinds}"
            )
            applied = []
            for finding in before["diagnosis"]:
                if not finding["changes"]:
                    print(f"  {finding['kind']}: nothing to set ({finding['recommendation']})")
                    continue
                after = run(
                    workload, {**settings, **finding["changes"]}, args.seconds, work, f"{name}-{finding['kind']}"
                )
                ratio = after["trainer_samples_per_second"] / before["trainer_samples_per_second"]
                print(
                    f"  {finding['kind']}: set {finding['changes']}; expected: {finding['expected_effect']}; "
                    f"measured: {ratio:.2f}x samples/s ({after['trainer_samples_per_second']:.0f}; {counted(after)}); "
                    f"findings after {[f['kind'] for f in after['diagnosis']]}"
                )
                applied.append(
                    {
                        "kind": finding["kind"],
                        "changes": finding["changes"],
                        "expected": finding["expected_effect"],
                        "ratio": ratio,
                        "after": after,
                    }
                )
            results[name] = {"before": before, "applied": applied}
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for report in work.glob("*.json"):
                shutil.copy(report, args.keep / report.name)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
