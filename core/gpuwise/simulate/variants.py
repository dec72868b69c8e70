"""Traces the policies were not tuned on: one trace's pods, resampled to another workload mix.

The ATC'23 authors derived their trace family from the default openb trace by changing the share
of one kind of pod: ``gpushare40`` is a workload where GPU-sharing pods ask for 40 % of all GPU
milli requested, ``multigpu50`` one where multi-GPU pods ask for 50 % (``gpuspec25``: pods that
accept only some GPU models; drawn from a trace that has such pods), and ``cpu050`` one where 5.0 %
of the pods ask for no GPU (three digits, per mille, as the family names them). The project has
three of those traces; this module makes more of them, so a placement policy can be scored on
mixes it never saw.

For a GPU kind it keeps the CPU-only pods as they are and draws the GPU pods with replacement, so
many from the kind and the rest from the others that the kind's expected share of the GPU milli is
the one asked for. For ``cpu`` it keeps the GPU pods as they are and draws so many CPU-only pods
that they are that share of the pods: the GPU demand, and so what a policy can allocate, stays the
trace's, and only the CPU that GPU nodes must also serve changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np

from gpuwise.decide.packing.cluster import MILLI, BoolArray, Pods


@dataclass(frozen=True)
class Kind:
    members: Callable[[Pods], BoolArray]
    per_mille: bool = False
    """Whether the name's digits are per mille (``cpu050``) rather than per cent (``gpushare40``)."""


CPU = "cpu"
KINDS: Final[dict[str, Kind]] = {
    "gpushare": Kind(lambda pods: (pods.num_gpu > 0) & (pods.gpu_milli < MILLI)),
    "multigpu": Kind(lambda pods: pods.num_gpu > 1),
    "gpuspec": Kind(lambda pods: (pods.num_gpu > 0) & ~pods.allowed[pods.spec].all(axis=1)),
    CPU: Kind(lambda pods: pods.num_gpu == 0, per_mille=True),
}
"""The pod kinds whose share a variant sets: of the requested GPU, or for ``cpu`` of the pods."""


class VariantError(ValueError):
    pass


def parse(name: str) -> tuple[str, float]:
    """``gpushare40`` -> ("gpushare", 0.4), ``cpu050`` -> ("cpu", 0.05): a kind and its share, as
    the trace family names them (``gpushare100``: every GPU pod shares a GPU)."""
    for kind, spec in KINDS.items():
        digits = name.removeprefix(kind)
        if digits == name or not digits.isdigit():
            continue
        if spec.per_mille and len(digits) == 3 and 0 < int(digits) < 1000:
            return kind, int(digits) / 1000
        if not spec.per_mille and 0 < int(digits) <= 100:
            return kind, int(digits) / 100
    raise VariantError(
        f"{name!r} is no trace variant; name one as KIND+PERCENT, KIND one of {', '.join(k for k in KINDS if k != CPU)}"
        f" (gpushare40: 40 %), or as {CPU}+PER MILLE in three digits ({CPU}050: 5.0 % of the pods ask for no GPU)"
    )


def variant(pods: Pods, kind: str, share: float, seed: int = 0) -> Pods:
    """``pods`` resampled so that pods of ``kind`` have ``share``, in expectation for a GPU kind.

    For a GPU kind the result has as many GPU pods as ``pods``; for ``cpu``, the same GPU pods.
    The draw is fixed by ``seed``.
    """
    if kind not in KINDS:
        raise VariantError(f"unknown pod kind {kind!r}; choose one of: {', '.join(KINDS)}")
    if not 0 < share <= 1 or (share == 1 and kind == CPU):
        raise VariantError(
            f"share must be above 0 and at most 1 (below 1 for {CPU}: some pod must ask for a GPU), got {share}"
        )
    of_kind = KINDS[kind].members(pods)
    uses_gpu = pods.num_gpu > 0
    rng = np.random.default_rng(seed)
    if kind == CPU:
        return _with_cpu_only_share(pods, of_kind, share, rng)
    inside, outside = np.flatnonzero(of_kind), np.flatnonzero(uses_gpu & ~of_kind)
    gpu_pods = int(uses_gpu.sum())
    if share == 1 and len(inside):
        drawn_in = gpu_pods
    elif not len(inside) or not len(outside):
        raise VariantError(f"the trace needs GPU pods of kind {kind!r} and others to draw a {kind} variant from")
    else:
        demand = pods.total_gpu_milli.astype(np.float64)
        mean_in, mean_out = demand[inside].mean(), demand[outside].mean()
        # k pods of the kind among n: k*mean_in / (k*mean_in + (n-k)*mean_out) = share
        drawn_in = round(share * gpu_pods * mean_out / (mean_in * (1 - share) + share * mean_out))
        drawn_in = min(max(drawn_in, 1), gpu_pods - 1)
    rows = np.concatenate(
        [
            np.flatnonzero(~uses_gpu),
            rng.choice(inside, drawn_in, replace=True),
            rng.choice(outside, gpu_pods - drawn_in, replace=True),
        ]
    )
    return pods.take(rows)


def _with_cpu_only_share(pods: Pods, cpu_only: BoolArray, share: float, rng: np.random.Generator) -> Pods:
    inside, outside = np.flatnonzero(cpu_only), np.flatnonzero(~cpu_only)
    if not len(inside) or not len(outside):
        raise VariantError(f"the trace needs CPU-only pods and GPU pods to draw a {CPU} variant from")
    # k CPU-only pods beside the n GPU pods: k / (k + n) = share
    drawn_in = max(round(share * len(outside) / (1 - share)), 1)
    return pods.take(np.concatenate([outside, rng.choice(inside, drawn_in, replace=True)]))


def share(pods: Pods, kind: str) -> float:
    """The share pods of ``kind`` have: of the requested GPU milli, or for ``cpu`` of the pods."""
    members = KINDS[kind].members(pods)
    if kind == CPU:
        return float(members.mean())
    demand = pods.total_gpu_milli
    return float(demand[members].sum() / demand.sum())
