"""The rehearsal: what it draws, that it scores what the simulator measures, and that its choice
is the policy that fills more on arrivals it never saw."""

from __future__ import annotations

import statistics
from dataclasses import replace

import numpy as np
import pytest

from gpuwise.decide.packing.cluster import MILLI, Nodes, Placement, PodRequest, Pods
from gpuwise.decide.packing.fragmentation import TargetWorkload
from gpuwise.decide.packing.gpuwise_policy import GpuwiseParameters, GpuwisePolicy
from gpuwise.decide.packing.policies import PlacementContext, Policy
from gpuwise.decide.packing.registry import PolicyChoice, make_policy
from gpuwise.decide.packing.rehearsal import (
    CLEAR_ERRORS,
    REHEARSAL_RATIO,
    UNDECIDED_EXTENSION,
    Score,
    Verdict,
    compare,
    compare_all,
    draw_arrivals,
    fingerprint,
    preferred,
    rehearse,
)
from gpuwise.decide.packing.state import ClusterState
from gpuwise.simulate.experiment import run_seed
from gpuwise.simulate.generated import generated
from gpuwise.simulate.replay import empty_cluster_context, replay

TWO_HORIZONS = GpuwiseParameters(rehearsed_arrivals=0)
LEVELS = ("at_capacity", "at_end")


def mix_of(*shapes: tuple[int, int, int, float], models: int = 1) -> TargetWorkload:
    """A mix of (cpu milli, GPUs, GPU milli, weight) shapes, each accepting every model."""
    cpu, gpus, milli, weight = (np.array(column) for column in zip(*shapes, strict=True))
    return TargetWorkload(
        cpu_milli=cpu.astype(np.int64),
        num_gpu=gpus.astype(np.int64),
        gpu_milli=milli.astype(np.int64),
        allowed=np.ones((len(shapes), models), dtype=np.bool_),
        weight=weight.astype(np.float64),
    )


def test_arrivals_come_by_weight_until_the_next_would_pass_the_demand() -> None:
    mix = mix_of((4000, 1, MILLI, 0.75), (2000, 1, 500, 0.25))
    arrivals = draw_arrivals(mix, 10_000_000, np.random.default_rng(3))
    demand = sum(request.total_gpu_milli for request in arrivals)
    assert 10_000_000 - MILLI < demand <= 10_000_000
    whole = [request for request in arrivals if request.gpu_milli == MILLI]
    assert len(whole) / len(arrivals) == pytest.approx(0.75, abs=0.02)
    assert {(r.cpu_milli, r.num_gpu, r.gpu_milli, r.memory_mib) for r in arrivals} == {
        (4000, 1, MILLI, 0),
        (2000, 1, 500, 0),
    }
    with pytest.raises(ValueError, match="no shape of the mix asks for a GPU"):
        draw_arrivals(mix_of((4000, 0, 0, 1.0)), 1000, np.random.default_rng(0))


def test_arrivals_accept_the_gpu_models_their_shape_accepts() -> None:
    mix = mix_of((4000, 1, MILLI, 0.5), (2000, 1, 500, 0.5), models=2)
    mix.allowed[1, 0] = False  # the half-GPU shape runs only on the second model
    arrivals = draw_arrivals(mix, 100_000, np.random.default_rng(5))
    accepted = {(r.gpu_milli, tuple(r.allowed_models.tolist())) for r in arrivals}
    assert accepted == {(MILLI, (True, True)), (500, (False, True))}


def simulated(context: PlacementContext, choice: PolicyChoice, draw: int) -> Score:
    """What the simulator's replay allocates, for ``choice`` on one rehearsal draw of an empty cluster."""
    nodes = context.state.nodes
    rng = np.random.default_rng(draw)
    requests = draw_arrivals(context.mix, REHEARSAL_RATIO * nodes.gpu_capacity_milli, rng)
    pods = Pods.build(
        names=[str(i) for i in range(len(requests))],
        cpu_milli=[r.cpu_milli for r in requests],
        memory_mib=[r.memory_mib for r in requests],
        num_gpu=[r.num_gpu for r in requests],
        gpu_milli=[r.gpu_milli for r in requests],
        gpu_models=[[m for m, ok in zip(nodes.models, r.allowed_models, strict=True) if ok] for r in requests],
        models=nodes.models,
    )
    # The replay takes the node order for ties from the same generator, next: as the rehearsal does.
    run = replay(nodes, pods, np.arange(len(pods)), choice, rng, workload=context.workload)
    crossed = int(np.argmax(run.curve.arrived >= nodes.gpu_capacity_milli))
    return Score(float(run.curve.allocated[crossed]), float(run.curve.allocated[-1]))


