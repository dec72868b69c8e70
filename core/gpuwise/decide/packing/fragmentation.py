"""How much free GPU capacity the workload we expect could not use: fragmentation measures.

Fragmentation is measured against a *target workload*: the most common task shapes (CPU, GPU
count, GPU milli, accepted GPU models) that together make up 95 % of the tasks, weighted by how
often they occur. Memory is not part of a shape, as in the paper below; in the Alibaba trace it
is never the binding resource.

Three measures share the machinery:

- :class:`NextPodFragmentation` is the measure of Weng et al., "Beware of Fragmentation:
  Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC'23, as their
  open simulator (hkust-adsl/kubernetes-scheduler-simulator) computes it. Free milli on a node is
  a fragment for a task if the task cannot run on the node at all (then all of it is), or, if it
  can, the free milli of the GPUs too small for it. It asks "could the *next* pod use this?".
- :class:`FillFragmentation` asks "how much would stay idle if tasks of this shape *kept* coming
  until the node is full?": a node is filled with as many copies of the shape as its GPUs and its
  CPU allow, and what is left over is the fragment. It sees waste the first measure cannot: a
  free GPU is not fully usable by 810-milli tasks (190 milli always remain), and three free GPUs
  with CPU for one more task are two GPUs of waste.
- :class:`TwoHorizonFragmentation` is their mean. The next-pod measure is optimistic about gaps
  (any gap the next task fits is no waste), the fill measure pessimistic (it assumes the node
  fills with copies of one shape); weighing both horizons places better than either alone.

Everything is vectorized over node states. Per node we keep, for each distinct per-GPU milli the
workload asks for (a *level*), the free milli on GPUs below it, the GPUs at or above it and the
copies of it the GPUs can hold. A candidate placement changes one or a few GPUs, so its summary
follows from its node's summary in O(levels), and its fragmentation in O(shapes).
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass

import numpy as np

from gpuwise.decide.packing.cluster import MILLI, BoolArray, FloatArray, IntArray, Pods
from gpuwise.decide.packing.fit import Candidates
from gpuwise.decide.packing.state import ClusterState

DEFAULT_COVERAGE = 0.95


@dataclass(frozen=True)
class TargetWorkload:
    """The task shapes fragmentation is measured against, with their weights (summing to 1)."""

    cpu_milli: IntArray
    num_gpu: IntArray
    gpu_milli: IntArray
    allowed: BoolArray
    """Shape ``(shapes, models)``: GPU models each shape accepts."""
    weight: FloatArray

    @classmethod
    def from_pods(cls, pods: Pods, coverage: float = DEFAULT_COVERAGE) -> TargetWorkload:
        """The most common shapes of ``pods`` covering at least ``coverage`` of them.

        Shapes are ranked by count; equal counts rank the larger shape first, as the reference
        simulator does, so the cut at ``coverage`` is deterministic.
        """
        if not 0 < coverage <= 1:
            raise ValueError(f"coverage must be in (0, 1], got {coverage}")
        if not len(pods):
            raise ValueError("cannot build a target workload from an empty pod list")
        keys = zip(
            pods.cpu_milli.tolist(), pods.gpu_milli.tolist(), pods.num_gpu.tolist(), pods.spec.tolist(), strict=True
        )
        ranked = sorted(Counter(keys).items(), key=lambda item: (item[1], item[0]), reverse=True)
        counts = np.array([count for _, count in ranked], dtype=np.float64)
        keep = int(np.searchsorted(np.cumsum(counts), coverage * len(pods) - 1e-9)) + 1
        shapes = np.array([shape for shape, _ in ranked[:keep]], dtype=np.int64).reshape(-1, 4)
        return cls(
            cpu_milli=shapes[:, 0],
            num_gpu=shapes[:, 2],
            gpu_milli=shapes[:, 1],
            allowed=pods.allowed[shapes[:, 3]],
            weight=counts[:keep] / counts[:keep].sum(),
        )

    def __len__(self) -> int:
        return len(self.weight)

    @property
    def total_gpu_milli(self) -> IntArray:
        """GPU milli each shape asks for in all (``num_gpu * gpu_milli``)."""
        return self.num_gpu * self.gpu_milli

    @property
    def multi_gpu_share(self) -> float:
        """The share of the workload's GPU milli that its multi-GPU shapes ask for."""
        demand = self.weight * self.num_gpu * self.gpu_milli
        total = float(demand.sum())
        return float(demand[self.num_gpu > 1].sum()) / total if total else 0.0


@dataclass(frozen=True)
class Summary:
    """Per node state: what the fragmentation measures need to know about its GPUs, as one
    integer matrix with a row per node state and these columns, for ``L`` levels:

    - ``0``: the free GPU milli of the node (:attr:`idle`);
    - ``1 .. L``: per level, the free milli on GPUs with less free than the level;
    - ``L+1 .. 2L``: per level, the GPUs with at least the level free;
    - ``2L+1 .. 3L``: per level, how many tasks of the level's milli the free GPUs can hold, one
      GPU each.

    One matrix rather than four arrays: a placement on a small cluster scores a handful of
    candidates, so the numpy calls per placement, not their size, are what it costs.
    """

    counts: IntArray

    @property
    def idle(self) -> IntArray:
        return self.counts[:, 0]

    def take(self, rows: IntArray) -> Summary:
        return Summary(self.counts[rows])


