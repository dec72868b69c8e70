"""The order pods arrive in, as the reference simulator of Weng et al. (ATC'23) builds it.

Timestamps are ignored and pods never leave: the experiment asks how much of the cluster a
policy can fill before fragmentation stops it, not how it copes with churn. Per seed the trace's
pods are shuffled, then pods drawn uniformly with replacement from the trace are appended until
the next one would take the arrived GPU request past ``ratio`` times the cluster's GPU capacity
(or, for a trace that already asks for more, random pods are left out until it does not).
"""

from __future__ import annotations

import numpy as np

from gpuwise.decide.packing.cluster import IntArray, Pods

DEFAULT_RATIO = 1.3


def arrival_order(pods: Pods, capacity_milli: int, rng: np.random.Generator, ratio: float = DEFAULT_RATIO) -> IntArray:
    """Indices into ``pods`` in arrival order; the same pod may arrive more than once."""
    if not len(pods):
        raise ValueError("no pods to arrive")
    if ratio <= 0:
        raise ValueError(f"ratio must be positive, got {ratio}")
    demand = pods.total_gpu_milli
    if not demand.any():
        raise ValueError("no pod asks for a GPU, so the GPU demand can never reach the target")
    target = ratio * capacity_milli
    order = rng.permutation(len(pods))
    total = int(demand.sum())
    if total > target:
        return _trimmed(order, demand, total - target, rng)
    extra: list[IntArray] = []
    while True:
        draws = rng.integers(len(pods), size=max(64, len(pods) // 4))
        running = total + np.cumsum(demand[draws])
        over = np.flatnonzero(running > target)
        if len(over):
            extra.append(draws[: over[0]])
            return np.concatenate([order, *extra])
        extra.append(draws)
        total = int(running[-1])


def _trimmed(order: IntArray, demand: IntArray, excess: float, rng: np.random.Generator) -> IntArray:
    """``order`` without random pods, removed one at a time until ``excess`` GPU milli is gone."""
    removal = rng.permutation(len(order))
    removed = np.cumsum(demand[order[removal]])
    count = int(np.searchsorted(removed, excess - 1e-9)) + 1
    keep = np.ones(len(order), dtype=np.bool_)
    keep[removal[:count]] = False
    result: IntArray = order[keep]
    return result
