"""Replay one arrival order through one policy and record the allocation curve.

After every arriving pod (placed or dropped) the replay records the GPU milli that has arrived so
far, the GPU milli allocated, and the cluster's fragmentation (FGD's measure, whatever the
policy). The headline numbers are read off that curve the way the reference analysis does: the
allocation "at 100 % arrived" is the mean allocation over the events whose arrived GPU demand
rounds to 100 % of capacity.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuwise.decide.packing.cluster import FloatArray, IntArray, Nodes, Pods
from gpuwise.decide.packing.fragmentation import FragmentationIndex, NextPodFragmentation, TargetWorkload
from gpuwise.decide.packing.policies import PlacementContext
from gpuwise.decide.packing.registry import PolicyChoice, make_policy
from gpuwise.decide.packing.repack import Repacker
from gpuwise.decide.packing.state import ClusterState


@dataclass(frozen=True)
class Curve:
    """Per arrival event: arrived, allocated and fragmented GPU milli; and the cluster capacity."""

    arrived: IntArray
    allocated: IntArray
    fragmented: FloatArray
    capacity: int

    def allocation_at(self, arrived_percent: float) -> float:
        """Allocated GPU as a % of capacity when ``arrived_percent`` % of capacity has arrived."""
        return self._at(self.allocated, arrived_percent)

    def fragmentation_at(self, arrived_percent: float) -> float:
        """Fragmented GPU (FGD's measure) as a % of capacity at ``arrived_percent`` % arrived."""
        return self._at(self.fragmented, arrived_percent)

    def sample(self, arrived_percent: Sequence[float]) -> FloatArray:
        """Allocation % interpolated at each arrived % (for plotting the curve)."""
        arrived = 100.0 * self.arrived / self.capacity
        allocated = 100.0 * self.allocated / self.capacity
        result: FloatArray = np.interp(arrived_percent, arrived, allocated, left=0.0)
        return result

    def _at(self, values: FloatArray | IntArray, arrived_percent: float) -> float:
        """Mean of ``values`` over the events whose arrived % rounds to ``arrived_percent`` (the
        reference analysis); on a cluster too small for that bucket to hold an event, the value
        after the last event that had not yet passed ``arrived_percent``."""
        arrived = 100.0 * self.arrived / self.capacity
        near = np.round(arrived) == arrived_percent
        if near.any():
            return float(100.0 * values[near].mean() / self.capacity)
        before = np.flatnonzero(arrived <= arrived_percent)
        return float(100.0 * values[before[-1]] / self.capacity) if len(before) else 0.0


@dataclass(frozen=True)
class Run:
    curve: Curve
    placed: int
    dropped: int
    migrations: int
    seconds: float


def empty_cluster_context(
    nodes: Nodes, pods: Pods, rng: np.random.Generator, workload: TargetWorkload | None = None
) -> PlacementContext:
    """What a policy is built from at the start of a replay: an empty cluster, the target
    workload (``workload``, or the common shapes of ``pods``), and every shape of ``pods`` to arrive."""
    return PlacementContext.for_pods(ClusterState(nodes), pods, rng.permutation(len(nodes)), workload)


def replay(
    nodes: Nodes,
    pods: Pods,
    order: IntArray,
    policy_name: PolicyChoice,
    rng: np.random.Generator,
    *,
    workload: TargetWorkload | None = None,
    max_migrations: int = 0,
) -> Run:
    """Place ``pods[order]`` one by one with the named policy; a pod that fits nowhere is
    dropped, or, with ``max_migrations``, may get in by moving up to that many running pods."""
    started = time.perf_counter()
    context = empty_cluster_context(nodes, pods, rng, workload)
    state = context.state
    fragmentation = FragmentationIndex(NextPodFragmentation(context.workload), state)
    policy = make_policy(policy_name, context)
    repacker = Repacker(policy, state, max_migrations) if max_migrations else None
    requests = [pods.request(i) for i in range(len(pods))]
    allocated = np.empty(len(order), dtype=np.int64)
    fragmented = np.empty(len(order))
    placed = migrations = used = 0
    for event, pod in enumerate(order):
        request = requests[pod]
        where = policy(state, request, rng)
        if where is not None:
            state.bind(event, request, where)
        elif repacker is not None:
            migrations += repacker.admit(event, request, rng) or 0
        if event in state.bindings:
            used += request.total_gpu_milli
            placed += 1
        allocated[event] = used
        fragmented[event] = fragmentation.total
    curve = Curve(np.cumsum(pods.total_gpu_milli[order]), allocated, fragmented, nodes.gpu_capacity_milli)
    return Run(curve, placed, len(order) - placed, migrations, time.perf_counter() - started)
