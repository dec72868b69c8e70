"""A GPU's CUDA compute capability from the model name NVML reports, for series that carry no other.

What decides whether a GPU has tensor cores worth mixed precision (`NoMixedPrecision`).
"""

from __future__ import annotations

import functools
import re
from typing import Final

# Compute capability by GPU family, from the modelName label NVML reports (e.g. "NVIDIA H100 80GB HBM3").
# NVML writes "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB": match a token.
COMPUTE_CAPABILITY: Final[dict[str, tuple[int, int]]] = {
    "B200": (10, 0), "GB200": (10, 0), "H200": (9, 0), "H100": (9, 0), "H800": (9, 0), "GH200": (9, 0),
    "L40S": (8, 9), "L40": (8, 9), "L4": (8, 9), "A100": (8, 0), "A800": (8, 0), "A30": (8, 0),
    "A40": (8, 6), "A10": (8, 6), "A10G": (8, 6), "T4": (7, 5), "V100": (7, 0), "P100": (6, 0),
}  # fmt: skip


@functools.cache  # a handful of models, asked for by every job each cycle
def compute_capability(model: str | None) -> tuple[int, int] | None:
    """A GPU's CUDA compute capability from its NVML model name; None for a model not listed."""
    tokens = re.split(r"[^A-Za-z0-9]+", model or "")
    return next((COMPUTE_CAPABILITY[t] for t in tokens if t in COMPUTE_CAPABILITY), None)
