"""The vectorized fragmentation measures agree with their definitions, written out naively."""

from __future__ import annotations

from random import Random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.decide.packing.cluster import MILLI, Nodes, PodRequest, Pods
from gpuwise.decide.packing.fit import candidates, placement
from gpuwise.decide.packing.fragmentation import (
    NEXT_POD_WEIGHT,
    FillFragmentation,
    FragmentationIndex,
    FragmentationMeasure,
    NextPodFragmentation,
    TargetWorkload,
    TwoHorizonFragmentation,
)
from gpuwise.decide.packing.policies import PlacementContext, RandomPolicy
from gpuwise.decide.packing.state import ABSENT_GPU, ClusterState

MODELS = ("T4", "V100")


@st.composite
def workloads(draw: st.DrawFn, multi_gpu: bool = False) -> TargetWorkload:
    """Random target workloads; with ``multi_gpu``, always with a 2-GPU shape (the one shape
    whose fit depends on the count of fitting GPUs rather than on their free milli)."""
    size = draw(st.integers(1, 6))
    num_gpu = [draw(st.sampled_from([0, 1, 1, 1, 2, 4])) for _ in range(size)]
    if multi_gpu:
        num_gpu[0] = 2
    milli = [draw(st.integers(1, 100)) * 10 if k == 1 else (MILLI if k else 0) for k in num_gpu]
    allowed = [[draw(st.booleans()) or m == 0 for m in range(len(MODELS))] for _ in range(size)]
    weight = np.array([draw(st.integers(1, 20)) for _ in range(size)], dtype=np.float64)
    return TargetWorkload(
        cpu_milli=np.array([draw(st.integers(0, 16)) * 1000 for _ in range(size)], dtype=np.int64),
        num_gpu=np.array(num_gpu, dtype=np.int64),
        gpu_milli=np.array(milli, dtype=np.int64),
        allowed=np.array(allowed, dtype=np.bool_),
        weight=weight / weight.sum(),
    )


