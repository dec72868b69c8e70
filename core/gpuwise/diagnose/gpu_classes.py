"""Which of the platform's GPU classes a job could move to, from what it measured.

A platform declares its GPU classes (the operator's `actions.gpuClasses`: a name, the node
selector of its nodes, its GPU model); `OversizedGPU` asks here for the smallest class that holds
a job it found oversized, for a job that lets gpuwise Reschedule it. A class fits when:

- it is smaller: less memory than the GPU the job has now (by the datasheets);
- the job's peak memory plus its margin fits in the class's memory;
- the job's steps would be at most `max_slowdown` longer, by a conservative bound: the GPU is
  busy `busy` of the time (its time-busy utilization), that work takes at most `work_slowdown`
  times longer on the class's GPU, and the rest of the step (the host, waiting) none longer.
  So a step of time 1 takes at most 1 + busy × (ratio − 1).

Among those that fit, the one with the least memory, then the slowest: the one whose GPUs the
fewest other jobs could use better.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuwise.hardware.gpu_specs import GpuSpec, work_slowdown


@dataclass(frozen=True)
class SizedGpuClass:
    """A GPU class of the platform, with its GPU's datasheet figures."""

    name: str
    spec: GpuSpec
    node_selector: Mapping[str, str] = field(default_factory=dict)  # to say where it is, in the message


@dataclass(frozen=True)
class ClassFit:
    """A class the job fits, and the bound on its steps there."""

    gpu_class: SizedGpuClass
    step_slowdown: float  # steps at most this many times longer
    work_ratio: float  # the GPU's work at most this many times longer...
    basis: str  # ...by this peak (`work_slowdown`)


def smallest_fitting(
    current: GpuSpec,
    classes: Sequence[SizedGpuClass],
    memory_mib: float,
    busy: float,
    max_slowdown: float,
) -> ClassFit | None:
    """The smallest of `classes` smaller than `current` that holds `memory_mib` with the steps at
    most `max_slowdown` longer (see the module docstring); None when none does."""
    fits = []
    for gpu_class in classes:
        spec = gpu_class.spec
        if spec.memory_gb >= current.memory_gb or memory_mib > spec.memory_mib:
            continue
        ratio, basis = work_slowdown(current, spec)
        step = 1 + min(max(busy, 0.0), 1.0) * (ratio - 1)
        if step <= 1 + max_slowdown:
            fits.append(ClassFit(gpu_class, step, ratio, basis))
    return min(fits, key=lambda f: (f.gpu_class.spec.memory_gb, -f.work_ratio, f.gpu_class.name), default=None)
