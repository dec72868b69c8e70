"""Feasibility, candidate placements and the state's refusal to over-commit."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwise.decide.packing.cluster import Nodes, Placement, PodRequest
from gpuwise.decide.packing.fit import WHOLE_GPUS, candidates, fits, placement
from gpuwise.decide.packing.state import ClusterState, PlacementError

NODES = Nodes.build(
    names=["a", "b", "c"],
    cpu_milli=[16000, 4000, 64000],
    memory_mib=[65536, 65536, 1024],
    gpus=[4, 2, 8],
    models=["T4", "T4", "V100"],
)


def pod(cpu: int = 1000, memory: int = 512, num_gpu: int = 1, milli: int = 500, models: str = "") -> PodRequest:
    allowed = np.array([not models or m in models.split("|") for m in NODES.models])
    return PodRequest(cpu, memory, num_gpu, milli if num_gpu else 0, allowed)


def test_each_resource_can_rule_a_node_out() -> None:
    state = ClusterState(NODES)
    assert fits(state, pod()).tolist() == [True, True, True]
    assert fits(state, pod(cpu=8000)).tolist() == [True, False, True]
    assert fits(state, pod(memory=2048)).tolist() == [True, True, False]
    assert fits(state, pod(models="V100")).tolist() == [False, False, True]
    assert fits(state, pod(num_gpu=4, milli=1000)).tolist() == [True, False, True]
    assert fits(state, pod(num_gpu=0, cpu=60000)).tolist() == [False, False, True]


def test_sharing_needs_one_gpu_with_room_and_whole_gpus_need_free_ones() -> None:
    state = ClusterState(NODES)
    state.bind(1, pod(milli=600), Placement(1, (0,)))
    state.bind(2, pod(milli=600), Placement(1, (1,)))
    assert not fits(state, pod(milli=500))[1]
    assert fits(state, pod(milli=400))[1]
    assert not fits(state, pod(num_gpu=1, milli=1000))[1]


def test_candidates_are_one_per_distinct_free_amount_lowest_gpu_first() -> None:
    state = ClusterState(NODES)
    state.bind(1, pod(milli=300), Placement(0, (2,)))
    cands = candidates(state, pod(milli=500), among=np.array([True, False, False]))
    assert sorted(zip(cands.gpu.tolist(), cands.gpu_before.tolist(), strict=True)) == [(0, 1000), (2, 700)]
    assert (cands.gpu_after == cands.gpu_before - 500).all()
    assert (cands.cpu_free == 16000 - 1000 - 1000).all()  # the bound pod and the new one


def test_whole_gpu_candidates_take_the_lowest_free_gpus() -> None:
    state = ClusterState(NODES)
    state.bind(1, pod(milli=300), Placement(0, (0,)))
    request = pod(num_gpu=2, milli=1000)
    cands = candidates(state, request)
    assert cands.gpus_changed == 2 and (cands.gpu == WHOLE_GPUS).all()
    assert placement(state, request, 0) == Placement(0, (1, 2))


def test_state_refuses_to_over_commit_and_unbind_restores() -> None:
    state = ClusterState(NODES)
    before = (state.cpu_free.copy(), state.memory_free.copy(), state.gpu_free.copy())
    state.bind(1, pod(milli=700), Placement(0, (1,)))
    with pytest.raises(PlacementError, match="GPU 1 lacks 500 free milli"):
        state.bind(2, pod(milli=500), Placement(0, (1,)))
    with pytest.raises(PlacementError, match="not allowed"):
        state.bind(3, pod(models="V100"), Placement(0, (0,)))
    with pytest.raises(PlacementError, match="already bound"):
        state.bind(1, pod(), Placement(2, (0,)))
    state.unbind(1)
    assert all((a == b).all() for a, b in zip(before, (state.cpu_free, state.memory_free, state.gpu_free), strict=True))
    assert state.allocated_gpu_milli == 0
