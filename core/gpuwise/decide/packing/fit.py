"""Where a pod can go: the feasibility rule and the candidate placements every policy scores.

A pod fits a node when its CPU and memory fit, the node's GPU model is one the pod accepts, and
enough GPUs have room: one GPU with ``gpu_milli`` free for a sharing pod, ``num_gpu`` fully free
GPUs for a whole-GPU pod.

Candidates are (node, GPU) pairs, one per *distinct* free amount on a node: two GPUs of a node
with the same free milli lead to the same node state, so scoring both would only waste time. Of
equal GPUs the lowest index is used, as a device plugin would. Each candidate also says how it
changes the node — which GPUs go from how much free to how much — so that scores can be computed
from per-node summaries plus that change, without copying every node's GPU table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwise.decide.packing.cluster import MILLI, BoolArray, IntArray, Placement, PodRequest
from gpuwise.decide.packing.state import ClusterState

WHOLE_GPUS = -1
"""Candidate ``gpu`` value meaning "the lowest-indexed fully free GPUs", for non-sharing pods."""

_STRICTLY_LOWER = np.tril(np.ones((64, 64), dtype=np.bool_), k=-1)


def fits(state: ClusterState, request: PodRequest) -> BoolArray:
    """Per node: can ``request`` run there now?"""
    ok: BoolArray = (state.cpu_free >= request.cpu_milli) & (state.memory_free >= request.memory_mib)
    if request.num_gpu == 0:
        return ok
    return ok & request.allowed_models[state.nodes.model] & gpu_room(state, request)


def gpu_room(state: ClusterState, request: PodRequest) -> BoolArray:
    """Per node: do enough GPUs have room for ``request`` (CPU, memory and model aside)?"""
    room: BoolArray = np.asarray((state.gpu_free >= request.gpu_milli).sum(axis=1) >= request.num_gpu)
    return room


@dataclass(frozen=True)
class Candidates:
    """The distinct placements of one pod and how each would change its node.

    A placement takes ``gpus_changed`` GPUs of the node from ``gpu_before`` to ``gpu_after`` free
    milli (one GPU for a sharing pod, ``num_gpu`` fully free GPUs for a whole-GPU pod, none for a
    CPU-only pod) and leaves ``cpu_free`` milli-CPU free.
    """

    node: IntArray
    gpu: IntArray
    """The GPU a sharing pod would use, or :data:`WHOLE_GPUS`."""
    cpu_free: IntArray
    gpu_before: IntArray
    gpu_after: IntArray
    gpus_changed: int

    def __len__(self) -> int:
        return len(self.node)

    def first(self, where: BoolArray) -> int:
        """Index of the candidate with the lowest GPU index among ``where`` (all on one node)."""
        chosen = np.flatnonzero(where)
        return int(chosen[np.argmin(self.gpu[chosen])])


def candidates(state: ClusterState, request: PodRequest, among: BoolArray | None = None) -> Candidates:
    """Every distinct way to place ``request`` now, optionally only on the nodes ``among``."""
    ok = fits(state, request)
    if among is not None:
        ok &= among
    nodes = np.flatnonzero(ok)
    if request.shares_gpu:
        free = state.gpu_free[nodes]
        width = free.shape[1]
        earlier_twin = ((free[:, :, None] == free[:, None, :]) & _STRICTLY_LOWER[:width, :width]).any(axis=2)
        rows, gpus = np.nonzero((free >= request.gpu_milli) & ~earlier_twin)
        before = free[rows, gpus]
        return Candidates(
            node=nodes[rows],
            gpu=gpus.astype(np.int64),
            cpu_free=state.cpu_free[nodes[rows]] - request.cpu_milli,
            gpu_before=before,
            gpu_after=before - request.gpu_milli,
            gpus_changed=1,
        )
    size = len(nodes)
    return Candidates(
        node=nodes,
        gpu=np.full(size, WHOLE_GPUS, dtype=np.int64),
        cpu_free=state.cpu_free[nodes] - request.cpu_milli,
        gpu_before=np.full(size, MILLI, dtype=np.int64),
        gpu_after=np.zeros(size, dtype=np.int64),
        gpus_changed=request.num_gpu,
    )


def placement(state: ClusterState, request: PodRequest, node: int, gpu: int = WHOLE_GPUS) -> Placement:
    """The concrete placement of candidate ``(node, gpu)``: which GPU indices the pod gets."""
    if request.num_gpu == 0:
        return Placement(node, ())
    if gpu != WHOLE_GPUS:
        return Placement(node, (gpu,))
    free = np.flatnonzero(state.gpu_free[node] >= request.gpu_milli)
    return Placement(node, tuple(int(g) for g in free[: request.num_gpu]))
