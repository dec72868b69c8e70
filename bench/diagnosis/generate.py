"""Write the diagnosis benchmark's scenarios (`scenarios/*.json`) from fixed seeds.

    python -m bench.diagnosis.generate          # rewrite them
    python -m bench.diagnosis.generate --check  # exit 1 if a checked-in file differs

Every scenario is made here, from a named recipe and a seed of its own name, so the corpus can be
reviewed as code and reproduced exactly (`tests/diagnose/test_benchmark.py` checks that it is).
A recipe describes the job as it ran: its telemetry, noise included; the labels say what a
practitioner reading the README's findings table would conclude of it, not what the engine says.
Nothing here is read from `../shared/data`: the engine is also scored on data it never sees.

Operator scenarios hold the `Reported` record of a 15-minute window at Prometheus' 15 s step (60
samples) and the TrainingJob; local ones a whole `gpuwise run` report of about two minutes.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

from bench.diagnosis.corpus import NOW, SCENARIOS
from gpuwise.api.kinds import FindingKind as K
from gpuwise.metrics import catalog

SAMPLES: Final = 60  # a 15 m window at a 15 s step
STEP_SECONDS: Final = 15.0
H100: Final = "NVIDIA H100 80GB HBM3"
H100_MIB: Final = 81_559.0
A100: Final = "NVIDIA A100-SXM4-80GB"
A100_MIB: Final = 81_920.0
L4: Final = "NVIDIA L4"
L4_MIB: Final = 23_034.0
# Hardware thermal slowdown and the software power cap (CLOCK_SLOWDOWNS leaves the latter out).
THERMAL: Final = 0x40
POWER_CAP: Final = 0x4

Series = Callable[[random.Random, int, int], float]  # (noise, sample index, samples) -> value


def around(mean: float, spread: float, low: float = 0.0, high: float = 100.0) -> Series:
    """Noise around a mean, clipped: what a steady figure looks like sample to sample."""
    return lambda rng, i, n: round(min(high, max(low, rng.gauss(mean, spread))), 4)


def bursts(base: Series, burst: Series, every: int, phase: int = 0) -> Series:
    """`base`, but `burst` at every `every`-th sample: a periodic evaluation, checkpoint or shard load."""
    return lambda rng, i, n: burst(rng, i, n) if (i + phase) % every == 0 else base(rng, i, n)


def after(share: float, before: Series, then: Series) -> Series:
    """`before` for the first `share` of the samples, `then` for the rest."""
    return lambda rng, i, n: then(rng, i, n) if i >= share * n else before(rng, i, n)


def between(start: float, end: float, inside: Series, outside: Series) -> Series:
    """`inside` from `start` to `end` (shares of the samples), `outside` elsewhere."""
    return lambda rng, i, n: inside(rng, i, n) if start * n <= i < end * n else outside(rng, i, n)


def constant(value: float) -> Series:
    return lambda rng, i, n: value


@dataclass(frozen=True)
class Recipe:
    name: str
    path: str  # "local" or "operator"
    why: str
    expected: tuple[str, ...]
    acceptable: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)

    def scenario(self) -> dict[str, Any]:
        record: dict[str, Any] = {"path": self.path, "why": self.why, "expected": sorted(self.expected)}
        if self.acceptable:
            record["acceptable"] = sorted(self.acceptable)
        return record


# --- the operator's scenarios: a TrainingJob and the record of its window ------------------------


def trainingjob(
    name: str,
    *,
    age_seconds: float,
    cpu: str = "16",
    gpus: int = 1,
    nodes: int = 1,
    processes: int = 1,
    env: Sequence[tuple[str, str]] = (),
    accumulation: bool = False,
    keep_global_batch: bool = False,
) -> dict[str, Any]:
    """A TrainingJob in Recommend mode declaring the usual tunables, running for `age_seconds`."""
    tunables: dict[str, Any] = {
        "batchSize": {"env": "BATCH_SIZE", "min": 8, "max": 4096},
        "dataLoaderWorkers": {"env": "NUM_WORKERS", "min": 1, "max": 32},
        "pinMemory": {"env": "PIN_MEMORY"},
        "amp": {"env": "AMP"},
    }
    if accumulation:
        tunables["gradientAccumulationSteps"] = {"env": "GRAD_ACCUM", "min": 1, "max": 64}
    if keep_global_batch:
        tunables["keepGlobalBatchSize"] = True
    started = (NOW - timedelta(seconds=age_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "gpuwise.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {
            "trainer": {
                "image": "trainer:1",
                "command": ["torchrun"],
                "numNodes": nodes,
                "numProcPerNode": processes,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": gpus, "cpu": cpu}},
                "env": [{"name": key, "value": value} for key, value in env],
            },
            "efficiency": {"mode": "Recommend", "window": "15m", "tunables": tunables},
        },
        "status": {"phase": "Running", "startTime": started},
    }


def healthy_operator(workers: int) -> dict[str, Any]:
    """A busy, well-fed bf16 job on H100s: what every operator recipe changes a part of."""
    return {
        "gpu_utilization": around(92, 3),
        "data_wait_fraction": around(0.03, 0.01, 0, 1),
        "sm_active": around(0.72, 0.04, 0, 1),
        "tensor_activity": 0.41,
        "memory_used_mib": 61_000.0,
        "memory_total_mib": H100_MIB,
        "seconds_since_last_step": 2.0,
        "gpus": workers,
        "gpu_model": H100,
        "compute_capability": [9, 0],
        "batch_size": 128,
        "num_workers": 6,
        "pin_memory": True,
        "autocast": True,
        "worker_step_seconds": {w: around(0.42, 0.01, 0.01, 100) for w in range(workers)},
    }


def operator_document(recipe: Recipe, rng: random.Random) -> dict[str, Any]:
    options = dict(recipe.options)
    workers = int(options.pop("workers", 1))
    job = options.pop("job", {})
    samples = int(options.pop("samples", SAMPLES))
    fields = healthy_operator(workers)
    fields.update(options)
    record: dict[str, Any] = {}
    for key, value in fields.items():
        if value is None:
            continue
        record[key] = _sampled(value, rng, samples)
    return {
        "scenario": recipe.scenario(),
        "trainingjob": trainingjob(recipe.name, **{"age_seconds": 3 * 3600.0, **job}),
        "window": {"step_seconds": STEP_SECONDS, "reported": record},
    }


def _sampled(value: Any, rng: random.Random, samples: int) -> Any:
    """A recipe's value as JSON: a `Series` becomes its samples, per worker where it is a mapping."""
    if callable(value):
        return [value(rng, i, samples) for i in range(samples)]
    if isinstance(value, dict):
        return {str(key): _sampled(item, rng, samples) for key, item in value.items()}
    return value