@functools.lru_cache(maxsize=16)
def _per_gpu_counts(levels: tuple[int, ...]) -> IntArray:
    """What one GPU with f free milli adds to each column of a :class:`Summary`, a row for each f
    in -1 (no GPU) .. 1000: a table lookup is several times faster than comparing and dividing
    per candidate. Kept per levels: a rehearsal builds a measure per draw and policy, and on a
    cluster of a node or two building this table is a third of its time."""
    level = np.array(levels, dtype=np.int64)
    free = np.arange(-1, MILLI + 1)[:, None]
    gpu_free = np.clip(free, 0, None)
    table: IntArray = np.hstack(
        (gpu_free, np.where(free < level, gpu_free, 0), (free >= level).astype(np.int64), gpu_free // level)
    )
    table.flags.writeable = False
    return table


def _weighted_sum(per_shape: IntArray | FloatArray, weight: FloatArray) -> FloatArray:
    """Per row of ``per_shape``, its sum weighted by ``weight``; a row's result depends on the
    row alone. Not ``per_shape @ weight``: BLAS rounds a row differently alone than among others,
    and a growth is the difference of a node's amount now and after, measured in different
    batches, so a placement that changes nothing would grow by a rounding error of either sign,
    and FGD's integer score tell equal nodes apart by it."""
    result: FloatArray = (per_shape * weight).sum(axis=1)
    return result


class FragmentationMeasure(ABC):
    """A fragmentation measure for one target workload, over arrays of node states."""

    def __init__(self, workload: TargetWorkload) -> None:
        self.workload = workload
        uses_gpu = workload.num_gpu > 0
        levels = np.unique(workload.gpu_milli[uses_gpu]) if uses_gpu.any() else np.ones(1, np.int64)
        self.levels: IntArray = levels
        level: IntArray = np.where(uses_gpu, np.searchsorted(levels, workload.gpu_milli), 0)
        # Per shape, its level's column in a Summary, so a measure reads what it needs in one gather.
        self._below_column: IntArray = 1 + level
        self._fitting_column: IntArray = 1 + len(levels) + level
        self._copies_column: IntArray = 1 + 2 * len(levels) + level
        self._uses_gpu: BoolArray = uses_gpu
        self._any_model = bool(workload.allowed.all())
        self._per_gpu = _per_gpu_counts(tuple(levels.tolist()))

    def summarize(self, gpu_free: IntArray) -> Summary:
        """Summaries of node states given their free milli per GPU, shape ``(nodes, gpus)``."""
        return Summary(self._per_gpu[gpu_free + 1].sum(axis=1))

    def change(self, candidates: Candidates) -> IntArray:
        """How each of ``candidates`` would change its node's :class:`Summary` counts."""
        change: IntArray = self._per_gpu[candidates.gpu_after + 1] - self._per_gpu[candidates.gpu_before + 1]
        return candidates.gpus_changed * change

    def amount(self, summary: Summary, cpu_free: IntArray, model: IntArray) -> FloatArray:
        """Expected fragmented GPU milli of each node state."""
        return self._amount(summary, cpu_free, self._runnable(summary, cpu_free, model))

    def _runnable(self, summary: Summary, cpu_free: IntArray, model: IntArray) -> BoolArray:
        """Per node state and shape: could one task of the shape run there?"""
        w = self.workload
        result: BoolArray = (
            self._uses_gpu & (summary.counts[:, self._fitting_column] >= w.num_gpu) & (cpu_free[:, None] >= w.cpu_milli)
        )
        if not self._any_model:
            result &= w.allowed[:, model].T
        return result

    @abstractmethod
    def _amount(self, summary: Summary, cpu_free: IntArray, runnable: BoolArray) -> FloatArray:
        """:meth:`amount`, given which shapes could run on each node state (the same for every
        measure of a workload, so :class:`TwoHorizonFragmentation` works it out once)."""


class NextPodFragmentation(FragmentationMeasure):
    """FGD's measure: the free milli the next task, drawn from the target workload, could not use."""

    def _amount(self, summary: Summary, cpu_free: IntArray, runnable: BoolArray) -> FloatArray:
        wasted = np.where(runnable, summary.counts[:, self._below_column], summary.idle[:, None])
        return _weighted_sum(wasted, self.workload.weight)


class FillFragmentation(FragmentationMeasure):
    """The free milli left over after filling the node with copies of a target shape, as many
    as its GPUs and CPU allow, averaged over the target workload."""

    def __init__(self, workload: TargetWorkload) -> None:
        super().__init__(workload)
        self._gpus_per_task = np.maximum(workload.num_gpu, 1).astype(np.float64)
        self._cpu_per_task = np.where(workload.cpu_milli > 0, workload.cpu_milli, 1).astype(np.float64)
        self._cpu_bound = workload.cpu_milli > 0
        self._usable_weight = workload.weight * workload.num_gpu * workload.gpu_milli

    def _amount(self, summary: Summary, cpu_free: IntArray, runnable: BoolArray) -> FloatArray:
        # Exact for integers below 2**53: true division is correctly rounded, and much faster
        # than numpy's integer floor division.
        by_gpu = np.floor(summary.counts[:, self._copies_column] / self._gpus_per_task)
        by_cpu = np.where(self._cpu_bound, np.floor(cpu_free[:, None] / self._cpu_per_task), by_gpu)
        copies = np.where(runnable, np.minimum(by_gpu, by_cpu), 0.0)
        result: FloatArray = summary.idle - _weighted_sum(copies, self._usable_weight)
        return result


NEXT_POD_WEIGHT = 0.9
"""The next-pod horizon's weight against the fill horizon's (1 - this). Chosen without looking at
the traces it is scored on: of the grid ``bench.packing --leave-one-out`` searches (weights
0.3-0.9, resolutions 25-55 milli), (0.9, 40) has the largest worst-trace margin over FGD on the
three shared traces, and held out one at a time each of them chooses 0.9 too. It was 0.5 until
2026-11-27, when the grid first went past 0.7. gpuwise's rehearsal may place with 0.5 instead
(:data:`~gpuwise.decide.packing.gpuwise_policy.OTHER_WEIGHTS`), where that fills the cluster better."""


def checked_weight(next_pod_weight: float) -> float:
    if not 0.0 <= next_pod_weight <= 1.0:
        raise ValueError(f"next_pod_weight must be in [0, 1], got {next_pod_weight}")
    return next_pod_weight


class TwoHorizonFragmentation(FragmentationMeasure):
    """A weighted mean of :class:`NextPodFragmentation` (``next_pod_weight``) and
    :class:`FillFragmentation` (the rest).

    gpuwise weighs the next pod 0.9 (:data:`NEXT_POD_WEIGHT`): the fill horizon as a correction,
    not an equal. How a weight fares on traces it was not chosen on is what
    ``python -m bench.packing --leave-one-out`` measures."""

    def __init__(self, workload: TargetWorkload, next_pod_weight: float = NEXT_POD_WEIGHT) -> None:
        super().__init__(workload)
        self.next_pod_weight = checked_weight(next_pod_weight)
        self._horizons = (NextPodFragmentation(workload), FillFragmentation(workload))

    def _amount(self, summary: Summary, cpu_free: IntArray, runnable: BoolArray) -> FloatArray:
        next_pod, fill = (measure._amount(summary, cpu_free, runnable) for measure in self._horizons)
        result: FloatArray = self.next_pod_weight * next_pod + (1.0 - self.next_pod_weight) * fill
        return result


class FragmentationIndex:
    """The fragmentation of every node of a :class:`ClusterState` under one measure, kept current.

    Only nodes whose :attr:`ClusterState.revision` moved since the last look are recomputed, so
    reading it after every placement costs one node's worth of work.
    """

    def __init__(self, measure: FragmentationMeasure, state: ClusterState) -> None:
        self.measure = measure
        self.state = state
        self._seen = state.revision.copy()
        self.summary = measure.summarize(state.gpu_free)
        self.node: FloatArray = measure.amount(self.summary, state.cpu_free, state.nodes.model)

    def refresh(self) -> None:
        stale = self._resummarize()
        if len(stale):
            self.node[stale] = self.measure.amount(
                self.summary.take(stale), self.state.cpu_free[stale], self.state.nodes.model[stale]
            )

    def _resummarize(self) -> IntArray:
        """Summarize again the nodes that changed since the last look; returns them, whose
        :attr:`node` is left for the caller to recompute."""
        stale = np.flatnonzero(self._seen != self.state.revision)
        if len(stale):
            self.summary.counts[stale] = self.measure.summarize(self.state.gpu_free[stale]).counts
            self._seen[stale] = self.state.revision[stale]
        return stale

    @property
    def total(self) -> float:
        """Fragmented GPU milli of the whole cluster."""
        self.refresh()
        return float(self.node.sum())

    def increase(self, candidates: Candidates) -> FloatArray:
        """How much each candidate placement would add to its node's fragmentation.

        The nodes that changed since the last call (the last placement's, as a rule) are measured
        again in the same call as the candidates: one pass of the measure per placement, not two."""
        stale = self._resummarize()
        nodes = np.concatenate((candidates.node, stale))
        counts = self.summary.counts[nodes]
        counts[: len(candidates)] += self.measure.change(candidates)
        cpu_free = np.concatenate((candidates.cpu_free, self.state.cpu_free[stale]))
        amounts = self.measure.amount(Summary(counts), cpu_free, self.state.nodes.model[nodes])
        self.node[stale] = amounts[len(candidates) :]
        result: FloatArray = amounts[: len(candidates)] - self.node[candidates.node]
        return result
