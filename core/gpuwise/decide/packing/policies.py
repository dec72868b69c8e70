"""The baseline placement policies: random, best fit and FGD.

They reproduce the baselines of Weng et al. (USENIX ATC'23) as their open simulator runs them
inside kube-scheduler:

- Node scores are integers 0-100 (the scheduler framework's score type), so nearby scores tie.
- The best-scoring node wins; ties go to the node that comes first in a fixed, per-run random
  order of the nodes. The reference simulator gives nodes random name prefixes per run and its
  scheduler (a fork of kube-scheduler 1.20.5) takes the first of the best nodes; uniform random
  tie-breaking, as in stock kube-scheduler, reproduces best fit but costs FGD five points on
  the default trace, because FGD then scatters whole-GPU pods instead of consolidating them.

A policy is a callable ``(state, request, rng) -> Placement | None``; ``None`` means the pod fits
nowhere. Policies never change the state themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gpuwise.decide.packing.cluster import MILLI, BoolArray, FloatArray, IntArray, Placement, PodRequest, Pods
from gpuwise.decide.packing.fit import Candidates, candidates, fits, placement
from gpuwise.decide.packing.fragmentation import FragmentationIndex, NextPodFragmentation, TargetWorkload
from gpuwise.decide.packing.state import ClusterState

MAX_NODE_SCORE = 100
"""kube-scheduler's ``framework.MaxNodeScore``."""

BESTFIT_CPU_SPEC = 128_000
BESTFIT_GPU_SPEC = 8 * MILLI
"""The largest node the reference BestFit normalizes free resources by (milli-CPU, milli-GPU)."""


class Policy(Protocol):
    name: str

    def __call__(self, state: ClusterState, request: PodRequest, rng: np.random.Generator) -> Placement | None: ...


@dataclass(frozen=True)
class PlacementContext:
    """What policies are built from: the state they will be asked about, the workload to expect,
    the order in which nodes win ties (a fixed random ranking per run, lower wins), and every
    shape expected to arrive, rare ones too (``None``: the workload's shapes)."""

    state: ClusterState
    workload: TargetWorkload
    node_rank: IntArray
    arrivals: TargetWorkload | None = None

    @classmethod
    def create(cls, state: ClusterState, workload: TargetWorkload, rng: np.random.Generator) -> PlacementContext:
        return cls(state, workload, rng.permutation(len(state.nodes)))

    @classmethod
    def for_pods(
        cls, state: ClusterState, pods: Pods, node_rank: IntArray, workload: TargetWorkload | None = None
    ) -> PlacementContext:
        """The context for a cluster that sees ``pods``: their common shapes as the target workload
        (unless ``workload`` is given), and every shape of theirs to arrive."""
        workload = workload or TargetWorkload.from_pods(pods)
        return cls(state, workload, node_rank, TargetWorkload.from_pods(pods, coverage=1.0))

    @property
    def mix(self) -> TargetWorkload:
        """The shapes expected to arrive, by how often they do."""
        return self.arrivals if self.arrivals is not None else self.workload


def best_node(cands: Candidates, score: FloatArray, node_rank: IntArray) -> BoolArray:
    """Mask of the candidates on the best node: the highest node score (a node scores its best
    candidate), ties going to the node ranked first."""
    tied = cands.node[score == score.max()]
    node = tied[np.argmin(node_rank[tied])]
    mask: BoolArray = cands.node == node
    return mask


def best_candidate(cands: Candidates, score: FloatArray, node_rank: IntArray) -> int:
    """Index of the chosen candidate: on the :func:`best_node`, its best-scoring GPU, the lowest
    GPU index among equals (what the reference's GPU selection does)."""
    on_node = best_node(cands, score, node_rank)
    return cands.first(on_node & (score == score[on_node].max()))


class RandomPolicy:
    """Any node the pod fits, uniformly; on it, any GPU with room, uniformly."""

    name = "random"

    def __init__(self, context: PlacementContext) -> None:
        del context

    def __call__(self, state: ClusterState, request: PodRequest, rng: np.random.Generator) -> Placement | None:
        nodes = np.flatnonzero(fits(state, request))
        if not len(nodes):
            return None
        node = int(rng.choice(nodes))
        if not request.shares_gpu:
            return placement(state, request, node)
        gpu = int(rng.choice(np.flatnonzero(state.gpu_free[node] >= request.gpu_milli)))
        return Placement(node, (gpu,))


class BestFitPolicy:
    """The node left with the least free CPU and GPU (each as a share of the largest node, half
    weight each); on it, the GPU with the least room that still fits."""

    name = "bestfit"

    def __init__(self, context: PlacementContext) -> None:
        self.node_rank = context.node_rank

    def __call__(self, state: ClusterState, request: PodRequest, rng: np.random.Generator) -> Placement | None:
        cands = candidates(state, request)
        if not len(cands):
            return None
        gpu_left = state.gpu_free_total[cands.node] - request.total_gpu_milli
        leftover = 0.5 * cands.cpu_free / BESTFIT_CPU_SPEC + 0.5 * gpu_left / BESTFIT_GPU_SPEC
        on_node = best_node(cands, np.trunc((1.0 - leftover) * MAX_NODE_SCORE), self.node_rank)
        chosen = cands.first(on_node & (cands.gpu_before == cands.gpu_before[on_node].min()))
        return placement(state, request, int(cands.node[chosen]), int(cands.gpu[chosen]))


class FragmentationGradientPolicy:
    """FGD: the node and GPU whose fragmentation grows least, scored as the reference does:
    ``int(100 * sigmoid(-growth / 1000))``."""

    name = "fgd"

    def __init__(self, context: PlacementContext) -> None:
        self.fragmentation = FragmentationIndex(NextPodFragmentation(context.workload), context.state)
        self.node_rank = context.node_rank

    def __call__(self, state: ClusterState, request: PodRequest, rng: np.random.Generator) -> Placement | None:
        cands = candidates(state, request)
        if not len(cands):
            return None
        growth = self.fragmentation.increase(cands)
        chosen = best_candidate(cands, np.trunc(MAX_NODE_SCORE / (1.0 + np.exp(growth / MILLI))), self.node_rank)
        return placement(state, request, int(cands.node[chosen]), int(cands.gpu[chosen]))