def slows(worker_of: int | set[int], workers: int, slow: Series, usual: Series | None = None) -> dict[int, Series]:
    """Per-worker step seconds where `worker_of` (one worker or several) follows `slow` and the others
    the usual 0.42 s."""
    usual = usual or around(0.42, 0.01, 0.01, 100)
    slowed = worker_of if isinstance(worker_of, set) else {worker_of}
    return {w: slow if w in slowed else usual for w in range(workers)}


# --- gpuwise run's scenarios: a whole JSON report -------------------------------------------------


def local_report(recipe: Recipe, rng: random.Random) -> dict[str, Any]:
    """A format-1 `gpuwise run` report: model set-up, `steps` steps per rank, a few seconds of shutdown."""
    o = recipe.options
    ranks, steps, step = int(o.get("ranks", 1)), int(o.get("steps", 150)), float(o.get("step_seconds", 0.8))
    wait: Series = o.get("wait", around(0.03, 0.01, 0, 1))
    interval, setup_seconds = float(o.get("interval", 2.0)), 12.0
    per_step: list[dict[str, Any]] = []
    end = setup_seconds
    for rank in range(ranks):
        t = setup_seconds
        for i in range(steps):
            seconds = round(step * rng.uniform(0.95, 1.05) * (o.get("warm_up_factor", 1.0) if i < 5 else 1.0), 5)
            t += seconds
            share = wait(rng, i, steps) if i >= 5 else o.get("warm_up_wait", wait(rng, i, steps))
            per_step.append(
                {
                    "t": round(t, 4),
                    "rank": rank,
                    "step": i + 1,
                    "steps": 1,
                    "seconds": seconds,
                    "data_wait_seconds": round(seconds * share, 5),
                    "samples": o.get("batch_size", 64),
                }
            )
        end = max(end, t)
    wall = end + 4.0
    per_step.sort(key=lambda s: (s["t"], s["rank"]))
    gpus = o.get("gpus", ranks) if o.get("gpu", True) else 0
    trace = list(_trace(o, rng, gpus=gpus, wall=wall, interval=interval, training=(setup_seconds, end)))
    model = o.get("model", H100)
    return {
        "format": 1,
        "command": ["python", "train.py"],
        "exit_code": 0,
        "wall_seconds": round(wall, 3),
        "backend": {"name": "generated", "scenario": recipe.name, "note": "written by bench/diagnosis/generate.py"},
        "setup": {
            "num_workers": o.get("num_workers", 6),
            "pin_memory": o.get("pin_memory", True),
            "batch_size": o.get("batch_size", 64),
            "autocast": o.get("autocast", True),
        },
        "gpus": [{"gpu": g, "model": model} for g in range(gpus)],
        "per_step": per_step,
        "trace": trace,
        "scenario": recipe.scenario(),
    }


def _trace(
    o: dict[str, Any], rng: random.Random, *, gpus: int, wall: float, interval: float, training: tuple[float, float]
) -> Iterator[dict[str, Any]]:
    """Each GPU's samples: idle outside `training`, the recipe's figures inside it."""
    util: Series = o.get("util", around(93, 3))
    sm: Series | None = o.get("sm_active")
    clocks: dict[int, Series] = o.get("clocks", {})
    used, total = float(o.get("fb_used", 52_000.0)), float(o.get("fb_total", H100_MIB))
    n = int(wall / interval)
    for i in range(n + 1):
        t = round(i * interval, 3)
        inside = training[0] <= t <= training[1]
        for gpu in range(gpus):
            values: dict[str, float] = {
                catalog.GPU_UTIL.name: util(rng, i, n) if inside else 0.0,
                catalog.FB_USED.name: used if inside else 600.0,
                catalog.FB_FREE.name: total - (used if inside else 600.0),
                catalog.COMPUTE_CAPABILITY.name: float(o.get("capability", 9.0)),
            }
            if sm is not None:
                values[catalog.SM_ACTIVE.name] = sm(rng, i, n) if inside else 0.0
            if "tensor" in o:
                values[catalog.TENSOR_ACTIVE.name] = float(o["tensor"]) if inside else 0.0
            if "clocks" in o:
                values[catalog.CLOCKS_EVENT_REASONS.name] = clocks.get(gpu, constant(0))(rng, i, n)
            yield {"t": t, "gpu": gpu, "values": values}


