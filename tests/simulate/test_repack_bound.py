"""The restarts a re-solve costs (`bench.repack_bound`): a pod that only swaps between twin nodes
does not count, a pod moved to a node of another shape does."""

from __future__ import annotations

import numpy as np
from bench.repack_bound import restarts

from gpuwise.decide.packing.cluster import Nodes, Placement, PodRequest
from gpuwise.decide.packing.state import ClusterState

# Nodes 0 and 1 are twins; node 2 has more CPU.
NODES = Nodes.build(
    names=["a", "b", "c"], cpu_milli=[8000, 8000, 16000], memory_mib=[8192] * 3, gpus=[2] * 3, models=["T4"] * 3
)


def whole_gpu() -> PodRequest:
    return PodRequest(1000, 1024, 1, 1000, np.array([True]))


def placed(where: dict[int, Placement]) -> ClusterState:
    state = ClusterState(NODES)
    for pod, placement in where.items():
        state.bind(pod, whole_gpu(), placement)
    return state


def test_pods_that_move_together_onto_a_twin_node_cost_nothing() -> None:
    before = placed({1: Placement(0, (0,)), 2: Placement(0, (1,)), 3: Placement(1, (0,))})
    after = placed({1: Placement(1, (0,)), 2: Placement(1, (1,)), 3: Placement(0, (0,))})  # a and b swapped
    assert restarts(NODES, before, after) == 0


def test_a_pod_leaving_its_node_costs_one_restart_each() -> None:
    before = placed({1: Placement(0, (0,)), 2: Placement(0, (1,)), 3: Placement(1, (0,))})
    # 1 and 2 stay together (on b, a's twin); 3 goes to c, another shape: one restart.
    after = placed({1: Placement(1, (0,)), 2: Placement(1, (1,)), 3: Placement(2, (0,))})
    assert restarts(NODES, before, after) == 1
    # Split up: pod 2 left pod 1's node, and pod 3 left its own.
    split = placed({1: Placement(0, (0,)), 2: Placement(2, (1,)), 3: Placement(2, (0,))})
    assert restarts(NODES, before, split) == 2


def test_pods_not_running_on_both_sides_are_not_counted() -> None:
    before = placed({1: Placement(0, (0,))})
    after = placed({1: Placement(0, (0,)), 2: Placement(2, (0,))})  # 2 was admitted, not moved
    assert restarts(NODES, before, after) == 0
