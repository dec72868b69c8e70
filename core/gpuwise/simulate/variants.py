"""Traces the policies were not tuned on: one trace's pods, resampled to another workload mix.

The ATC'23 authors derived their trace family from the default openb trace by changing the share
of the GPU requested by one kind of pod: ``gpushare40`` is a workload where GPU-sharing pods ask
for 40 % of all GPU milli requested, ``multigpu50`` one where multi-GPU pods ask for 50 %
(``gpuspec25``: pods that accept only some GPU models; drawn from a trace that has such pods). The
project has three of those traces; this module makes more of them, so a placement policy can be
scored on mixes it never saw. It keeps the CPU-only pods as they are and draws the GPU pods with
replacement, so many from the kind and the rest from the others that the kind's expected share
of the GPU milli is the one asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np

from gpuwise.decide.packing.cluster import MILLI, BoolArray, Pods

KINDS: Final[dict[str, Callable[[Pods], BoolArray]]] = {
    "gpushare": lambda pods: (pods.num_gpu > 0) & (pods.gpu_milli < MILLI),
    "multigpu": lambda pods: pods.num_gpu > 1,
    "gpuspec": lambda pods: (pods.num_gpu > 0) & ~pods.allowed[pods.spec].all(axis=1),
}
"""The pod kinds whose share of the requested GPU a variant sets."""


class VariantError(ValueError):
    pass


def parse(name: str) -> tuple[str, float]:
    """``gpushare40`` -> ("gpushare", 0.4): a kind and its share, as the trace family names them."""
    for kind in KINDS:
        digits = name.removeprefix(kind)
        if digits != name and digits.isdigit() and 0 < int(digits) < 100:
            return kind, int(digits) / 100
    raise VariantError(f"{name!r} is no trace variant; name one as KIND+PERCENT, KIND one of {', '.join(KINDS)}")


def variant(pods: Pods, kind: str, share: float, seed: int = 0) -> Pods:
    """``pods`` resampled so that pods of ``kind`` ask for ``share`` of the GPU milli, in expectation.

    The result has as many GPU pods as ``pods``; the draw is fixed by ``seed``.
    """
    if kind not in KINDS:
        raise VariantError(f"unknown pod kind {kind!r}; choose one of: {', '.join(KINDS)}")
    if not 0 < share < 1:
        raise VariantError(f"share must be strictly between 0 and 1, got {share}")
    of_kind = KINDS[kind](pods)
    uses_gpu = pods.num_gpu > 0
    inside, outside = np.flatnonzero(of_kind), np.flatnonzero(uses_gpu & ~of_kind)
    if not len(inside) or not len(outside):
        raise VariantError(f"the trace needs GPU pods of kind {kind!r} and others to draw a {kind} variant from")
    demand = pods.total_gpu_milli.astype(np.float64)
    mean_in, mean_out = demand[inside].mean(), demand[outside].mean()
    gpu_pods = int(uses_gpu.sum())
    # k pods of the kind among n: k*mean_in / (k*mean_in + (n-k)*mean_out) = share
    drawn_in = round(share * gpu_pods * mean_out / (mean_in * (1 - share) + share * mean_out))
    drawn_in = min(max(drawn_in, 1), gpu_pods - 1)
    rng = np.random.default_rng(seed)
    rows = np.concatenate(
        [
            np.flatnonzero(~uses_gpu),
            rng.choice(inside, drawn_in, replace=True),
            rng.choice(outside, gpu_pods - drawn_in, replace=True),
        ]
    )
    return pods.take(rows)


def gpu_share(pods: Pods, kind: str) -> float:
    """The share of the requested GPU milli that pods of ``kind`` ask for."""
    demand = pods.total_gpu_milli
    return float(demand[KINDS[kind](pods)].sum() / demand.sum())