# --- the corpus -------------------------------------------------------------------------------------

STARVED: Final = {"data_wait_fraction": around(0.45, 0.05, 0, 1), "gpu_utilization": around(38, 6)}
LIGHT: Final = {"gpu_utilization": around(14, 3), "sm_active": around(0.09, 0.015, 0, 1)}


def recipes() -> list[Recipe]:
    """Every scenario of the corpus, operator ones first; the names say what each is."""
    op, local = "operator", "local"
    return [
        # Healthy jobs and their look-alikes: nothing to find.
        Recipe("op-healthy-bf16", op, "A busy, well-fed bf16 job on one H100: nothing to find.", ()),
        Recipe(
            "op-healthy-bursty-utilization",
            op,
            "A periodic evaluation drops utilization to 20% in one sample of 12 (8%): under the 90% a finding "
            "needs, so bursty but healthy.",
            (),
            options={"gpu_utilization": bursts(around(90, 3), around(20, 5), 12)},
        ),
        Recipe(
            "op-healthy-bursty-input",
            op,
            "A shard boundary makes input wait spike to 50% in one sample of 15, otherwise 3%: healthy.",
            (),
            options={
                "data_wait_fraction": bursts(around(0.03, 0.01, 0, 1), around(0.5, 0.05, 0, 1), 15),
                "gpu_utilization": bursts(around(91, 3), around(40, 5), 15),
            },
        ),
        Recipe(
            "op-startup-slow-input",
            op,
            "Four minutes after start: the dataset is still being cached, so input waits and the GPU is idle; "
            "start-up is not the steady state (5-minute grace).",
            (),
            options={**STARVED, "job": {"age_seconds": 240.0}, "samples": 16},
        ),
        Recipe(
            "op-startup-fp32",
            op,
            "An fp32 job two minutes old: within the start-up grace nothing is said, even what will hold later.",
            (),
            options={"autocast": False, "tensor_activity": 0.01, "job": {"age_seconds": 120.0}, "samples": 8},
        ),
        Recipe(
            "op-startup-never-stepped",
            op,
            "Seven minutes after start, no step yet and the GPU idle: a rendezvous or dataset download, not yet "
            "the 10 minutes that make a job idle.",
            (),
            options={
                "gpu_utilization": constant(0.0),
                "sm_active": constant(0.0),
                "data_wait_fraction": None,
                "worker_step_seconds": None,
                "seconds_since_last_step": None,
                "tensor_activity": 0.0,
                "memory_used_mib": 900.0,
                "batch_size": None,
                "num_workers": None,
                "pin_memory": None,
                "autocast": None,
                "job": {"age_seconds": 420.0},
                "samples": 28,
            },
        ),
        Recipe(
            "op-short-window-starved",
            op,
            "A job restarted 6 minutes ago (its pods replaced) has only 24 of the window's 60 samples, all "
            "starved: too little of the window to judge (80% coverage needed).",
            (),
            options={**STARVED, "job": {"age_seconds": 360.0}, "samples": 24},
        ),
        # InputBound and CPUBoundInput.
        Recipe(
            "op-input-bound",
            op,
            "45% of step time waiting for input at 38% utilization, with 2 loader workers of 15 spare cores.",
            (K.INPUT_BOUND,),
            options={**STARVED, "num_workers": 2},
        ),
        Recipe(
            "op-input-bound-memory-headroom",
            op,
            "Starved for input and using 12% of GPU memory at batch 32: a larger batch would only wait longer, "
            "so InputBound and not SmallBatch.",
            (K.INPUT_BOUND,),
            options={**STARVED, "num_workers": 1, "pin_memory": False, "memory_used_mib": 9_800.0, "batch_size": 32},
        ),
        Recipe(
            "op-input-bound-fp32",
            op,
            "Starved for input and in fp32: a faster step cannot make it wait less, so the input comes first "
            "(NoMixedPrecision is held back while input binds).",
            (K.INPUT_BOUND,),
            options={**STARVED, "num_workers": 2, "autocast": False, "tensor_activity": 0.02},
        ),
        Recipe(
            "op-input-bound-multi-gpu-pod",
            op,
            "8 GPUs and 8 processes in a 64-core pod, 2 loader workers each: 7 spare cores a process, input-bound.",
            (K.INPUT_BOUND,),
            options={**STARVED, "num_workers": 2, "gpus": 8, "job": {"gpus": 8, "processes": 8, "cpu": "64"}},
        ),
        Recipe(
            "op-cpu-bound-input",
            op,
            "Starved for input with 15 loader workers on a 16-core pod: no spare core for more, CPU-bound.",
            (K.CPU_BOUND_INPUT,),
            options={**STARVED, "num_workers": 15},
        ),
        Recipe(
            "op-cpu-bound-input-multi-gpu-pod",
            op,
            "4 processes share a 16-core pod with 3 loader workers each: every core is in use, CPU-bound.",
            (K.CPU_BOUND_INPUT,),
            options={**STARVED, "num_workers": 3, "gpus": 4, "job": {"gpus": 4, "processes": 4, "cpu": "16"}},
        ),
        Recipe(
            "op-cpu-bound-input-small-pod",
            op,
            "A 4-core pod with 3 loader workers, 55% of step time waiting: every core is in use, CPU-bound.",
            (K.CPU_BOUND_INPUT,),
            options={
                "data_wait_fraction": around(0.55, 0.05, 0, 1),
                "gpu_utilization": around(30, 6),
                "num_workers": 3,
                "job": {"cpu": "4"},
            },
        ),
        Recipe(
            "op-input-wait-busy-gpu",
            op,
            "25% of step time waits for input but the GPU stays 85% busy (asynchronous copies): nothing to gain.",
            (),
            options={"data_wait_fraction": around(0.25, 0.02, 0, 1), "gpu_utilization": around(85, 4)},
        ),
        # SmallBatch.
        Recipe(
            "op-small-batch",
            op,
            "Batch 16 uses 15% of GPU memory and keeps utilization at 40%, input keeps up: a larger batch fits.",
            (K.SMALL_BATCH,),
            options={
                "gpu_utilization": around(40, 5),
                "sm_active": around(0.36, 0.04, 0, 1),
                "memory_used_mib": 12_500.0,
                "batch_size": 16,
            },
        ),
        Recipe(
            "op-small-batch-keep-global",
            op,
            "The same small batch with keepGlobalBatchSize and accumulation 8: still SmallBatch (the batch grows, "
            "the accumulation shrinks).",
            (K.SMALL_BATCH,),
            options={
                "gpu_utilization": around(42, 5),
                "sm_active": around(0.38, 0.04, 0, 1),
                "memory_used_mib": 11_000.0,
                "batch_size": 16,
                "job": {"accumulation": True, "keep_global_batch": True, "env": [("GRAD_ACCUM", "8")]},
            },
        ),
        Recipe(
            "op-big-batch-low-util",
            op,
            "Utilization 45% but 70% of memory in use: the batch cannot grow much; no SmallBatch (and nothing "
            "else explains it with the series there are).",
            (),
            options={
                "gpu_utilization": around(45, 4),
                "sm_active": around(0.4, 0.04, 0, 1),
                "memory_used_mib": 57_000.0,
            },
        ),
        # NoMixedPrecision.
        Recipe(
            "op-fp32-hopper",
            op,
            "Compute-bound fp32 on H100: autocast off, tensor cores at 2%.",
            (K.NO_MIXED_PRECISION,),
            options={"autocast": False, "tensor_activity": 0.02},
        ),
        Recipe(
            "op-fp32-volta-no-profiling",
            op,
            "fp32 on a V100 (7.0) with no tensor activity measured: autocast off on a tensor-core GPU.",
            (K.NO_MIXED_PRECISION,),
            options={
                "autocast": False,
                "tensor_activity": None,
                "sm_active": None,
                "gpu_model": "Tesla V100-SXM2-32GB",
                "compute_capability": [7, 0],
                "memory_total_mib": 32_768.0,
                "memory_used_mib": 24_000.0,
            },
        ),
        Recipe(
            "op-fp32-tf32",
            op,
            "Autocast off but TF32 matmuls keep tensor cores 35% busy: tensor cores are in use already.",
            (),
            options={"autocast": False, "tensor_activity": 0.35},
        ),
        Recipe(
            "op-fp32-pascal",
            op,
            "fp32 on a P100 (6.0): no tensor cores, nothing to gain from autocast.",
            (),
            options={
                "autocast": False,
                "tensor_activity": None,
                "sm_active": None,
                "gpu_model": "Tesla P100-PCIE-16GB",
                "compute_capability": [6, 0],
                "memory_total_mib": 16_280.0,
                "memory_used_mib": 12_000.0,
            },
        ),
        Recipe(
            "op-bf16-compute-bound",
            op,
            "Compute-bound bf16 at 97%: autocast on, tensor cores 60% busy.",
            (),
            options={"gpu_utilization": around(97, 1.5), "tensor_activity": 0.6},
        ),
        # Idle.
        Recipe(
            "op-idle-stopped-stepping",
            op,
            "The last step was 25 minutes ago and the GPUs sit at 0%: a hung collective or a finished loop.",
            (K.IDLE,),
            options={
                "gpu_utilization": constant(0.0),
                "sm_active": constant(0.0),
                "data_wait_fraction": None,
                "worker_step_seconds": None,
                "seconds_since_last_step": 1_500.0,
                "tensor_activity": 0.0,
            },
        ),
        Recipe(
            "op-idle-never-stepped",
            op,
            "25 minutes after start, 4 GPUs allocated at 0% and not one step: stuck (Idle, without a Suspend).",
            (K.IDLE,),
            options={
                "gpu_utilization": constant(0.0),
                "sm_active": constant(0.0),
                "data_wait_fraction": None,
                "worker_step_seconds": None,
                "seconds_since_last_step": None,
                "tensor_activity": 0.0,
                "memory_used_mib": 900.0,
                "gpus": 4,
                "batch_size": None,
                "num_workers": None,
                "pin_memory": None,
                "autocast": None,
                "job": {"age_seconds": 1_500.0, "gpus": 4, "processes": 4},
            },
        ),
        Recipe(
            "op-idle-multi-gpu-pod",
            op,
            "8 GPUs at 1% and no step for 12 minutes: idle.",
            (K.IDLE,),
            options={
                "gpu_utilization": around(1, 0.5),
                "sm_active": constant(0.0),
                "data_wait_fraction": None,
                "seconds_since_last_step": 720.0,
                "tensor_activity": 0.0,
                "gpus": 8,
                "job": {"gpus": 8, "processes": 8, "cpu": "64"},
            },
        ),
        Recipe(
            "op-checkpoint-pause",
            op,
            "No step for 4 minutes while a checkpoint is written, the GPU at 0%: a pause, not yet the 10 minutes "
            "of Idle.",
            (),
            options={
                "gpu_utilization": after(0.73, around(92, 3), constant(0.0)),
                "sm_active": after(0.73, around(0.72, 0.04, 0, 1), constant(0.0)),
                "seconds_since_last_step": 240.0,
            },
        ),
        Recipe(
            "op-eval-pass-no-steps",
            op,
            "No optimizer step for 14 minutes, but the GPU is 85% busy: a long evaluation pass, not idle.",
            (),
            options={
                "gpu_utilization": around(85, 4),
                "data_wait_fraction": None,
                "worker_step_seconds": None,
                "seconds_since_last_step": 840.0,
            },
        ),
        # Straggler and SlowWorker, among heterogeneous workers and global slowdowns.
        Recipe(
            "op-straggler",
            op,
            "Worker 2 of 4 slows from 0.42 s to 0.8 s a step for the last quarter of the window, its peers "
            "unchanged: a straggler.",
            (K.STRAGGLER,),
            options={
                "workers": 4,
                "worker_step_seconds": slows(
                    2, 4, after(0.75, around(0.42, 0.01, 0.01, 100), around(0.8, 0.03, 0.01, 100))
                ),
            },
        ),
        Recipe(
            "op-straggler-heterogeneous",
            op,
            "8 workers on two GPU generations (4 steadily 1.05x slower); then worker 6 slows 2x: a straggler "
            "among steady differences.",
            (K.STRAGGLER,),
            options={
                "workers": 8,
                "worker_step_seconds": {
                    w: (
                        after(0.72, around(0.44, 0.01, 0.01, 100), around(0.9, 0.03, 0.01, 100))
                        if w == 6
                        else around(0.44 if w >= 4 else 0.42, 0.01, 0.01, 100)
                    )
                    for w in range(8)
                },
            },
        ),
        Recipe(
            "op-global-slowdown",
            op,
            "Every worker slows 1.7x together for the last third (a shared filesystem or the network): no "
            "worker is slower than its peers.",
            (),
            options={
                "workers": 4,
                "worker_step_seconds": {
                    w: after(0.66, around(0.42, 0.01, 0.01, 100), around(0.71, 0.02, 0.01, 100)) for w in range(4)
                },
                "gpu_utilization": after(0.66, around(92, 3), around(60, 4)),
            },
        ),
        Recipe(
            "op-straggler-recovered",
            op,
            "Worker 1 was 1.8x slow for five minutes mid-window and has been back to normal for five: nothing "
            "holds now.",
            (),
            options={
                "workers": 4,
                "worker_step_seconds": slows(
                    1, 4, between(0.3, 0.62, around(0.76, 0.02, 0.01, 100), around(0.42, 0.01, 0.01, 100))
                ),
            },
        ),
        Recipe(
            "op-slow-worker",
            op,
            "Worker 3 of 4 is steadily 1.25x slower than its peers all window (an older node): a SlowWorker.",
            (K.SLOW_WORKER,),
            options={"workers": 4, "worker_step_seconds": slows(3, 4, around(0.525, 0.012, 0.01, 100))},
        ),
        Recipe(
            "op-heterogeneous-mild",
            op,
            "4 workers, two of them steadily 4% slower (within noise of placement): no worker worth a note.",
            (),
            options={
                "workers": 4,
                "worker_step_seconds": {w: around(0.437 if w < 2 else 0.42, 0.01, 0.01, 100) for w in range(4)},
            },
        ),
        Recipe(
            "op-noisy-workers",
            op,
            "4 workers with noisy step times (10% jitter, none consistently slower): nothing.",
            (),
            options={"workers": 4, "worker_step_seconds": {w: around(0.42, 0.042, 0.01, 100) for w in range(4)}},
        ),
        Recipe(
            "op-straggler-16",
            op,
            "16 workers; worker 11 slows 1.5x for the last quarter of the window: a straggler in a large job.",
            (K.STRAGGLER,),
            options={
                "workers": 16,
                "worker_step_seconds": slows(
                    11, 16, after(0.75, around(0.42, 0.01, 0.01, 100), around(0.63, 0.02, 0.01, 100))
                ),
            },
        ),
        Recipe(
            "op-straggler-starts-throttling",
            op,
            "Worker 1's GPU starts thermal throttling 70% into the window and its steps slow 1.6x: a straggler "
            "now; the slowdown bits hold in 30% of samples, not yet sustained Throttling.",
            (K.STRAGGLER,),
            options={
                "workers": 4,
                "worker_step_seconds": slows(
                    1, 4, after(0.7, around(0.42, 0.01, 0.01, 100), around(0.67, 0.02, 0.01, 100))
                ),
                "clock_slowdowns": {
                    w: after(0.7, constant(0), constant(THERMAL)) if w == 1 else constant(0) for w in range(4)
                },
            },
        ),
        Recipe(
            "op-straggler-group",
            op,
            "Workers 2, 5 and 7 of 10 slow together from 0.42 s to 0.49 s a step (1.17x, under the 1.25x one "
            "worker alone must reach) for the last 40% of the window: a straggler group, the job at its pace.",
            (K.STRAGGLER,),
            options={
                "workers": 10,
                "worker_step_seconds": slows(
                    {2, 5, 7}, 10, after(0.6, around(0.42, 0.01, 0.01, 100), around(0.49, 0.012, 0.01, 100))
                ),
            },
        ),
        Recipe(
            "op-straggler-group-mild",
            op,
            "Workers 1, 4 and 8 of 10 slow together by 6% for the last 40% of the window: under the 10% a group "
            "must reach, nothing.",
            (),
            options={
                "workers": 10,
                "worker_step_seconds": slows(
                    {1, 4, 8}, 10, after(0.6, around(0.42, 0.01, 0.01, 100), around(0.445, 0.01, 0.01, 100))
                ),
            },
        ),
        Recipe(
            "op-straggler-group-majority",
            op,
            "6 of 10 workers slow together by 17% for the last 40% of the window (a shared switch): most of the "
            "job is slower, no minority holds it back.",
            (),
            options={
                "workers": 10,
                "worker_step_seconds": slows(
                    {0, 1, 3, 4, 6, 9}, 10, after(0.6, around(0.42, 0.01, 0.01, 100), around(0.49, 0.012, 0.01, 100))
                ),
            },
        ),
        Recipe(
            "op-slow-worker-8",
            op,
            "Worker 5 of 8 is steadily 1.16x slower than its peers over the whole window: a SlowWorker.",
            (K.SLOW_WORKER,),
            options={"workers": 8, "worker_step_seconds": slows(5, 8, around(0.487, 0.01, 0.01, 100))},
        ),
        Recipe(
            "op-slow-worker-throttled",
            op,
            "Worker 2's GPU is thermally throttled all window and its steps are steadily 1.3x its peers': both "
            "Throttling (the cause) and SlowWorker (the cost) hold.",
            (K.THROTTLING, K.SLOW_WORKER),
            options={
                "workers": 4,
                "worker_step_seconds": slows(2, 4, around(0.546, 0.012, 0.01, 100)),
                "clock_slowdowns": {
                    w: constant(THERMAL | POWER_CAP) if w == 2 else constant(POWER_CAP) for w in range(4)
                },
            },
        ),
        # OversizedGPU, and MIG slices.
        Recipe(
            "op-oversized-a100",
            op,
            "SM activity 9% and 6 GB of an 80 GB A100, batch not reported (manual instrumentation): a 1g.10gb "
            "MIG slice would do.",
            (K.OVERSIZED_GPU,),
            options={
                **LIGHT,
                "memory_used_mib": 6_000.0,
                "gpu_model": A100,
                "compute_capability": [8, 0],
                "memory_total_mib": A100_MIB,
                "batch_size": None,
            },
        ),
        Recipe(
            "op-oversized-small-batch",
            op,
            "A small model at batch 32: SM activity 9%, 7 GB of 80. Low memory and low utilization is also "
            "SmallBatch by its definition: either a larger batch or a MIG slice.",
            (K.OVERSIZED_GPU, K.SMALL_BATCH),
            options={**LIGHT, "memory_used_mib": 7_000.0, "batch_size": 32},
        ),
        Recipe(
            "op-oversized-l4",
            op,
            "SM activity 9% and 1.5 GB of an L4 (no MIG): a time-sliced share would do.",
            (K.OVERSIZED_GPU,),
            options={
                **LIGHT,
                "memory_used_mib": 1_500.0,
                "memory_total_mib": L4_MIB,
                "gpu_model": L4,
                "compute_capability": [8, 9],
                "batch_size": None,
            },
        ),
        Recipe(
            "op-mig-slice-light",
            op,
            "Already on a 1g.10gb MIG slice of an A100 (NVML reports no utilization for a slice), SM activity "
            "12%: no smaller slice exists.",
            (),
            options={
                "gpu_utilization": None,
                "sm_active": around(0.12, 0.02, 0, 1),
                "memory_used_mib": 3_000.0,
                "memory_total_mib": 9_984.0,
                "gpu_model": A100,
                "compute_capability": [8, 0],
                "batch_size": None,
            },
        ),
        Recipe(
            "op-mig-slice-busy",
            op,
            "On a 3g.40gb MIG slice, SM activity 80% and 31 GB of 40: the slice fits the job.",
            (),
            options={
                "gpu_utilization": None,
                "sm_active": around(0.8, 0.04, 0, 1),
                "memory_used_mib": 31_000.0,
                "memory_total_mib": 40_192.0,
                "gpu_model": A100,
                "compute_capability": [8, 0],
            },
        ),
        Recipe(
            "op-multi-gpu-pod-light",
            op,
            "One worker on 8 GPUs at 12% SM activity and 7 GB each: a share serves one GPU per worker, so no "
            "OversizedGPU; the small batch (32, 9% of memory) is SmallBatch.",
            (K.SMALL_BATCH,),
            options={
                **LIGHT,
                "memory_used_mib": 7_000.0,
                "batch_size": 32,
                "gpus": 8,
                "job": {"gpus": 8, "processes": 8, "cpu": "64"},
            },
        ),
        Recipe(
            "op-oversized-bursty",
            op,
            "SM activity 8% but every fourth sample at 90% (bursts of real work) and 7 GB: the bursts need the "
            "GPU, so not oversized; utilization is low in 75% of samples, short of the 90% that makes it "
            "sustained (README), so not SmallBatch either.",
            (),
            options={
                "gpu_utilization": bursts(around(14, 3), around(92, 3), 4),
                "sm_active": bursts(around(0.08, 0.01, 0, 1), around(0.9, 0.02, 0, 1), 4),
                "memory_used_mib": 7_000.0,
                "batch_size": 32,
            },
        ),
        # Throttling.
        Recipe(
            "op-throttling",
            op,
            "Worker 1 of 4 reports hardware thermal slowdown in 95% of samples: its node's cooling.",
            (K.THROTTLING,),
            options={
                "workers": 4,
                "clock_slowdowns": {
                    w: bursts(constant(THERMAL), constant(0), 20) if w == 1 else constant(0) for w in range(4)
                },
            },
        ),
        Recipe(
            "op-throttling-single",
            op,
            "One GPU whose hardware power brake holds its clocks in every sample.",
            (K.THROTTLING,),
            options={"clock_slowdowns": {0: constant(0x80)}},
        ),
        Recipe(
            "op-power-cap-busy",
            op,
            "A fully busy GPU at its software power cap in every sample: how such a GPU runs, not a fault.",
            (),
            options={"gpu_utilization": around(98, 1), "clock_slowdowns": {0: constant(POWER_CAP)}},
        ),
        Recipe(
            "op-throttling-brief",
            op,
            "Thermal slowdown in one sample of five on one worker: a passing peak, not sustained.",
            (),
            options={"workers": 2, "clock_slowdowns": {0: bursts(constant(0), constant(THERMAL), 5), 1: constant(0)}},
        ),
        # CommunicationBound.
        Recipe(
            "op-communication-bound",
            op,
            "4 nodes at 30% SM activity, 2% input wait, 9 GB/s each way over PCIe: the all-reduce holds the steps.",
            (K.COMMUNICATION_BOUND,),
            options={
                "workers": 4,
                "sm_active": around(0.3, 0.03, 0, 1),
                "gpu_utilization": around(70, 5),
                "pcie_tx_bytes_per_second": 9.1e9,
                "pcie_rx_bytes_per_second": 8.7e9,
            },
        ),
        Recipe(
            "op-communication-bound-8",
            op,
            "8 workers at 25% SM activity with symmetric 6 GB/s PCIe traffic and no input wait: communication-bound.",
            (K.COMMUNICATION_BOUND,),
            options={
                "workers": 8,
                "sm_active": around(0.25, 0.03, 0, 1),
                "gpu_utilization": around(65, 5),
                "pcie_tx_bytes_per_second": 6.0e9,
                "pcie_rx_bytes_per_second": 6.4e9,
            },
        ),
        Recipe(
            "op-communication-bound-no-profiling",
            op,
            "4 workers without SM activity (no DCGM profiling): utilization 35%, input wait 2%, 7 GB/s each way "
            "over PCIe: communication-bound, read from utilization.",
            (K.COMMUNICATION_BOUND,),
            options={
                "workers": 4,
                "sm_active": None,
                "tensor_activity": None,
                "gpu_utilization": around(35, 4),
                "pcie_tx_bytes_per_second": 7.2e9,
                "pcie_rx_bytes_per_second": 7.0e9,
            },
        ),
        Recipe(
            "op-pcie-busy-compute-bound",
            op,
            "4 workers exchanging 9 GB/s each way but at 80% SM activity: the exchange overlaps the compute.",
            (),
            options={
                "workers": 4,
                "sm_active": around(0.8, 0.03, 0, 1),
                "pcie_tx_bytes_per_second": 9e9,
                "pcie_rx_bytes_per_second": 9.2e9,
            },
        ),
        Recipe(
            "op-pcie-one-way",
            op,
            "4 workers at 35% SM activity whose GPUs receive 7 GB/s but send 0.3: host-to-device loading, not "
            "collectives; nothing the series explain.",
            (),
            options={
                "workers": 4,
                "sm_active": around(0.35, 0.03, 0, 1),
                "gpu_utilization": around(75, 5),
                "pcie_tx_bytes_per_second": 0.3e9,
                "pcie_rx_bytes_per_second": 7e9,
            },
        ),
        Recipe(
            "op-pcie-single-worker",
            op,
            "One worker at 30% SM activity with symmetric PCIe traffic: no collective between nodes to blame.",
            (),
            options={
                "sm_active": around(0.3, 0.03, 0, 1),
                "gpu_utilization": around(70, 5),
                "pcie_tx_bytes_per_second": 5e9,
                "pcie_rx_bytes_per_second": 5e9,
            },
        ),
        # gpuwise run reports: the local path.
        Recipe("local-healthy", local, "A busy, well-fed bf16 run on an H100: nothing to find.", ()),
        Recipe(
            "local-input-bound",
            local,
            "60% of each step waits for a one-process DataLoader at 35% utilization.",
            (K.INPUT_BOUND,),
            options={"wait": around(0.6, 0.05, 0, 1), "util": around(35, 5), "num_workers": 0, "pin_memory": False},
        ),
        Recipe(
            "local-input-bound-cpu-only",
            local,
            "A CPU-only run (no GPU sampled) waiting for input 55% of each step: the wait is measured by the steps.",
            (K.INPUT_BOUND,),
            options={"wait": around(0.55, 0.05, 0, 1), "gpu": False, "num_workers": 0, "pin_memory": False},
        ),
        Recipe(
            "local-input-bound-memory-headroom",
            local,
            "Starved for input at batch 16 with 9% of GPU memory used: input first, not SmallBatch.",
            (K.INPUT_BOUND,),
            options={
                "wait": around(0.5, 0.05, 0, 1),
                "util": around(30, 5),
                "num_workers": 0,
                "pin_memory": False,
                "batch_size": 16,
                "fb_used": 7_500.0,
            },
        ),
        Recipe(
            "local-warm-up-then-healthy",
            local,
            "The first 5 steps are 6x longer and all input wait (compilation, the first prefetch); then healthy.",
            (),
            options={"warm_up_factor": 6.0, "warm_up_wait": 0.9},
        ),
        Recipe(
            "local-bursty-input",
            local,
            "Every 25th step waits 70% for a new shard, the rest 3%: bursty but healthy.",
            (),
            options={"wait": bursts(around(0.03, 0.01, 0, 1), around(0.7, 0.05, 0, 1), 25)},
        ),
        Recipe(
            "local-short-starved",
            local,
            "Starved for input but only 18 steps: too short to judge (20 after the warm-up needed).",
            (),
            options={"steps": 18, "wait": around(0.6, 0.05, 0, 1), "util": around(35, 5), "num_workers": 0},
        ),
        Recipe(
            "local-fp32-hopper",
            local,
            "Compute-bound fp32 on an H100, autocast off, tensor cores 1% busy.",
            (K.NO_MIXED_PRECISION,),
            options={"autocast": False, "tensor": 0.01, "util": around(97, 1.5)},
        ),
        Recipe(
            "local-fp32-two-gpus",
            local,
            "Two ranks on two A100s in fp32 (no tensor activity measured): NoMixedPrecision.",
            (K.NO_MIXED_PRECISION,),
            options={"ranks": 2, "autocast": False, "model": A100, "capability": 8.0, "fb_total": A100_MIB},
        ),
        Recipe(
            "local-bf16-two-gpus",
            local,
            "Two ranks on two H100s in bf16, busy: a multi-GPU run with nothing to find.",
            (),
            options={"ranks": 2, "tensor": 0.5},
        ),
        Recipe(
            "local-fp32-pascal",
            local,
            "fp32 on a P100 (6.0): no tensor cores to use.",
            (),
            options={
                "autocast": False,
                "model": "Tesla P100-PCIE-16GB",
                "capability": 6.0,
                "fb_total": 16_280.0,
                "fb_used": 12_000.0,
            },
        ),
        Recipe(
            "local-small-batch",
            local,
            "Batch 8 at 40% utilization with 10% of GPU memory used, input keeping up: a larger batch fits.",
            (K.SMALL_BATCH,),
            options={"batch_size": 8, "util": around(40, 5), "sm_active": around(0.37, 0.03, 0, 1), "fb_used": 8_200.0},
        ),
        Recipe(
            "local-oversized",
            local,
            "A small model at batch 32: SM activity 8%, 5 GB of 80. Low memory and low utilization: OversizedGPU "
            "and, by its definition, SmallBatch.",
            (K.OVERSIZED_GPU, K.SMALL_BATCH),
            options={
                "batch_size": 32,
                "util": around(13, 3),
                "sm_active": around(0.08, 0.01, 0, 1),
                "fb_used": 5_000.0,
            },
        ),
        Recipe(
            "local-throttling",
            local,
            "The GPU reports hardware thermal slowdown in every sample while it trains.",
            (K.THROTTLING,),
            options={"clocks": {0: constant(THERMAL)}},
        ),
        Recipe(
            "local-power-cap",
            local,
            "A busy GPU at its software power cap throughout: normal, not throttling.",
            (),
            options={"clocks": {0: constant(POWER_CAP)}, "util": around(98, 1)},
        ),
    ]