@pytest.mark.parametrize(("case", "models"), [(0, 1), (39, 1), (0, 3)])
def test_a_rehearsal_scores_what_the_simulator_measures(case: int, models: int) -> None:
    nodes, pods = generated(case, models=models)
    context = empty_cluster_context(nodes, pods, np.random.default_rng(0))
    candidates = [lambda c: make_policy(TWO_HORIZONS, c), lambda c: make_policy("fgd", c)]
    assert rehearse(context, candidates, arrivals=1) == [
        simulated(context, TWO_HORIZONS, 0),
        simulated(context, "fgd", 0),
    ]

    # Draws go on until the arrivals are reached, or the most draws allowed; the score is their mean.
    three = [simulated(context, "fgd", draw) for draw in range(3)]
    mean = Score(statistics.fmean(s.at_capacity for s in three), statistics.fmean(s.at_end for s in three))
    assert rehearse(context, candidates[1:], arrivals=10**9, max_draws=3) == [mean]
    first = len(draw_arrivals(context.mix, REHEARSAL_RATIO * nodes.gpu_capacity_milli, np.random.default_rng(0)))
    two = [simulated(context, "fgd", draw) for draw in range(2)]
    assert rehearse(context, candidates[1:], arrivals=first + 1) == [
        Score(statistics.fmean(s.at_capacity for s in two), statistics.fmean(s.at_end for s in two))
    ]
    with pytest.raises(ValueError, match="arrivals must be at least 1"):
        rehearse(context, candidates, arrivals=0)


@pytest.mark.parametrize(("case", "decided_after"), [(0, 2), (22, 3), (63, 2)])
def test_a_comparison_draws_on_while_neither_policy_is_clearly_ahead(case: int, decided_after: int) -> None:
    nodes, pods = generated(case)
    context = empty_cluster_context(nodes, pods, np.random.default_rng(0))
    capacity = nodes.gpu_capacity_milli
    arrived = np.cumsum(
        [len(draw_arrivals(context.mix, REHEARSAL_RATIO * capacity, np.random.default_rng(k))) for k in range(60)]
    )
    arrivals = int(arrived[1])  # two draws at the least

    def two(c: PlacementContext) -> Policy:
        return make_policy(TWO_HORIZONS, c)

    def fgd(c: PlacementContext) -> Policy:
        return make_policy("fgd", c)

    # A policy against itself is never ahead: the draws go on until twice the arrivals.
    same = compare(context, fgd, fgd, arrivals)
    assert same == Verdict(Score(0.0, 0.0), 0.0, int(np.searchsorted(arrived, UNDECIDED_EXTENSION * arrivals)) + 1)
    assert not same.clear_lead and not same.decided

    # The verdict is the mean of each draw's difference at each level, and the standard error of
    # the total's, as the simulator measures them; the draws stopped at the first one past the
    # arrivals where one was ahead.
    verdict = compare(context, two, fgd, arrivals)
    assert verdict.draws == decided_after
    draws = range(verdict.draws)
    ours, theirs = ([simulated(context, choice, k) for k in draws] for choice in (TWO_HORIZONS, "fgd"))

    def after(draws: int) -> Verdict:
        pairs = list(zip(ours[:draws], theirs[:draws], strict=True))
        gains = Score(*(statistics.fmean(getattr(a, level) - getattr(b, level) for a, b in pairs) for level in LEVELS))
        error = statistics.stdev(a.total - b.total for a, b in pairs) / np.sqrt(draws)
        return Verdict(gains, error, draws)

    expected = after(verdict.draws)
    assert verdict.gains.at_capacity == pytest.approx(expected.gains.at_capacity)
    assert verdict.gains.at_end == pytest.approx(expected.gains.at_end)
    assert verdict.gain == pytest.approx(expected.gain)
    assert verdict.lower_gain == min(verdict.gains.at_capacity, verdict.gains.at_end)
    assert verdict.error == pytest.approx(expected.error)
    assert verdict.decided or arrived[verdict.draws - 1] >= UNDECIDED_EXTENSION * arrivals
    assert all(not after(k).decided for k in range(2, verdict.draws))
    assert verdict.clear_lead == (verdict.gain > CLEAR_ERRORS * verdict.error)
    with pytest.raises(ValueError, match="arrivals must be at least 1"):
        compare(context, two, fgd, 0)


