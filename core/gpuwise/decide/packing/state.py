"""What is free on each node right now, and which pod holds what.

The free-resource arrays are what planners read; the per-pod bookkeeping is what a repacker
needs to know which pods it could move. Both change only through :meth:`ClusterState.bind` and
:meth:`ClusterState.unbind`, which check the request against what is free: a planner bug shows up
as an exception here, never as an over-committed GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwise.decide.packing.cluster import MILLI, IntArray, Nodes, Placement, PodRequest

ABSENT_GPU = -1
"""Free milli of a GPU slot a node does not have: never fits anything, counts as nothing."""


class PlacementError(ValueError):
    """A planner asked for something the node does not have free."""


@dataclass(frozen=True)
class Binding:
    """A running pod: its request and where it runs."""

    request: PodRequest
    placement: Placement


class ClusterState:
    """Free CPU, memory and per-GPU milli of every node, plus the pods bound to each node."""

    def __init__(self, nodes: Nodes) -> None:
        self.nodes = nodes
        self.cpu_free: IntArray = nodes.cpu_milli.copy()
        self.memory_free: IntArray = nodes.memory_mib.copy()
        slots = np.arange(max(nodes.max_gpus, 1))
        self.gpu_free: IntArray = np.where(slots < nodes.gpus[:, None], MILLI, ABSENT_GPU).astype(np.int64)
        self.bindings: dict[int, Binding] = {}
        self.pods_on_node: list[set[int]] = [set() for _ in range(len(nodes))]
        self.revision: IntArray = np.zeros(len(nodes), dtype=np.int64)
        """Bumped on every change of a node, so caches of per-node summaries know what to redo."""

    def copy(self) -> ClusterState:
        """An independent copy: planning on it leaves this state as it is."""
        twin = ClusterState.__new__(ClusterState)
        twin.nodes = self.nodes
        twin.cpu_free, twin.memory_free, twin.gpu_free = (
            self.cpu_free.copy(),
            self.memory_free.copy(),
            self.gpu_free.copy(),
        )
        twin.bindings = dict(self.bindings)
        twin.pods_on_node = [set(pods) for pods in self.pods_on_node]
        twin.revision = self.revision.copy()
        return twin

    @property
    def gpu_free_total(self) -> IntArray:
        """Free GPU milli per node."""
        total: IntArray = np.clip(self.gpu_free, 0, None).sum(axis=1)
        return total

    @property
    def allocated_gpu_milli(self) -> int:
        return self.nodes.gpu_capacity_milli - int(self.gpu_free_total.sum())

    def bind(self, pod_id: int, request: PodRequest, placement: Placement) -> None:
        """Run ``request`` at ``placement``; raises :class:`PlacementError` if it does not fit."""
        if pod_id in self.bindings:
            raise PlacementError(f"pod {pod_id} is already bound")
        node, gpus = placement.node, placement.gpus
        problem = self._misfit(request, placement)
        if problem:
            raise PlacementError(f"pod {pod_id} does not fit node {self.nodes.names[node]}: {problem}")
        self.cpu_free[node] -= request.cpu_milli
        self.memory_free[node] -= request.memory_mib
        for gpu in gpus:
            self.gpu_free[node, gpu] -= request.gpu_milli
        self.bindings[pod_id] = Binding(request, placement)
        self.pods_on_node[node].add(pod_id)
        self.revision[node] += 1

    def unbind(self, pod_id: int) -> Binding:
        """Stop a running pod and give its resources back."""
        binding = self.bindings.pop(pod_id)
        node = binding.placement.node
        self.cpu_free[node] += binding.request.cpu_milli
        self.memory_free[node] += binding.request.memory_mib
        for gpu in binding.placement.gpus:
            self.gpu_free[node, gpu] += binding.request.gpu_milli
        self.pods_on_node[node].discard(pod_id)
        self.revision[node] += 1
        return binding

    def _misfit(self, request: PodRequest, placement: Placement) -> str:
        node, gpus = placement.node, placement.gpus
        if request.cpu_milli > self.cpu_free[node]:
            return f"needs {request.cpu_milli} milli-CPU, {self.cpu_free[node]} free"
        if request.memory_mib > self.memory_free[node]:
            return f"needs {request.memory_mib} MiB, {self.memory_free[node]} free"
        if len(gpus) != request.num_gpu or len(set(gpus)) != len(gpus):
            return f"needs {request.num_gpu} distinct GPUs, got {gpus}"
        if gpus and not request.allowed_models[self.nodes.model[node]]:
            return f"GPU model {self.nodes.models[self.nodes.model[node]]} not allowed"
        for gpu in gpus:
            if not 0 <= gpu < self.gpu_free.shape[1] or self.gpu_free[node, gpu] < request.gpu_milli:
                return f"GPU {gpu} lacks {request.gpu_milli} free milli"
        return ""
