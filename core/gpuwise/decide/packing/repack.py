"""Make room for a GPU pod that fits nowhere by migrating a few running pods.

A scheduler can only choose where a new pod goes; gpuwise is an operator and can also *move*
checkpointable jobs. When a GPU pod fits nowhere, the repacker looks for a node where moving at
most ``max_migrations`` running pods elsewhere lets it in. Two kinds of move help once a cluster
is full:

- **free CPU**: the node has the GPU room but its CPU went to CPU-only pods; move those to nodes
  with CPU to spare (GPU-poor, CPU-rich nodes are common). This un-strands idle GPUs.
- **free a GPU**: move the few smallest pods off a GPU into gaps on other nodes, so a larger pod
  (or, clearing whole GPUs, a whole-GPU pod) gets it.

Nodes are screened with vector arithmetic on per-node summaries of their smallest movable pods,
keeping only moves whose pods fit somewhere else right now; the cheapest few nodes are then
tried for real, in a transaction: evict, bind the new pod, re-place every evicted pod with the
placement policy, and put everything back if any of them fits nowhere. CPU-only pods are never
repacked *for*: they add no GPU allocation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuwise.decide.packing.cluster import MILLI, BoolArray, IntArray, Placement, PodRequest
from gpuwise.decide.packing.fit import fits, gpu_room, placement
from gpuwise.decide.packing.policies import Policy
from gpuwise.decide.packing.state import Binding, ClusterState, PlacementError

MAX_TRIES = 16
"""Nodes tried per pod, cheapest first; screening already ruled the others out."""

NEVER = 1 << 30
"""Stands for "impossible" in cost arrays (an unreachable number of migrations)."""

FREE_CPU, FREE_GPU = 0, 1

Fits = Callable[[IntArray, IntArray], BoolArray]


@dataclass(frozen=True)
class Screen:
    """Per node: the cheapest move found, as the number of pods to migrate (``NEVER`` if
    none), the GPU milli they hold, which kind of move, and the GPUs it frees (shape
    ``(nodes, num_gpu)``: the GPU a sharing pod gets, or the GPUs cleared for a whole-GPU pod)."""

    migrations: IntArray
    moved_milli: IntArray
    kind: IntArray
    gpus: IntArray


class Repacker:
    """Admits pods that fit nowhere by migrating at most ``max_migrations`` running pods each."""

    def __init__(self, policy: Policy, state: ClusterState, max_migrations: int) -> None:
        if max_migrations < 1:
            raise ValueError(f"max_migrations must be at least 1, got {max_migrations}")
        self.policy = policy
        self.state = state
        self.max_migrations = max_migrations
        nodes, gpus, depth = len(state.nodes), state.gpu_free.shape[1], max_migrations + 1
        # Per GPU, its occupants smallest first; per node, its CPU-only pods largest first: the
        # count, and running totals of (GPU milli, CPU, memory) over the first 0..max of them.
        self._gpu_count = np.zeros((nodes, gpus), dtype=np.int64)
        self._gpu_totals = np.zeros((nodes, gpus, depth, 3), dtype=np.int64)
        self._cpu_totals = np.zeros((nodes, depth, 3), dtype=np.int64)
        self._seen = np.full(nodes, -1, dtype=np.int64)

    def admit(self, pod_id: int, request: PodRequest, rng: np.random.Generator) -> int | None:
        """Bind ``request`` as ``pod_id`` by moving other pods; the number moved, or ``None``."""
        if request.num_gpu == 0:
            return None
        screen = self.screen(request)
        # Equally cheap nodes: the one moving the least GPU, then the fullest node.
        order = np.lexsort((self.state.gpu_free_total, screen.moved_milli, screen.migrations))
        for node in order[:MAX_TRIES]:
            if screen.migrations[node] > self.max_migrations:
                break
            moved = self._try(pod_id, request, int(node), screen, rng)
            if moved is not None:
                return moved
        return None

    def screen(self, request: PodRequest) -> Screen:
        """The cheapest way to fit ``request`` on each node, judged from summaries."""
        self._refresh()
        nodes = self.state.nodes
        possible = (
            request.allowed_models[nodes.model]
            & (nodes.cpu_milli >= request.cpu_milli)
            & (nodes.memory_mib >= request.memory_mib)
            & (nodes.gpus >= request.num_gpu)
        )
        fits_elsewhere = self._fits_somewhere()
        by_cpu = self._by_freeing_cpu(request, fits_elsewhere)
        by_gpu, moved, gpus = (
            self._by_freeing_a_gpu(request, fits_elsewhere)
            if request.shares_gpu
            else self._by_clearing_gpus(request, fits_elsewhere)
        )
        kind = np.where(by_cpu <= by_gpu, FREE_CPU, FREE_GPU)
        return Screen(
            migrations=np.where(possible, np.minimum(by_cpu, by_gpu), NEVER),
            moved_milli=np.where(kind == FREE_CPU, 0, moved),
            kind=kind,
            gpus=gpus,
        )

    def _refresh(self) -> None:
        """Recompute the per-node summaries of the nodes that changed since the last look."""
        state, depth = self.state, self.max_migrations + 1
        for node in np.flatnonzero(self._seen != state.revision):
            per_gpu: list[list[tuple[int, int, int]]] = [[] for _ in range(state.gpu_free.shape[1])]
            cpu_only: list[tuple[int, int, int]] = []
            for pod_id in state.pods_on_node[node]:
                request = state.bindings[pod_id].request
                held = (request.gpu_milli, request.cpu_milli, request.memory_mib)
                for gpu in state.bindings[pod_id].placement.gpus:
                    per_gpu[gpu].append(held)
                if not request.num_gpu:
                    cpu_only.append(held)
            for gpu, occupants in enumerate(per_gpu):
                self._gpu_count[node, gpu] = len(occupants)
                self._gpu_totals[node, gpu] = _running_totals(sorted(occupants), depth)
            self._cpu_totals[node] = _running_totals(sorted(cpu_only, key=lambda pod: -pod[1]), depth)
            self._seen[node] = state.revision[node]

    def _fits_somewhere(self) -> Fits:
        """Whether a pod holding so much GPU milli (on one GPU) and CPU fits on some node now."""
        state = self.state
        gap = np.where(state.gpu_free < MILLI, state.gpu_free, MILLI).max(axis=1)
        by_gap = np.argsort(-gap, kind="stable")
        gaps_descending = -gap[by_gap]
        most_cpu = np.maximum.accumulate(state.cpu_free[by_gap])

        def test(gpu_milli: IntArray, cpu_milli: IntArray) -> BoolArray:
            reach = np.searchsorted(gaps_descending, -gpu_milli, side="right") - 1
            result: BoolArray = (reach >= 0) & (most_cpu[np.maximum(reach, 0)] >= cpu_milli)
            return result

        return test

    def _by_freeing_cpu(self, request: PodRequest, fits_elsewhere: Fits) -> IntArray:
        state = self.state
        totals = self._cpu_totals
        enough = (state.cpu_free[:, None] + totals[:, :, 1] >= request.cpu_milli) & (
            state.memory_free[:, None] + totals[:, :, 2] >= request.memory_mib
        )
        each = np.diff(totals, axis=1)
        movable = fits_elsewhere(np.zeros_like(each[:, :, 1]), each[:, :, 1]) & (each[:, :, 1] > 0)
        return _fewest(enough[:, 1:] & (np.cumsum(~movable, axis=1) == 0), gpu_room(state, request))

    def _by_freeing_a_gpu(self, request: PodRequest, fits_elsewhere: Fits) -> tuple[IntArray, IntArray, IntArray]:
        state, totals = self.state, self._gpu_totals
        enough = (
            (state.gpu_free[:, :, None] + totals[:, :, :, 0] >= request.gpu_milli)
            & (state.cpu_free[:, None, None] + totals[:, :, :, 1] >= request.cpu_milli)
            & (state.memory_free[:, None, None] + totals[:, :, :, 2] >= request.memory_mib)
        )
        each = np.diff(totals, axis=2)
        movable = fits_elsewhere(each[:, :, :, 0], each[:, :, :, 1]) & (each[:, :, :, 0] < NEVER)
        per_gpu = _fewest(enough[:, :, 1:] & (np.cumsum(~movable, axis=2) == 0), state.gpu_free >= 0)
        gpu = per_gpu.argmin(axis=1)
        rows = np.arange(len(gpu))
        migrations = per_gpu[rows, gpu]
        moved = totals[rows, gpu, np.minimum(migrations, self.max_migrations), 0]
        return migrations, moved, gpu[:, None]

    def _by_clearing_gpus(self, request: PodRequest, fits_elsewhere: Fits) -> tuple[IntArray, IntArray, IntArray]:
        state, totals, count = self.state, self._gpu_totals, self._gpu_count
        free = state.gpu_free
        each = np.diff(totals, axis=2)
        movable = fits_elsewhere(each[:, :, :, 0], each[:, :, :, 1])
        listed = np.arange(1, self.max_migrations + 1) <= count[:, :, None]
        clearable = ((count <= self.max_migrations) & (movable | ~listed).all(axis=2)) | (free >= MILLI)
        # Cheapest GPUs first: fewest occupants, then least GPU held.
        key = np.where(clearable & (free >= 0), count * 2 * MILLI + (MILLI - free), NEVER)
        chosen = np.argsort(key, axis=1, kind="stable")[:, : request.num_gpu]
        cheapest = np.take_along_axis(key, chosen, axis=1)
        emptied = np.minimum(np.take_along_axis(count, chosen, axis=1), self.max_migrations)
        freed = np.take_along_axis(totals, chosen[:, :, None, None], axis=1)
        freed = np.take_along_axis(freed, emptied[:, :, None, None], axis=2)[:, :, 0, :].sum(axis=1)
        room = (state.cpu_free + freed[:, 1] >= request.cpu_milli) & (
            state.memory_free + freed[:, 2] >= request.memory_mib
        )
        possible = (cheapest < NEVER).all(axis=1) & room
        migrations = np.where(possible, (cheapest // (2 * MILLI)).sum(axis=1), NEVER)
        return migrations, (cheapest % (2 * MILLI)).sum(axis=1), chosen

    def _victims(self, request: PodRequest, node: int, kind: int, gpus: list[int]) -> list[int]:
        """The pods to move, as the screen planned: CPU-only pods, largest first, until the CPU
        suffices; a sharing pod's GPU's smallest pods until it has room; or every pod on the
        GPUs cleared for a whole-GPU pod."""
        state = self.state
        pods = sorted(state.pods_on_node[node])
        held = {pod_id: state.bindings[pod_id] for pod_id in pods}
        if kind == FREE_CPU:
            short = request.cpu_milli - int(state.cpu_free[node])
            ordered = sorted((p for p in pods if not held[p].request.num_gpu), key=lambda p: -held[p].request.cpu_milli)
            return _enough(ordered, [held[p].request.cpu_milli for p in ordered], short)
        if request.shares_gpu:
            gpu = gpus[0]
            on_gpu = sorted((p for p in pods if gpu in held[p].placement.gpus), key=lambda p: held[p].request.gpu_milli)
            short = request.gpu_milli - int(state.gpu_free[node, gpu])
            return _enough(on_gpu, [held[p].request.gpu_milli for p in on_gpu], short)
        return [p for p in pods if set(held[p].placement.gpus) & set(gpus)]

    def _try(self, pod_id: int, request: PodRequest, node: int, screen: Screen, rng: np.random.Generator) -> int | None:
        state = self.state
        kind, gpus = int(screen.kind[node]), [int(g) for g in screen.gpus[node]]
        victims = self._victims(request, node, kind, gpus)
        if not victims or len(victims) > self.max_migrations:
            return None
        # Each victim must fit in the space that is free now (its own does not count).
        if not all(fits(state, state.bindings[victim].request).any() for victim in victims):
            return None
        evicted = [(victim, state.unbind(victim)) for victim in victims]
        try:
            state.bind(pod_id, request, self._target(request, node, kind, gpus))
        except PlacementError:
            self._restore(evicted, [])
            return None
        moved: list[int] = []
        for victim, binding in sorted(evicted, key=lambda item: -item[1].request.total_gpu_milli):
            where = self.policy(state, binding.request, rng)
            if where is None:
                state.unbind(pod_id)
                self._restore(evicted, moved)
                return None
            state.bind(victim, binding.request, where)
            moved.append(victim)
        return len(moved)

    def _target(self, request: PodRequest, node: int, kind: int, gpus: list[int]) -> Placement:
        if kind == FREE_GPU:
            return Placement(node, tuple(gpus))
        if not request.shares_gpu:
            return placement(self.state, request, node)
        free = self.state.gpu_free[node]
        room = np.where(free >= request.gpu_milli, free, NEVER)
        return Placement(node, (int(room.argmin()),))

    def _restore(self, evicted: list[tuple[int, Binding]], moved: list[int]) -> None:
        for victim in moved:
            self.state.unbind(victim)
        for victim, binding in evicted:
            self.state.bind(victim, binding.request, binding.placement)


def _running_totals(pods: list[tuple[int, int, int]], depth: int) -> IntArray:
    """Running totals of ``(gpu_milli, cpu, memory)`` over the first 0..depth-1 pods; missing pods
    count as impossibly large (``NEVER`` GPU milli and CPU) so they are never "enough" to move."""
    missing = [(NEVER, NEVER, 0)] * (depth - 1 - min(len(pods), depth - 1))
    result: IntArray = np.array([(0, 0, 0), *pods[: depth - 1], *missing], dtype=np.int64).cumsum(axis=0)
    return result


def _fewest(reachable: BoolArray, allowed: BoolArray) -> IntArray:
    """Per row: 1 + index of the first True along the last axis, or ``NEVER``."""
    result: IntArray = np.where(allowed & reachable.any(axis=-1), reachable.argmax(axis=-1) + 1, NEVER)
    return result


def _enough(pods: list[int], amounts: list[int], short: int) -> list[int]:
    """The first of ``pods`` whose ``amounts`` add up to at least ``short``."""
    chosen: list[int] = []
    for pod_id, amount in zip(pods, amounts, strict=True):
        if short <= 0:
            break
        chosen.append(pod_id)
        short -= amount
    return chosen