def document(recipe: Recipe) -> dict[str, Any]:
    rng = random.Random(recipe.name)  # a seed of its own: adding a scenario changes no other
    return local_report(recipe, rng) if recipe.path == "local" else operator_document(recipe, rng)


def render(recipe: Recipe) -> str:
    return _json(document(recipe)) + "\n"


def _json(value: Any, indent: str = "") -> str:
    """JSON with what fits a line on one line: a step or trace record a line, not a line a field
    (a report's `indent=1` layout is three times the size and no easier to review)."""
    flat = json.dumps(value)
    scalars = isinstance(value, list) and not any(isinstance(item, dict | list) for item in value)
    if len(flat) <= 160 or scalars or not isinstance(value, dict | list) or not value:
        return flat  # a series of numbers is one line, however long
    inner = indent + " "
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(key)}: {_json(item, inner)}" for key, item in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    return "[\n" + ",\n".join(f"{inner}{_json(item, inner)}" for item in value) + f"\n{indent}]"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a file differs from what the recipes make")
    parser.add_argument("--out", type=Path, default=SCENARIOS)
    args = parser.parse_args(argv)
    wanted = {f"{recipe.name}.json": render(recipe) for recipe in recipes()}
    present = {path.name for path in args.out.glob("*.json")} if args.out.is_dir() else set()
    if args.check:
        stale = sorted(
            name
            for name, text in wanted.items()
            if not (args.out / name).is_file() or (args.out / name).read_text() != text
        )
        stale += sorted(present - wanted.keys())
        for name in stale:
            print(f"{args.out / name}: differs from bench/diagnosis/generate.py", file=sys.stderr)
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name in present - wanted.keys():
        (args.out / name).unlink()
    for name, text in wanted.items():
        (args.out / name).write_text(text)
    print(f"{len(wanted)} scenarios in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
