"""A GPU's CUDA compute capability: what NVML reported, else what its model name says.

What decides whether a GPU has tensor cores worth mixed precision (`NoMixedPrecision`). The
sidecar reads it from NVML (`nvmlDeviceGetCudaComputeCapability`) and exports it as
`gpuwise_gpu_compute_capability`, major.minor as one number; the operator and `gpuwise run` both
take that where it exists (`capability`), and the model name's table entry where it does not: a
series from dcgm-exporter, an older sidecar, or a report written before it was exported.
"""

from __future__ import annotations

import functools
import math
from typing import Final

from gpuwise.hardware.model_names import model_key

# Compute capability by GPU family, from the modelName label NVML reports (e.g. "NVIDIA H100 80GB HBM3").
# NVML writes "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB": match a token.
COMPUTE_CAPABILITY: Final[dict[str, tuple[int, int]]] = {
    "B200": (10, 0), "GB200": (10, 0), "H200": (9, 0), "H100": (9, 0), "H800": (9, 0), "GH200": (9, 0),
    "L40S": (8, 9), "L40": (8, 9), "L4": (8, 9), "A100": (8, 0), "A800": (8, 0), "A30": (8, 0),
    "A40": (8, 6), "A10": (8, 6), "A10G": (8, 6), "T4": (7, 5), "V100": (7, 0), "P100": (6, 0),
}  # fmt: skip


# Dense half-precision (fp16/bf16) tensor-core math over plain fp32 math, by compute capability,
# from NVIDIA's datasheets: V100 125/15.7 TFLOPS, T4 65/8.1, A100 312/19.5, A10 125/31.2 (A40 and
# L4/L40S alike, about 4), H100 SXM 989/67. An fp32 model moved to autocast gains at most this on
# the share of the time its GPU computes (`amp_speedup_bound`).
TENSOR_CORE_GAIN: Final[dict[tuple[int, int], float]] = {
    (7, 0): 8.0, (7, 5): 8.0, (8, 0): 16.0, (8, 6): 4.0, (8, 9): 4.0, (9, 0): 15.0,
}  # fmt: skip


def tensor_core_gain(capability: tuple[int, int]) -> float | None:
    """The capability's tensor-core gain over fp32 (`TENSOR_CORE_GAIN`); a newer capability than the
    table takes the last one below it (the smaller gain the table can vouch for); None before tensor cores."""
    known = [gain for cc, gain in sorted(TENSOR_CORE_GAIN.items()) if cc <= capability]
    return known[-1] if known else None


def amp_speedup_bound(gain: float, busy: float) -> float:
    """At most how many times faster steps get with autocast (Amdahl): the GPU computes `busy`
    (0-1) of the time and that part gets at most `gain`; the rest (input, the host) nothing."""
    busy = min(max(busy, 0.0), 1.0)
    return 1 / ((1 - busy) + busy / gain)


@functools.cache  # a handful of models, asked for by every job each cycle
def compute_capability(model: str | None) -> tuple[int, int] | None:
    """A GPU's CUDA compute capability from its NVML model name; None for a model not listed."""
    tokens = model_key(model or "").split()
    return next((COMPUTE_CAPABILITY[t] for t in tokens if t in COMPUTE_CAPABILITY), None)


def as_gauge(capability: tuple[int, int]) -> float:
    """The exported value: major.minor as one number (9.0, 8.9); every minor version is below 10."""
    major, minor = capability
    return major + minor / 10


def from_gauge(value: float | None) -> tuple[int, int] | None:
    """(major, minor) from the exported value; None where there is none or it is not one."""
    if value is None or not math.isfinite(value) or value < 1:
        return None
    major, minor = divmod(round(value * 10), 10)
    return major, minor


def capability(reported: float | None, model: str | None) -> tuple[int, int] | None:
    """What NVML reported (`from_gauge`) where it did; else the model name's table entry."""
    return from_gauge(reported) or compute_capability(model)