@pytest.mark.parametrize(("case", "leader_ahead"), [(0, True), (63, False)])
def test_several_challengers_are_compared_on_the_same_draws_until_the_leader_is_decided(
    case: int, leader_ahead: bool
) -> None:
    nodes, pods = generated(case)
    context = empty_cluster_context(nodes, pods, np.random.default_rng(0))
    capacity = nodes.gpu_capacity_milli
    arrived = np.cumsum(
        [len(draw_arrivals(context.mix, REHEARSAL_RATIO * capacity, np.random.default_rng(k))) for k in range(60)]
    )
    arrivals = int(arrived[1])

    def two(c: PlacementContext) -> Policy:
        return make_policy(TWO_HORIZONS, c)

    def fgd(c: PlacementContext) -> Policy:
        return make_policy("fgd", c)

    verdicts = compare_all(context, [two, fgd], fgd, arrivals)
    alone = compare(context, two, fgd, arrivals)
    if leader_ahead:
        # The two horizons lead, and once they are clearly ahead the draws stop, as they do with
        # them alone: FGD against itself (never decided) does not hold the comparison open.
        assert alone.clear_lead
        assert verdicts == [alone, Verdict(Score(0.0, 0.0), 0.0, alone.draws)]
    else:
        # FGD against itself leads (the two horizons are behind) and is never decided: the draws
        # go on to twice the arrivals, for both challengers alike.
        assert alone.gain < 0
        extended = int(np.searchsorted(arrived, UNDECIDED_EXTENSION * arrivals)) + 1
        assert verdicts[1] == Verdict(Score(0.0, 0.0), 0.0, extended)
        assert verdicts[0].draws == extended and verdicts[0].gain < 0
    with pytest.raises(ValueError, match="at least one challenger"):
        compare_all(context, [], fgd, arrivals)


def test_of_the_challengers_clearly_ahead_the_one_whose_lower_level_gained_most_is_preferred() -> None:
    def verdict(at_capacity: float, at_end: float, error: float = 1.0) -> Verdict:
        return Verdict(Score(at_capacity, at_end), error, draws=4)

    evenly = verdict(300, 300)
    at_capacity_only = verdict(640, 2)  # more in all, nearly nothing at the end
    unclear = verdict(400, 400, error=500)  # the most at both levels, within the noise
    assert preferred([at_capacity_only, evenly, unclear]) == 1
    assert preferred([unclear, at_capacity_only]) == 1, "a lead at one level is still a lead"
    assert preferred([evenly, verdict(301, 299)]) == 0, "the first of equal lower levels"
    assert preferred([unclear, verdict(-50, 40)]) is None
    # A single draw shows no spread, so no lead is clear however large.
    assert preferred([Verdict(Score(900, 900), 0.0, draws=1)]) is None
    assert at_capacity_only.gain > evenly.gain and at_capacity_only.lower_gain == 2


def test_without_a_clear_lead_the_policy_places_as_fgd() -> None:
    """On case 6 the two horizons allocate a little more over the draws a small budget allows, but
    not by two standard errors: the policy places as FGD, the reference."""
    nodes, pods = generated(6)
    context = empty_cluster_context(nodes, pods, np.random.default_rng(0))
    capacity = nodes.gpu_capacity_milli
    arrivals = sum(
        len(draw_arrivals(context.mix, REHEARSAL_RATIO * capacity, np.random.default_rng(k))) for k in range(2)
    )
    verdict = compare(context, lambda c: make_policy(TWO_HORIZONS, c), lambda c: make_policy("fgd", c), arrivals)
    assert verdict.gain > 0 and not verdict.decided and verdict.draws > 2
    assert GpuwisePolicy(context, GpuwiseParameters(rehearsed_arrivals=arrivals, other_weights=())).as_fgd


