"""A placement pays for the contention on its GPU model: flexible pods leave the capacity that
pods bound to one model need, and where no pod is bound, nothing changes."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwise.decide.packing.cluster import MILLI, Nodes, Pods
from gpuwise.decide.packing.fit import candidates, placement
from gpuwise.decide.packing.fragmentation import TargetWorkload
from gpuwise.decide.packing.gpuwise_policy import GpuwiseParameters
from gpuwise.decide.packing.policies import PlacementContext
from gpuwise.decide.packing.registry import make_policy
from gpuwise.decide.packing.scarcity import ModelPressure
from gpuwise.decide.packing.state import ClusterState
from gpuwise.simulate.experiment import run_seed
from gpuwise.simulate.generated import generated

ALONE = GpuwiseParameters(rehearsed_arrivals=0)
WITHOUT = GpuwiseParameters(rehearsed_arrivals=0, weigh_contention=False)


def two_nodes() -> Nodes:
    return Nodes.build(
        names=["a", "b"], cpu_milli=[64000] * 2, memory_mib=[1 << 20] * 2, gpus=[2, 2], models=["A", "B"]
    )


def pods_of(nodes: Nodes, *accepted: tuple[str, ...]) -> Pods:
    """One-GPU pods, one per entry of ``accepted`` (the models it runs on; empty: any)."""
    count = len(accepted)
    return Pods.build(
        names=[f"p{i}" for i in range(count)],
        cpu_milli=[1000] * count,
        memory_mib=[0] * count,
        num_gpu=[1] * count,
        gpu_milli=[MILLI] * count,
        gpu_models=list(accepted),
        models=nodes.models,
    )


def test_a_model_that_bound_pods_need_is_pressed_harder() -> None:
    nodes = two_nodes()
    # Half the pods run anywhere, half only on B: each spreads its demand over what it accepts.
    pods = pods_of(nodes, (), ("B",))
    pressure = ModelPressure.where_it_matters(TargetWorkload.from_pods(pods, 1.0), ClusterState(nodes))
    assert pressure is not None
    # Per free milli: anywhere 500/4000 on both models, B-only 500/2000 on B: A 0.125, B 0.375.
    assert pressure.relative().tolist() == pytest.approx([1 / 3, 1.0])
    state = pressure.state
    cands = candidates(state, pods.request(0))
    assert dict(zip(cands.node.tolist(), pressure.cost(cands, MILLI).tolist(), strict=True)) == pytest.approx(
        {0: MILLI / 3, 1: MILLI}
    )


def test_the_pressure_follows_the_free_capacity() -> None:
    nodes = two_nodes()
    pods = pods_of(nodes, (), ("B",))
    state = ClusterState(nodes)
    pressure = ModelPressure(TargetWorkload.from_pods(pods, 1.0), state)
    state.bind(0, pods.request(0), placement(state, pods.request(0), node=0, gpu=0))
    # A has 1000 free, B 2000: anywhere 500/3000 on both models, B-only 500/2000 on B.
    assert pressure.relative().tolist() == pytest.approx([(1 / 6) / (1 / 6 + 1 / 4), 1.0])


def test_it_is_not_weighed_where_no_gpu_pod_is_bound_to_a_model() -> None:
    nodes = two_nodes()
    assert (
        ModelPressure.where_it_matters(TargetWorkload.from_pods(pods_of(nodes, (), ()), 1.0), ClusterState(nodes))
        is None
    )
    one_model = Nodes.build(names=["a"], cpu_milli=[64000], memory_mib=[1 << 20], gpus=[2], models=["A"])
    bound = pods_of(one_model, ("A",))
    assert ModelPressure.where_it_matters(TargetWorkload.from_pods(bound, 1.0), ClusterState(one_model)) is None
    cpu_only_bound = Pods.build(
        names=["gpu", "cpu"],
        cpu_milli=[1000, 1000],
        memory_mib=[0, 0],
        num_gpu=[1, 0],
        gpu_milli=[MILLI, 0],
        gpu_models=[(), ("B",)],
        models=nodes.models,
    )
    assert ModelPressure.where_it_matters(TargetWorkload.from_pods(cpu_only_bound, 1.0), ClusterState(nodes)) is None


@pytest.mark.parametrize(("parameters", "placed"), [(ALONE, 2), (WITHOUT, 1)])
def test_a_flexible_pod_leaves_the_model_that_others_are_bound_to(parameters: GpuwiseParameters, placed: int) -> None:
    # A 4-GPU node of model A and a 1-GPU node of model B; as many pods bound to A as to B, and
    # as many that run anywhere: for fragmentation both nodes are alike, and B's node wins ties.
    nodes = Nodes.build(
        names=["a", "b"], cpu_milli=[64000] * 2, memory_mib=[1 << 20] * 2, gpus=[4, 1], models=["A", "B"]
    )
    pods = pods_of(nodes, (), ("A",), ("B",))
    state = ClusterState(nodes)
    policy = make_policy(parameters, PlacementContext.for_pods(state, pods, node_rank=np.array([1, 0])))
    rng = np.random.default_rng(0)
    for pod in (0, 2):  # one that runs anywhere, then one bound to B
        where = policy(state, pods.request(pod), rng)
        if where is not None:
            state.bind(pod, pods.request(pod), where)
    assert len(state.bindings) == placed


def test_where_no_pod_is_bound_to_a_model_it_changes_no_placement() -> None:
    for case in (0, 39):
        nodes, pods = generated(case, models=1)
        for seed in (1, 2):
            assert run_seed(nodes, pods, ALONE, seed).curve == run_seed(nodes, pods, WITHOUT, seed).curve
