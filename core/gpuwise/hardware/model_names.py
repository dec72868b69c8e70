"""One spelling of a GPU model's name, whoever wrote it.

NVML says "NVIDIA A100-SXM4-80GB", GPU feature discovery's ``nvidia.com/gpu.product`` label says
"NVIDIA-A100-SXM4-80GB" (a label value holds no spaces), and people write "a100-sxm4-80gb". Every
table of models here is looked up by :func:`model_key`, so the three find the same entry.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[A-Z0-9]+")


def model_key(name: str) -> str:
    """``name`` in upper case, its letters and digits in runs joined by single spaces:
    "NVIDIA-A100-SXM4-80GB" and "nvidia a100 sxm4_80gb" are both "NVIDIA A100 SXM4 80GB"."""
    return " ".join(_WORD.findall(name.upper()))
