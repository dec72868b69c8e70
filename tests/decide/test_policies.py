"""Every policy places pods validly, and the good ones find known optimal packings."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpuwise.decide.packing.cluster import MILLI, Nodes, Placement, PodRequest, Pods
from gpuwise.decide.packing.fit import candidates, fits, placement
from gpuwise.decide.packing.fragmentation import TargetWorkload
from gpuwise.decide.packing.gpuwise_policy import GpuwiseParameters, GpuwisePolicy
from gpuwise.decide.packing.policies import PlacementContext
from gpuwise.decide.packing.registry import POLICIES, PolicyChoice, UnknownPolicyError, make_policy
from gpuwise.decide.packing.state import ClusterState

MODELS = ("T4", "V100")


@st.composite
def clusters(draw: st.DrawFn) -> tuple[Nodes, Pods]:
    count = draw(st.integers(1, 5))
    nodes = Nodes.build(
        names=[f"n{i}" for i in range(count)],
        cpu_milli=[draw(st.integers(1, 32)) * 1000 for _ in range(count)],
        memory_mib=[draw(st.integers(1, 64)) * 1024 for _ in range(count)],
        gpus=[draw(st.sampled_from([1, 2, 4, 8])) for _ in range(count)],
        models=[draw(st.sampled_from(MODELS)) for _ in range(count)],
    )
    size = draw(st.integers(1, 30))
    num_gpu = [draw(st.sampled_from([0, 1, 1, 1, 1, 2, 4, 8])) for _ in range(size)]
    pods = Pods.build(
        names=[f"p{i}" for i in range(size)],
        cpu_milli=[draw(st.integers(0, 16)) * 1000 for _ in range(size)],
        memory_mib=[draw(st.integers(0, 16)) * 1024 for _ in range(size)],
        num_gpu=num_gpu,
        gpu_milli=[draw(st.integers(1, 100)) * 10 if k == 1 else (MILLI if k else 0) for k in num_gpu],
        gpu_models=[
            [m for m in draw(st.sampled_from([[], [], ["T4"], ["V100"], ["T4", "V100"]])) if m in nodes.models]
            for _ in range(size)
        ],
        models=nodes.models,
    )
    return nodes, pods


def replay(policy_name: PolicyChoice, nodes: Nodes, pods: Pods, order: Sequence[int], seed: int = 0) -> ClusterState:
    rng = np.random.default_rng(seed)
    state = ClusterState(nodes)
    policy = make_policy(policy_name, PlacementContext.for_pods(state, pods, rng.permutation(len(nodes))))
    for event, pod in enumerate(order):
        request = pods.request(pod)
        could_fit = bool(fits(state, request).any())
        where = policy(state, request, rng)
        assert (where is not None) == could_fit, "a policy must place a pod exactly when it fits somewhere"
        if where is not None:
            state.bind(event, request, where)  # raises if the placement is not valid
    return state


@settings(max_examples=60, deadline=None)
@given(clusters(), st.sampled_from(sorted(POLICIES)), st.integers(0, 1000))
def test_every_output_is_a_valid_placement(cluster: tuple[Nodes, Pods], policy: str, seed: int) -> None:
    nodes, pods = cluster
    order = np.random.default_rng(seed).integers(len(pods), size=3 * len(pods))
    state = replay(policy, nodes, pods, order.tolist(), seed)
    assert state.allocated_gpu_milli == sum(b.request.total_gpu_milli for b in state.bindings.values())
    assert (state.cpu_free >= 0).all() and (state.memory_free >= 0).all() and (state.gpu_free >= -1).all()


def best_allocation(nodes: Nodes, requests: Sequence[PodRequest]) -> int:
    """Exhaustive search: the most GPU milli any scheduler could allocate, placing each pod on
    arrival wherever it fits (or dropping it only when it fits nowhere)."""

    def search(state: ClusterState, event: int) -> int:
        if event == len(requests):
            return state.allocated_gpu_milli
        request = requests[event]
        cands = candidates(state, request)
        if not len(cands):
            return search(state, event + 1)
        best = 0
        for node, gpu in zip(cands.node.tolist(), cands.gpu.tolist(), strict=True):
            state.bind(event, request, placement(state, request, node, gpu))
            best = max(best, search(state, event + 1))
            state.unbind(event)
        return best

    return search(ClusterState(nodes), 0)


def pods_of(*shapes: tuple[int, int], models: Sequence[str]) -> Pods:
    """Pods of (num_gpu, gpu_milli) shapes, one CPU core and 1 GiB each."""
    return Pods.build(
        names=[f"p{i}" for i in range(len(shapes))],
        cpu_milli=[1000] * len(shapes),
        memory_mib=[1024] * len(shapes),
        num_gpu=[k for k, _ in shapes],
        gpu_milli=[m for _, m in shapes],
        gpu_models=[[]] * len(shapes),
        models=models,
    )


GOOD = ("bestfit", "fgd", "gpuwise")


@pytest.mark.parametrize("policy", GOOD)
def test_two_half_gpu_pods_share_a_gpu_so_a_whole_gpu_pod_fits(policy: str) -> None:
    nodes = Nodes.build(names=["n"], cpu_milli=[8000], memory_mib=[8192], gpus=[2], models=["T4"])
    pods = pods_of((1, 500), (1, 500), (1, MILLI), models=nodes.models)
    optimum = best_allocation(nodes, [pods.request(i) for i in range(3)])
    assert optimum == 2 * MILLI
    assert replay(policy, nodes, pods, [0, 1, 2]).allocated_gpu_milli == optimum


@pytest.mark.parametrize("policy", GOOD)
def test_a_small_pod_keeps_off_the_node_an_eight_gpu_pod_needs(policy: str) -> None:
    nodes = Nodes.build(
        names=["big", "small"], cpu_milli=[64000, 8000], memory_mib=[65536] * 2, gpus=[8, 1], models=["T4"] * 2
    )
    pods = pods_of((1, MILLI), (8, MILLI), models=nodes.models)
    optimum = best_allocation(nodes, [pods.request(0), pods.request(1)])
    assert optimum == 9 * MILLI
    for seed in range(5):  # whatever the tie-breaking order of the nodes
        assert replay(policy, nodes, pods, [0, 1], seed).allocated_gpu_milli == optimum


@pytest.mark.parametrize("policy", GOOD)
def test_gaps_are_filled_before_fresh_gpus(policy: str) -> None:
    """700 + 300 and 600 + 400 pair up exactly; any other pairing strands a later pod."""
    nodes = Nodes.build(names=["n"], cpu_milli=[16000], memory_mib=[16384], gpus=[2], models=["T4"])
    pods = pods_of((1, 700), (1, 600), (1, 300), (1, 400), models=nodes.models)
    optimum = best_allocation(nodes, [pods.request(i) for i in range(4)])
    assert optimum == 2 * MILLI
    assert replay(policy, nodes, pods, [0, 1, 2, 3]).allocated_gpu_milli == optimum


def test_gpu_model_constraints_are_respected() -> None:
    nodes = Nodes.build(
        names=["t", "v"], cpu_milli=[8000] * 2, memory_mib=[8192] * 2, gpus=[1, 1], models=["T4", "V100"]
    )
    pods = Pods.build(
        names=["p"],
        cpu_milli=[1],
        memory_mib=[1],
        num_gpu=[1],
        gpu_milli=[300],
        gpu_models=[["V100"]],
        models=nodes.models,
    )
    for policy in POLICIES:
        state = replay(policy, nodes, pods, [0, 0, 0, 0])
        assert {b.placement.node for b in state.bindings.values()} == {1}
        assert len(state.bindings) == 3  # the fourth 300-milli pod does not fit the V100


def test_same_seed_same_placements() -> None:
    nodes = Nodes.build(
        names=["a", "b", "c"], cpu_milli=[8000] * 3, memory_mib=[8192] * 3, gpus=[2] * 3, models=["T4"] * 3
    )
    pods = pods_of((1, 300), (1, 500), (1, MILLI), models=nodes.models)
    order = [0, 1, 2, 0, 1, 2, 0]
    for policy in POLICIES:
        first = replay(policy, nodes, pods, order, seed=7).bindings
        again = replay(policy, nodes, pods, order, seed=7).bindings
        assert {k: b.placement for k, b in first.items()} == {k: b.placement for k, b in again.items()}


def test_unknown_policy_names_the_choices() -> None:
    state = ClusterState(Nodes.build(names=["n"], cpu_milli=[1], memory_mib=[1], gpus=[1], models=["T4"]))
    context = PlacementContext.create(
        state, TargetWorkload.from_pods(pods_of((1, 100), models=("T4",))), np.random.default_rng()
    )
    with pytest.raises(
        UnknownPolicyError, match="unknown policy 'tetris'; choose one of: random, bestfit, fgd, gpuwise"
    ):
        make_policy("tetris", context)


def test_placement_gives_whole_gpu_pods_free_gpus() -> None:
    nodes = Nodes.build(names=["n"], cpu_milli=[8000], memory_mib=[8192], gpus=[4], models=["T4"])
    state = ClusterState(nodes)
    state.bind(0, pods_of((1, 300), models=nodes.models).request(0), Placement(0, (1,)))
    request = pods_of((2, MILLI), models=nodes.models).request(0)
    assert placement(state, request, 0).gpus == (0, 2)


def test_the_multi_gpu_share_is_of_the_workloads_gpu_demand() -> None:
    # Three half-GPU pods (1,500 milli in all) and one two-GPU pod (2,000 milli).
    pods = pods_of((1, 500), (1, 500), (1, 500), (2, MILLI), models=["T4"])
    assert TargetWorkload.from_pods(pods).multi_gpu_share == pytest.approx(2000 / 3500)
    assert TargetWorkload.from_pods(pods_of((1, 500), (0, 0), models=["T4"])).multi_gpu_share == 0.0


@given(clusters(), st.integers(0, 2**16))
@settings(max_examples=40, deadline=None)
def test_gpuwise_places_every_pod_where_the_policy_its_rehearsal_chose_does(
    cluster: tuple[Nodes, Pods], seed: int
) -> None:
    nodes, pods = cluster
    assume((pods.total_gpu_milli > 0).any())
    context = PlacementContext.for_pods(ClusterState(nodes), pods, np.random.default_rng(0).permutation(len(nodes)))
    weight = GpuwisePolicy(context).next_pod_weight
    chosen = "fgd" if weight is None else GpuwiseParameters(weight, rehearsed_arrivals=0)
    order = list(range(len(pods)))
    ours, theirs = replay("gpuwise", nodes, pods, order, seed), replay(chosen, nodes, pods, order, seed)
    assert {pod: b.placement for pod, b in ours.bindings.items()} == {
        pod: b.placement for pod, b in theirs.bindings.items()
    }