def test_a_rehearsal_leaves_the_cluster_as_it_found_it_and_counts_what_runs() -> None:
    nodes = Nodes.build(
        names=["a", "b"], cpu_milli=[64_000] * 2, memory_mib=[1 << 20] * 2, gpus=[4, 4], models=["A"] * 2
    )
    state = ClusterState(nodes)
    whole = mix_of((4000, 1, MILLI, 1.0))
    one_gpu = PodRequest(cpu_milli=4000, memory_mib=0, num_gpu=1, gpu_milli=MILLI, allowed_models=np.ones(1, np.bool_))
    for pod in range(8):
        state.bind(pod, one_gpu, Placement(pod // 4, (pod % 4,)))
    before = (state.cpu_free.copy(), state.gpu_free.copy(), dict(state.bindings), state.revision.copy())
    context = PlacementContext(state, whole, np.arange(2))
    # A full cluster: every arrival is turned away, and what runs is what each candidate has allocated.
    assert rehearse(context, [lambda c: make_policy("fgd", c)], arrivals=5) == [Score(8000.0, 8000.0)]
    assert np.array_equal(state.cpu_free, before[0]) and np.array_equal(state.gpu_free, before[1])
    assert state.bindings == before[2] and np.array_equal(state.revision, before[3])


def test_the_fingerprint_changes_with_what_changes_the_answer() -> None:
    nodes, pods = generated(0)
    context = empty_cluster_context(nodes, pods, np.random.default_rng(0))
    same = empty_cluster_context(nodes, pods, np.random.default_rng(1))  # another node order for ties
    assert fingerprint(context, TWO_HORIZONS) == fingerprint(same, TWO_HORIZONS)
    assert fingerprint(context, TWO_HORIZONS) != fingerprint(context, GpuwiseParameters())
    busy = empty_cluster_context(nodes, pods, np.random.default_rng(0))
    gpu_pod = int(np.flatnonzero(pods.num_gpu == 1)[0])
    busy.state.bind(0, pods.request(gpu_pod), Placement(int(np.argmax(nodes.gpus)), (0,)))
    assert fingerprint(busy, TWO_HORIZONS) != fingerprint(context, TWO_HORIZONS)
    fewer = TargetWorkload.from_pods(pods.take(np.arange(100)), 1.0)
    other_mix = PlacementContext(context.state, context.workload, context.node_rank, fewer)
    assert fingerprint(other_mix, TWO_HORIZONS) != fingerprint(context, TWO_HORIZONS)


SEEDS = range(100, 106)


def held_out_gains(nodes: Nodes, pods: Pods, choice: PolicyChoice) -> list[float]:
    """Per seed of the trace's own arrival orders, ``choice``'s allocation minus FGD's (the mean
    of @100 and @130)."""
    gains = []
    for seed in SEEDS:
        ours, fgd = run_seed(nodes, pods, choice, seed), run_seed(nodes, pods, "fgd", seed)
        gains.append((ours.alloc_at_100 - fgd.alloc_at_100 + ours.alloc_at_130 - fgd.alloc_at_130) / 2)
    return gains


@pytest.mark.parametrize(
    ("case", "models", "best"),
    [(2, 1, 0.5), (39, 1, 0.9), (63, 1, None), (3, 2, 0.5), (63, 2, None)],
)
def test_the_rehearsal_chooses_the_policy_that_fills_more_on_arrivals_it_never_saw(
    case: int, models: int, best: float | None
) -> None:
    """Of FGD (None) and the two horizons at each weight rehearsed, the rehearsal chooses the one
    that allocates clearly most on the trace's own seeds, which it never saw."""
    nodes, pods = generated(case, models=models)
    assert pods.allowed.all() == (models == 1), "pods that accept only some GPU models, where there are several"
    parameters = GpuwiseParameters()
    gains: dict[float | None, list[float]] = {None: [0.0] * len(SEEDS)}
    for weight in (0.9, 0.5):
        gains[weight] = held_out_gains(nodes, pods, replace(TWO_HORIZONS, next_pod_weight=weight))
    assert set(gains) == {*parameters.rehearsed_weights, None}
    for other in set(gains) - {best}:
        lead = [ours - theirs for ours, theirs in zip(gains[best], gains[other], strict=True)]
        assert statistics.fmean(lead) > 2 * statistics.stdev(lead) / len(lead) ** 0.5, f"no clear lead over {other}"
    policy = GpuwisePolicy(empty_cluster_context(nodes, pods, np.random.default_rng(0)), parameters)
    assert policy.next_pod_weight == best and policy.as_fgd == (best is None)
    # And the rehearsed policy allocates what the best one does, seed by seed.
    chosen: PolicyChoice = "fgd" if best is None else replace(TWO_HORIZONS, next_pod_weight=best)
    for seed in SEEDS:
        assert run_seed(nodes, pods, "gpuwise", seed).alloc_at_130 == run_seed(nodes, pods, chosen, seed).alloc_at_130


def test_the_rehearsal_budget_is_checked_and_named_in_the_label() -> None:
    # Labels key the benchmarks' caches: the policy without its rehearsal must never share one.
    assert GpuwiseParameters().label == "gpuwise(w=0.9|0.5,r=40,by=lower)"
    assert TWO_HORIZONS.label == "gpuwise(w=0.9,r=40,rehearsed=0)"
    # The weights rehearsed are named once each, the policy's own first.
    assert GpuwiseParameters(0.5).label == "gpuwise(w=0.5,r=40)"
    assert GpuwiseParameters(0.7, other_weights=(0.5, 0.3)).rehearsed_weights == (0.7, 0.5, 0.3)
    assert GpuwiseParameters(other_weights=()).label == "gpuwise(w=0.9,r=40)"
    with pytest.raises(ValueError, match=r"next_pod_weight must be in \[0, 1\], got 1.5"):
        GpuwiseParameters(other_weights=(1.5,))
    assert GpuwiseParameters(0.7, 25, rehearsed_arrivals=500).two_horizons_only == GpuwiseParameters(0.7, 25, 0)
    with pytest.raises(ValueError, match=r"rehearsed_arrivals must be 0 \(never place as FGD\) or more, got -1"):
        GpuwiseParameters(rehearsed_arrivals=-1)
