"""MIG geometry: profile tables, validity, and plans checked against exhaustive search and a MILP."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence

import highspy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.decide.mig_geometry import (
    GpuState,
    InvalidGeometryError,
    MigInstance,
    NoGeometryError,
    geometries,
    plan_gpu,
    plan_node,
    problems,
)
from gpuwise.hardware.mig_profiles import GPU_MODELS, GpuModel, UnknownGpuModelError, UnknownProfileError, gpu_model

A100_40 = gpu_model("A100-40GB")


def instances(*spec: str) -> list[MigInstance]:
    """``"3g.20gb@4"`` -> MigInstance(4, "3g.20gb")."""
    return [MigInstance(int(s.split("@")[1]), s.split("@")[0]) for s in spec]


def test_profile_names_per_model_are_nvidias() -> None:
    names = {model: [p.name for p in GPU_MODELS[model].profiles] for model in GPU_MODELS}
    assert names["A100-40GB"] == ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    assert (
        names["A100-80GB"] == names["H100-80GB"] == ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    )
    assert names["H100-94GB"] == ["1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"]
    assert names["H200-141GB"] == ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]
    assert gpu_model("NVIDIA H100 80GB HBM3") is GPU_MODELS["H100-80GB"]
    assert gpu_model("h200-141gb") is GPU_MODELS["H200-141GB"]
    assert A100_40.profile("3g.20gb").resource_name == "nvidia.com/mig-3g.20gb"


def test_unknown_models_and_profiles_say_what_exists() -> None:
    with pytest.raises(
        UnknownGpuModelError, match=r"no MIG profile table for GPU model 'V100'; known models: A100-40GB"
    ):
        gpu_model("V100")
    with pytest.raises(UnknownProfileError, match=r"A100-40GB has no MIG profile '1g.10gb\+me'; its profiles are"):
        A100_40.profile("1g.10gb+me")


@pytest.mark.parametrize(
    "geometry",
    [
        ["7g.40gb@0"],
        ["4g.20gb@0", "3g.20gb@4"],
        ["4g.20gb@0", "2g.10gb@4", "1g.5gb@6"],
        ["3g.20gb@0", "3g.20gb@4"],
        ["2g.10gb@0", "2g.10gb@2", "3g.20gb@4"],
        ["2g.10gb@0", "2g.10gb@2", "2g.10gb@4", "1g.5gb@6"],
        [f"1g.5gb@{i}" for i in range(7)],
        ["1g.10gb@0", "1g.10gb@2", "1g.10gb@4", "1g.10gb@6"],
        [],
    ],
)
def test_geometries_from_nvidias_guide_are_valid(geometry: list[str]) -> None:
    assert problems(A100_40, instances(*geometry)) == []


@pytest.mark.parametrize(
    ("geometry", "problem"),
    [
        (["4g.20gb@4"], "cannot start at memory slice 4"),
        (["3g.20gb@0", "2g.10gb@2"], "overlaps"),
        (["1g.5gb@7"], "cannot start at memory slice 7"),
        (["2g.10gb@0", "2g.10gb@2", "2g.10gb@4", "2g.10gb@6"], "cannot start at memory slice 6"),
        (["7g.40gb@0", "1g.5gb@0"], "overlaps"),
        (["5g.25gb@0"], "has no MIG profile"),
    ],
)
def test_invalid_geometries_are_explained(geometry: list[str], problem: str) -> None:
    assert any(problem in found for found in problems(A100_40, instances(*geometry)))


@pytest.mark.parametrize("model", list(GPU_MODELS.values()), ids=list(GPU_MODELS))
def test_enumeration_is_exactly_the_valid_geometries(model: GpuModel) -> None:
    """Against brute force over every subset of the 18 possible (profile, start) placements."""
    placements = [
        (MigInstance(start, p.name), ((1 << p.memory_slices) - 1) << start)
        for p in model.profiles
        for start in p.starts
    ]
    valid = set()
    for size in range(len(placements) + 1):
        for subset in itertools.combinations(placements, size):
            masks = [mask for _, mask in subset]
            if sum(masks) != _or(masks):  # overlapping memory slices
                continue
            chosen = frozenset(instance for instance, _ in subset)
            if not problems(model, chosen):
                valid.add(chosen)
    enumerated = geometries(model)
    assert len(enumerated) == len(set(enumerated)) == len(valid)
    assert set(enumerated) == valid


def _or(masks: Sequence[int]) -> int:
    result = 0
    for mask in masks:
        result |= mask
    return result


@st.composite
def gpu_states(draw: st.DrawFn, model: str = "A100-80GB") -> GpuState:
    table = gpu_model(model)
    current = draw(st.sampled_from(geometries(table)))
    busy = frozenset(draw(st.sets(st.sampled_from(sorted(current)))) if current else ())
    return GpuState(model, tuple(sorted(current)), busy)


def demands(model: str = "A100-80GB", most: int = 4, least: int = 0) -> st.SearchStrategy[dict[str, int]]:
    names = [p.name for p in gpu_model(model).profiles]
    return st.dictionaries(st.sampled_from(names), st.integers(1, most), min_size=least, max_size=4)


@settings(max_examples=80, deadline=None)
@given(gpu_states(), demands(most=3))
def test_gpu_plan_is_valid_keeps_busy_instances_and_changes_least(state: GpuState, wanted: dict[str, int]) -> None:
    model = gpu_model(state.model)
    options = [g for g in geometries(model) if state.busy <= g]
    fitting = [g for g in options if all(Counter(i.profile for i in g - state.busy)[n] >= c for n, c in wanted.items())]
    if not fitting:
        with pytest.raises(NoGeometryError):
            plan_gpu(state, wanted)
        return
    plan = plan_gpu(state, wanted)
    assert problems(model, plan.instances) == []
    assert state.busy <= set(plan.instances)
    assert all(plan.free[name] >= count for name, count in wanted.items())
    assert plan.changes == min(len(g ^ set(state.instances)) for g in fitting)
    assert set(plan.instances) == (set(state.instances) - set(plan.destroyed)) | set(plan.created)


def objective(model: GpuModel, demand: dict[str, int], served: Counter[str], changes: int) -> tuple[int, int, int]:
    capped = {name: min(served[name], demand.get(name, 0)) for name in served}
    slices = sum(model.profile(name).compute_slices * count for name, count in capped.items())
    return slices, sum(capped.values()), -changes


def per_gpu_options(state: GpuState, reconfigure: bool, demand: dict[str, int]) -> list[tuple[Counter[str], int]]:
    """(free instances, changes) of every geometry the GPU may move to, written independently;
    geometries serving the same part of ``demand`` are kept once, with their fewest changes."""
    model, current = gpu_model(state.model), frozenset(state.instances)
    reachable = [current] if state.busy and not reconfigure else [g for g in geometries(model) if state.busy <= g]
    fewest: dict[tuple[tuple[str, int], ...], int] = {}
    for geometry in reachable:
        free = Counter(i.profile for i in geometry - state.busy)
        key = tuple(sorted((name, min(free[name], need)) for name, need in demand.items()))
        fewest[key] = min(fewest.get(key, 99), len(geometry ^ current))
    return [(Counter(dict(key)), changes) for key, changes in fewest.items()]


@settings(max_examples=25, deadline=None)
@given(st.lists(gpu_states(), min_size=1, max_size=2), demands(), st.booleans())
def test_node_plan_matches_exhaustive_search(gpus: list[GpuState], demand: dict[str, int], reconfigure: bool) -> None:
    model = gpu_model(gpus[0].model)
    plan = plan_node(gpus, demand, reconfigure_busy_gpus=reconfigure)
    best = max(
        objective(model, demand, sum((free for free, _ in combo), Counter()), sum(c for _, c in combo))
        for combo in itertools.product(*(per_gpu_options(gpu, reconfigure, demand) for gpu in gpus))
    )
    assert (plan.served_compute_slices, sum(plan.served.values()), -plan.changes) == best
    for gpu, state in zip(plan.gpus, gpus, strict=True):
        assert problems(model, gpu.instances) == [] and state.busy <= set(gpu.instances)


@settings(max_examples=8, deadline=None)
@given(st.lists(gpu_states("H100-80GB"), min_size=3, max_size=3), demands("H100-80GB", most=6, least=1))
def test_node_plan_matches_a_milp(gpus: list[GpuState], demand: dict[str, int]) -> None:
    """Three GPUs: the optimum of a mixed-integer program (HiGHS) over every geometry choice."""
    model = gpu_model("H100-80GB")
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", 0.0)  # the default 1e-4 would accept plans a few changes worse
    choose = [[(h.addBinary(), free, changes) for free, changes in per_gpu_options(g, True, demand)] for g in gpus]
    for options in choose:
        h.addConstr(sum(x for x, _, _ in options) == 1)
    served = {name: h.addIntegral(lb=0, ub=demand[name]) for name in demand}
    for name in demand:
        h.addConstr(served[name] <= sum(x * free[name] for options in choose for x, free, _ in options if free[name]))
    changes = sum(x * c for options in choose for x, _, c in options if c)
    slices = sum(served[name] * model.profile(name).compute_slices for name in demand)
    h.maximize(10_000 * slices + 100 * sum(served[name] for name in demand) - changes)
    optimum = round(h.getInfo().objective_function_value)
    plan = plan_node(gpus, demand, reconfigure_busy_gpus=True)
    assert 10_000 * plan.served_compute_slices + 100 * sum(plan.served.values()) - plan.changes == optimum


def test_busy_gpus_keep_their_geometry_under_mig_manager() -> None:
    busy = MigInstance(0, "3g.40gb")
    used = GpuState("A100-80GB", (busy, MigInstance(4, "3g.40gb")), frozenset({busy}))
    idle = GpuState("A100-80GB", tuple(instances("7g.80gb@0")))
    plan = plan_node([used, idle], {"1g.10gb": 3, "4g.40gb": 1})
    assert plan.gpus[0].changes == 0
    assert plan.served == {"1g.10gb": 3, "4g.40gb": 1}
    assert plan.gpus[1].destroyed == (MigInstance(0, "7g.80gb"),)
    dynamic = plan_node([used, idle], {"1g.10gb": 6, "4g.40gb": 1}, reconfigure_busy_gpus=True)
    assert busy in dynamic.gpus[0].instances and dynamic.served == {"1g.10gb": 6, "4g.40gb": 1}


def test_invalid_inputs_are_rejected_with_reasons() -> None:
    with pytest.raises(InvalidGeometryError, match=r"4g\.40gb cannot start at memory slice 4"):
        plan_node([GpuState("A100-80GB", tuple(instances("4g.40gb@4")))], {})
    with pytest.raises(InvalidGeometryError, match="not among the GPU's instances"):
        plan_gpu(GpuState("A100-80GB", (), frozenset(instances("1g.10gb@0"))), {})
    with pytest.raises(NoGeometryError, match=r"offers \{'7g.80gb': 1\} free next to the busy instances \(1g.10gb@0\)"):
        busy = frozenset(instances("1g.10gb@0"))
        plan_gpu(GpuState("A100-80GB", tuple(busy), busy), {"7g.80gb": 1})
    with pytest.raises(ValueError, match="must share a model"):
        plan_node([GpuState("A100-80GB"), GpuState("H100-80GB")], {})


def test_eight_gpu_nodes_plan_quickly_and_fill_every_slice() -> None:
    demand = {"1g.10gb": 5, "1g.20gb": 5, "2g.20gb": 5, "3g.40gb": 5, "4g.40gb": 5, "7g.80gb": 5}
    plan = plan_node([GpuState("H100-80GB")] * 8, demand)
    assert plan.served_compute_slices == 8 * 7


def test_among_equally_useful_plans_the_fewest_changes_wins() -> None:
    """Slices 6-7 are free next to busy instances: a 1g.10gb or a 1g.20gb fits there, not both.
    Either serves one compute slice of the demand; keeping the 1g.20gb already there changes
    nothing, carving a 1g.10gb instead would destroy one instance and create another."""
    busy = frozenset(instances("3g.40gb@0", "2g.20gb@4"))
    state = GpuState("H100-80GB", (*sorted(busy), *instances("1g.20gb@6")), busy)
    for reconfigure in (True, False):
        plan = plan_node([state], {"1g.10gb": 1, "1g.20gb": 1}, reconfigure_busy_gpus=reconfigure)
        assert plan.served == {"1g.20gb": 1} and plan.changes == 0
    assert plan_gpu(state, {"1g.10gb": 1}).changes == 2