@st.composite
def node_states(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    count = draw(st.integers(1, 5))
    free = np.full((count, 8), ABSENT_GPU, dtype=np.int64)
    for row in range(count):
        gpus = draw(st.integers(1, 8))
        free[row, :gpus] = [draw(st.sampled_from([0, MILLI, *range(0, MILLI, 10)])) for _ in range(gpus)]
    cpu = np.array([draw(st.integers(0, 20)) * 1000 for _ in range(count)], dtype=np.int64)
    model = np.array([draw(st.integers(0, len(MODELS) - 1)) for _ in range(count)], dtype=np.int64)
    return free, cpu, model


def next_pod_waste(w: TargetWorkload, free: list[int], cpu: int, model: int) -> float:
    """FGD's definition (Weng et al., ATC'23), one shape at a time."""
    gpus = [f for f in free if f >= 0]
    idle, total = sum(gpus), 0.0
    for t in range(len(w)):
        m, k = int(w.gpu_milli[t]), int(w.num_gpu[t])
        runs = k > 0 and w.allowed[t, model] and cpu >= w.cpu_milli[t] and sum(f >= m for f in gpus) >= k
        total += w.weight[t] * (sum(f for f in gpus if f < m) if runs else idle)
    return total


def fill_waste(w: TargetWorkload, free: list[int], cpu: int, model: int) -> float:
    """What stays idle after filling the node with as many tasks of each shape as fit."""
    gpus = [f for f in free if f >= 0]
    idle, total = sum(gpus), 0.0
    for t in range(len(w)):
        m, k, c = int(w.gpu_milli[t]), int(w.num_gpu[t]), int(w.cpu_milli[t])
        copies = 0
        if k and w.allowed[t, model]:
            copies = sum(f // m for f in gpus) // k
            if c:
                copies = min(copies, cpu // c)
        total += w.weight[t] * (idle - copies * k * m)
    return total


def two_horizon_waste(w: TargetWorkload, free: list[int], cpu: int, model: int) -> float:
    weight = NEXT_POD_WEIGHT
    return weight * next_pod_waste(w, free, cpu, model) + (1 - weight) * fill_waste(w, free, cpu, model)


REFERENCES = {
    NextPodFragmentation: next_pod_waste,
    FillFragmentation: fill_waste,
    TwoHorizonFragmentation: two_horizon_waste,
}


@settings(max_examples=150, deadline=None)
@given(workloads(), node_states(), st.sampled_from(sorted(REFERENCES, key=lambda c: c.__name__)))
def test_node_fragmentation_matches_the_definition(
    workload: TargetWorkload, states: tuple[np.ndarray, np.ndarray, np.ndarray], kind: type[FragmentationMeasure]
) -> None:
    free, cpu, model = states
    measure = kind(workload)
    got = measure.amount(measure.summarize(free), cpu, model)
    want = [REFERENCES[kind](workload, list(free[i]), int(cpu[i]), int(model[i])) for i in range(len(cpu))]
    np.testing.assert_allclose(got, want, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(
    workloads(multi_gpu=True), st.integers(0, 2**32 - 1), st.sampled_from(sorted(REFERENCES, key=lambda c: c.__name__))
)
def test_candidate_growth_matches_recomputing_the_node(
    workload: TargetWorkload, seed: int, kind: type[FragmentationMeasure]
) -> None:
    rng = np.random.default_rng(seed)
    nodes = Nodes.build(
        names=[f"n{i}" for i in range(4)],
        cpu_milli=[16000, 32000, 8000, 64000],
        memory_mib=[1 << 20] * 4,
        gpus=[8, 2, 1, 4],
        models=["T4", "V100", "T4", "V100"],
    )
    pods = Pods.build(
        names=[f"p{i}" for i in range(5)],
        cpu_milli=[1000, 2000, 4000, 0, 3000],
        memory_mib=[1] * 5,
        num_gpu=[1, 1, 2, 0, 1],
        gpu_milli=[250, 600, 1000, 0, 1000],
        gpu_models=[[], [], [], [], ["V100"]],
        models=nodes.models,
    )
    state = ClusterState(nodes)
    index = FragmentationIndex(kind(workload), state)
    policy = RandomPolicy(PlacementContext.create(state, workload, rng))
    for event in range(int(rng.integers(0, 25))):
        request = pods.request(int(rng.integers(len(pods))))
        where = policy(state, request, rng)
        if where is not None:
            state.bind(event, request, where)
    reference = REFERENCES[kind]
    for pod in range(len(pods)):
        request = pods.request(pod)
        cands = candidates(state, request)
        growth = index.increase(cands)
        for i in range(len(cands)):
            node = int(cands.node[i])
            free = state.gpu_free[node].copy()
            for gpu in placement(state, request, node, int(cands.gpu[i])).gpus:
                free[gpu] -= request.gpu_milli
            before = reference(workload, list(state.gpu_free[node]), int(state.cpu_free[node]), int(nodes.model[node]))
            after = reference(
                workload, list(free), int(state.cpu_free[node]) - request.cpu_milli, int(nodes.model[node])
            )
            assert abs(growth[i] - (after - before)) < 1e-6


@settings(max_examples=150, deadline=None)
@given(workloads(), node_states(), st.sampled_from(sorted(REFERENCES, key=lambda c: c.__name__)), st.randoms())
def test_a_node_state_measures_the_same_to_the_bit_alone_or_among_others(
    workload: TargetWorkload,
    states: tuple[np.ndarray, np.ndarray, np.ndarray],
    kind: type[FragmentationMeasure],
    shuffle: Random,
) -> None:
    """Growth is a difference of two amounts measured in different batches (the candidates, the
    node now); if a row's amount hung on its batch, a placement that changes nothing would grow
    by a rounding error, and FGD's integer score of 50 for no growth would be 49 or 50 by luck."""
    free, cpu, model = states
    measure = kind(workload)
    rows = [*range(len(cpu))] * 3
    shuffle.shuffle(rows)
    together = measure.amount(measure.summarize(free[rows]), cpu[rows], model[rows])
    alone = [measure.amount(measure.summarize(free[[row]]), cpu[[row]], model[[row]])[0] for row in rows]
    assert together.tolist() == alone


def test_a_placement_that_changes_no_gpu_grows_fragmentation_by_exactly_zero() -> None:
    rng = np.random.default_rng(7)
    shapes = 40
    weight = rng.random(shapes)
    workload = TargetWorkload(
        cpu_milli=rng.integers(0, 8, shapes) * 1000,
        num_gpu=rng.choice([1, 1, 1, 2, 4], shapes),
        gpu_milli=rng.integers(1, 100, shapes) * 10,
        allowed=np.ones((shapes, 1), dtype=np.bool_),
        weight=weight / weight.sum(),
    )
    workload.gpu_milli[workload.num_gpu > 1] = MILLI
    nodes = Nodes.build(
        names=[f"n{i}" for i in range(30)],
        cpu_milli=[96000] * 30,
        memory_mib=[1 << 20] * 30,
        gpus=[8] * 30,
        models=["T4"] * 30,
    )
    state = ClusterState(nodes)
    indexes = [FragmentationIndex(kind(workload), state) for kind in REFERENCES]
    policy = RandomPolicy(PlacementContext.create(state, workload, rng))
    nothing = PodRequest(cpu_milli=0, memory_mib=0, num_gpu=0, gpu_milli=0, allowed_models=np.ones(1, dtype=np.bool_))
    for event in range(200):
        shape = int(rng.integers(shapes))
        request = PodRequest(
            cpu_milli=int(workload.cpu_milli[shape]),
            memory_mib=0,
            num_gpu=int(workload.num_gpu[shape]),
            gpu_milli=int(workload.gpu_milli[shape]),
            allowed_models=np.ones(1, dtype=np.bool_),
        )
        where = policy(state, request, rng)
        if where is not None:
            state.bind(event, request, where)
        for index in indexes:
            assert not index.increase(candidates(state, nothing)).any()


def test_target_workload_keeps_the_most_common_shapes_up_to_coverage() -> None:
    pods = Pods.build(
        names=[f"p{i}" for i in range(10)],
        cpu_milli=[1] * 5 + [2] * 3 + [3] * 2,
        memory_mib=[1] * 10,
        num_gpu=[1] * 10,
        gpu_milli=[100] * 10,
        gpu_models=[[]] * 10,
        models=MODELS,
    )
    assert TargetWorkload.from_pods(pods, coverage=0.5).cpu_milli.tolist() == [1]
    kept = TargetWorkload.from_pods(pods, coverage=0.7)
    assert kept.cpu_milli.tolist() == [1, 2]
    np.testing.assert_allclose(kept.weight, [5 / 8, 3 / 8])
    assert len(TargetWorkload.from_pods(pods, coverage=1.0)) == 3


def test_fill_fragmentation_sees_leftovers_the_next_pod_measure_does_not() -> None:
    """One free GPU and an 810-milli workload: the next pod fits (no fragment for FGD), but 190
    milli will be left whatever comes; and three free GPUs with CPU for one task waste two."""
    only_810 = TargetWorkload(
        np.array([4000]), np.array([1]), np.array([810]), np.ones((1, 2), dtype=np.bool_), np.array([1.0])
    )
    free = np.array([[MILLI, ABSENT_GPU, ABSENT_GPU], [MILLI, MILLI, MILLI]])
    cpu, model = np.array([32000, 4000]), np.array([0, 0])
    fgd, fill = NextPodFragmentation(only_810), FillFragmentation(only_810)
    assert fgd.amount(fgd.summarize(free), cpu, model).tolist() == [0.0, 0.0]
    assert fill.amount(fill.summarize(free), cpu, model).tolist() == [190.0, 3000.0 - 810.0]


@settings(max_examples=60, deadline=None)
@given(workloads(), node_states(), st.sampled_from([0.0, 0.3, 0.5, 0.7, 1.0]))
def test_the_two_horizons_weigh_as_asked(
    workload: TargetWorkload, states: tuple[np.ndarray, np.ndarray, np.ndarray], weight: float
) -> None:
    free, cpu, model = states
    measure = TwoHorizonFragmentation(workload, weight)
    got = measure.amount(measure.summarize(free), cpu, model)
    want = [
        weight * next_pod_waste(workload, list(free[i]), int(cpu[i]), int(model[i]))
        + (1 - weight) * fill_waste(workload, list(free[i]), int(cpu[i]), int(model[i]))
        for i in range(len(cpu))
    ]
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_a_horizon_weight_outside_zero_to_one_is_refused() -> None:
    workload = TargetWorkload(
        cpu_milli=np.array([1000]),
        num_gpu=np.array([1]),
        gpu_milli=np.array([500]),
        allowed=np.ones((1, 2), dtype=np.bool_),
        weight=np.ones(1),
    )
    for weight in (-0.1, 1.1):
        with pytest.raises(ValueError, match="next_pod_weight must be in"):
            TwoHorizonFragmentation(workload, weight)
