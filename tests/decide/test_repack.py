"""Repacking admits pods by migrating a bounded number of others, and undoes failed attempts."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.decide.packing.cluster import MILLI, Nodes, Placement, PodRequest, Pods
from gpuwise.decide.packing.fit import fits
from gpuwise.decide.packing.fragmentation import TargetWorkload
from gpuwise.decide.packing.policies import PlacementContext, Policy
from gpuwise.decide.packing.registry import make_policy
from gpuwise.decide.packing.repack import Repacker
from gpuwise.decide.packing.state import ClusterState

from .test_policies import clusters

ANY = np.array([True])


def request(num_gpu: int, milli: int, cpu: int = 1000) -> PodRequest:
    return PodRequest(cpu, 1024, num_gpu, milli if num_gpu else 0, ANY)


def repacker(nodes: Nodes, max_migrations: int = 2) -> tuple[ClusterState, Repacker]:
    state = ClusterState(nodes)
    return state, Repacker(gpuwise(state), state, max_migrations)


def gpuwise(state: ClusterState) -> Policy:
    pods = Pods.build(
        names=["w"], cpu_milli=[1000], memory_mib=[1], num_gpu=[1], gpu_milli=[500], gpu_models=[[]], models=("T4",)
    )
    return make_policy(
        "gpuwise", PlacementContext.create(state, TargetWorkload.from_pods(pods), np.random.default_rng(0))
    )


def snapshot(state: ClusterState) -> tuple[object, ...]:
    return (
        state.cpu_free.tolist(),
        state.memory_free.tolist(),
        state.gpu_free.tolist(),
        {k: b.placement for k, b in state.bindings.items()},
    )


def test_moving_a_small_pod_into_a_gap_frees_a_gpu_for_a_whole_gpu_pod() -> None:
    nodes = Nodes.build(names=["a"], cpu_milli=[32000], memory_mib=[65536], gpus=[2], models=["T4"])
    state, repack = repacker(nodes)
    state.bind(1, request(1, 810), Placement(0, (0,)))
    state.bind(2, request(1, 160), Placement(0, (1,)))
    whole = request(1, MILLI)
    assert not fits(state, whole).any()
    assert repack.admit(3, whole, np.random.default_rng(0)) == 1
    assert state.bindings[3].placement == Placement(0, (1,))
    assert state.bindings[2].placement == Placement(0, (0,))
    assert state.allocated_gpu_milli == 810 + 160 + MILLI


def test_moving_cpu_only_pods_frees_cpu_next_to_an_idle_gpu() -> None:
    nodes = Nodes.build(
        names=["gpu-rich", "cpu-rich"], cpu_milli=[8000, 64000], memory_mib=[65536] * 2, gpus=[2, 1], models=["T4"] * 2
    )
    state, repack = repacker(nodes)
    state.bind(1, request(0, 0, cpu=8000), Placement(0, ()))
    state.bind(2, request(1, MILLI), Placement(1, (0,)))
    gpu_pod = request(1, MILLI, cpu=4000)
    assert not fits(state, gpu_pod).any()
    assert repack.admit(3, gpu_pod, np.random.default_rng(0)) == 1
    assert state.bindings[3].placement.node == 0
    assert state.bindings[1].placement.node == 1


def test_a_failed_attempt_leaves_everything_as_it_was() -> None:
    nodes = Nodes.build(names=["a"], cpu_milli=[32000], memory_mib=[65536], gpus=[2], models=["T4"])
    state, repack = repacker(nodes)
    state.bind(1, request(1, 810), Placement(0, (0,)))
    state.bind(2, request(1, 300), Placement(0, (1,)))  # 300 fits no gap: nothing can move
    before = snapshot(state)
    assert repack.admit(3, request(1, MILLI), np.random.default_rng(0)) is None
    assert snapshot(state) == before


def test_migrations_are_bounded() -> None:
    nodes = Nodes.build(names=["a"], cpu_milli=[32000], memory_mib=[65536], gpus=[3], models=["T4"])
    state, repack = repacker(nodes, max_migrations=1)
    state.bind(1, request(1, 700), Placement(0, (0,)))
    state.bind(2, request(1, 600), Placement(0, (1,)))
    state.bind(3, request(1, 200), Placement(0, (2,)))
    state.bind(4, request(1, 250), Placement(0, (2,)))  # clearing GPU 2 takes both moves; nothing else helps
    before = snapshot(state)
    assert repack.admit(5, request(1, MILLI), np.random.default_rng(0)) is None
    assert snapshot(state) == before
    assert Repacker(repack.policy, state, 2).admit(5, request(1, MILLI), np.random.default_rng(0)) == 2


def test_cpu_only_pods_are_not_repacked_for() -> None:
    nodes = Nodes.build(names=["a"], cpu_milli=[1000], memory_mib=[65536], gpus=[1], models=["T4"])
    state, repack = repacker(nodes)
    state.bind(1, request(0, 0, cpu=1000), Placement(0, ()))
    assert repack.admit(2, request(0, 0, cpu=1000), np.random.default_rng(0)) is None


@settings(max_examples=40, deadline=None)
@given(clusters(), st.integers(0, 1000), st.integers(1, 3))
def test_repacking_keeps_every_placement_valid(cluster: tuple[Nodes, Pods], seed: int, budget: int) -> None:
    nodes, pods = cluster
    rng = np.random.default_rng(seed)
    state = ClusterState(nodes)
    policy = make_policy("gpuwise", PlacementContext.create(state, TargetWorkload.from_pods(pods), rng))
    repack = Repacker(policy, state, budget)
    running = 0
    for event, pod in enumerate(rng.integers(len(pods), size=4 * len(pods)).tolist()):
        wanted = pods.request(pod)
        where = policy(state, wanted, rng)
        if where is not None:
            state.bind(event, wanted, where)
        else:
            moved = repack.admit(event, wanted, rng)
            assert moved is None or 1 <= moved <= budget
            assert (moved is not None) == (event in state.bindings)
        running += event in state.bindings
        assert len(state.bindings) == running
    assert (state.cpu_free >= 0).all() and (state.memory_free >= 0).all() and (state.gpu_free >= -1).all()
    assert state.allocated_gpu_milli == sum(b.request.total_gpu_milli for b in state.bindings.values())
