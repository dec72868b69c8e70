"""What a GPU model holds and how fast it computes, as NVIDIA's datasheets state it.

Read where a job may move to another GPU model (Reschedule to a smaller GPU class, from the
`OversizedGPU` finding): the memory decides whether the job fits, the three peak rates bound how
much longer its GPU work may take there. Peaks are the datasheets' figures for the form factor
NVML names (SXM and PCIe differ); tensor-core figures are dense (half the "with sparsity" ones),
fp16/bf16 (fp16 where the GPU has no bf16: T4, V100). Memory is the datasheet's, in decimal GB,
which is less than NVML's total of every model here (an L4's 24 GB is 22,888 MiB, NVML reports
23,034 MiB): a fit judged on it errs on the safe side.

Sources, each the NVIDIA datasheet of the model: H200 (SXM and NVL), H100 (SXM, PCIe, NVL),
A100 (40GB and 80GB, SXM4 and PCIe), A30, A40, A10, L40S, L40, L4, T4, V100 (SXM2 and PCIe).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Final

from gpuwise.hardware.model_names import model_key

MIB_PER_GB: Final = 1000**3 / 2**20
# The node label NVIDIA's GPU feature discovery puts a node's GPU model in: NVML's name, with dashes.
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"


@dataclass(frozen=True)
class GpuSpec:
    model: str  # NVML's product name, e.g. "NVIDIA L4" (the `nvidia.com/gpu.product` label has dashes)
    memory_gb: float
    memory_bandwidth_gbps: float  # GB/s
    fp32_tflops: float
    tensor_tflops: float  # dense fp16/bf16 on tensor cores
    aliases: tuple[str, ...] = ()  # other names for it: short ones ("L4"), other NVML spellings

    @property
    def memory_mib(self) -> float:
        return self.memory_gb * MIB_PER_GB

    @property
    def names(self) -> tuple[str, ...]:
        return (self.model, *self.aliases)


SPECS: Final[tuple[GpuSpec, ...]] = (
    GpuSpec("NVIDIA H200", 141, 4800, 67, 989, ("H200", "H200-141GB", "NVIDIA H200 SXM")),
    GpuSpec("NVIDIA H200 NVL", 141, 4800, 60, 835, ("H200 NVL",)),
    GpuSpec("NVIDIA H100 80GB HBM3", 80, 3350, 67, 989, ("H100", "H100-80GB", "H100 SXM")),
    GpuSpec("NVIDIA H100 PCIe", 80, 2000, 51, 756, ("H100 PCIe",)),
    GpuSpec("NVIDIA H100 NVL", 94, 3900, 60, 835, ("H100 NVL", "H100-94GB")),
    GpuSpec("NVIDIA A100-SXM4-80GB", 80, 2039, 19.5, 312, ("A100-80GB",)),
    GpuSpec("NVIDIA A100 80GB PCIe", 80, 1935, 19.5, 312, ("NVIDIA A100-PCIE-80GB",)),
    GpuSpec("NVIDIA A100-SXM4-40GB", 40, 1555, 19.5, 312, ("A100-40GB",)),
    GpuSpec("NVIDIA A100-PCIE-40GB", 40, 1555, 19.5, 312),
    GpuSpec("NVIDIA A30", 24, 933, 10.3, 165, ("A30",)),
    GpuSpec("NVIDIA A40", 48, 696, 37.4, 149.7, ("A40",)),
    GpuSpec("NVIDIA A10", 24, 600, 31.2, 125, ("A10",)),
    GpuSpec("NVIDIA L40S", 48, 864, 91.6, 362, ("L40S",)),
    GpuSpec("NVIDIA L40", 48, 864, 90.5, 181, ("L40",)),
    GpuSpec("NVIDIA L4", 24, 300, 30.3, 121, ("L4",)),
    GpuSpec("Tesla T4", 16, 320, 8.1, 65, ("T4",)),
    GpuSpec("Tesla V100-SXM2-32GB", 32, 900, 15.7, 125),
    GpuSpec("Tesla V100-SXM2-16GB", 16, 900, 15.7, 125),
    GpuSpec("Tesla V100-PCIE-32GB", 32, 900, 14, 112),
    GpuSpec("Tesla V100-PCIE-16GB", 16, 900, 14, 112),
)


_BY_NAME: Final = {model_key(name): spec for spec in SPECS for name in spec.names}


@functools.cache  # a handful of models, asked for by every oversized job each cycle
def gpu_spec(name: str | None) -> GpuSpec | None:
    """The datasheet figures of a GPU model by its NVML name, its `nvidia.com/gpu.product` label
    value or a short name ("L4"); None for a model not listed."""
    return _BY_NAME.get(model_key(name)) if name else None


def known_models() -> str:
    """The models `gpu_spec` knows, for a message that says what to write instead."""
    return ", ".join(spec.model for spec in SPECS)


def work_slowdown(current: GpuSpec, target: GpuSpec) -> tuple[float, str]:
    """At most how many times longer the GPU's own work takes on `target` than on `current`, and
    which peak says so: the largest ratio of fp32, tensor-core and memory-bandwidth peaks (never
    under 1: a move is not assumed to make anything faster).

    Conservative on purpose: a kernel bound by one of the three takes at most that ratio longer,
    and the job's kernels are not known to be bound by one rather than another. Not modelled:
    caches, clocks of latency-bound kernels, interconnects; a move is measured after it is made.
    """
    ratios = {
        "memory bandwidth": current.memory_bandwidth_gbps / target.memory_bandwidth_gbps,
        "fp32": current.fp32_tflops / target.fp32_tflops,
        "tensor-core": current.tensor_tflops / target.tensor_tflops,
    }
    basis = max(ratios, key=lambda name: ratios[name])
    return max(1.0, ratios[basis]), basis
