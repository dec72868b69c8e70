"""Straggler groups (module docstring of `straggler.py`, point 5) at their edges, on peer ratios built
sample by sample, and the per-worker loop they share with single stragglers.

Each worker's ratios are 1.0 except where a test says otherwise, so every median, slowdown and z-score
here is known exactly: a member at its threshold, a group still slow at the last sample, episodes that
only touch, a rest whose median moves when one worker leaves it. Every case runs twice, as `Points` on
one grid with skipping ahead (numpy, `_may_open`'s matrix) and as (time, ratio) lists one step a
sample (its loop), and both must agree. (Written after mutation testing of `straggler.py` found these
unread.)
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence

import pytest

from gpuwise.diagnose.straggler import StragglerPolicy, _episodes_in, episodes_in
from gpuwise.diagnose.window import Points

T0, STEP = 1_795_000_000.0, 15.0
BEFORE, SPAN = 30, 10  # samples at the usual pace before a slowdown; how long it lasts
Found = list[tuple[int, float, float, tuple[int, ...]]]
DEFAULT = StragglerPolicy()
OPENING = DEFAULT.group_member.min_slowdown  # the slowdown a member's episode opens at: 1.05


def at(sample: int) -> float:
    return T0 + STEP * sample


def slowed(inside: float, usual: float = 1.0, length: int = SPAN, after: int = 20) -> list[float]:
    """`BEFORE` samples at `usual`, `length` at `inside`, `after` at `usual` again."""
    return [usual] * BEFORE + [inside] * length + [usual] * after


def steady(count: int = BEFORE + SPAN + 20) -> list[float]:
    return [1.0] * count


def found(columns: Mapping[int, Sequence[float]], policy: StragglerPolicy = DEFAULT) -> Found:
    """The episodes of workers with these ratios from sample 0 on, both ways (they must agree)."""
    count = len(next(iter(columns.values())))
    assert all(len(values) == count for values in columns.values())
    times = array("d", [at(k) for k in range(count)])
    on_grid = episodes_in({w: Points(times, array("d", values)) for w, values in columns.items()}, policy)
    lists = {w: [(at(k), value) for k, value in enumerate(values)] for w, values in columns.items()}
    one_by_one = _episodes_in(lists, policy, skip_ahead=False)
    assert on_grid == one_by_one
    return [(e.worker, e.start, e.end, e.group) for e in on_grid]


def group_of(members: Mapping[int, list[float]], workers: int = 10, **others: list[float]) -> dict[int, list[float]]:
    """`workers` workers: `members` as given, the others steady (or as `others` says, by `w<id>`)."""
    count = len(next(iter(members.values())))
    return {w: members.get(w, others.get(f"w{w}", [1.0] * count)) for w in range(workers)}


# --- which workers are members, and when ---------------------------------------------------------


def test_a_group_still_slow_at_the_last_sample_is_found() -> None:
    """The operator looks at the latest window: a group whose members slowed for the last three samples
    (an episode opens at the third) is a group now, not once it is over."""
    end = BEFORE + 3
    columns = group_of({0: [1.0] * BEFORE + [1.2] * 3, 1: [1.0] * BEFORE + [1.2] * 3}, workers=10)
    assert found(columns) == [(0, at(BEFORE), at(end - 1), (0, 1)), (1, at(BEFORE), at(end - 1), (0, 1))]


def test_a_member_exactly_as_far_behind_its_peers_as_a_member_must_be_is_in_the_group() -> None:
    """Worker 0 ran 10 % ahead of its peers and fell behind them by exactly the members' stay slowdown
    (the least a slow sample is behind its peers): that is slow, so it and worker 1 are a group of two."""
    behind = DEFAULT.group_member.stay_slowdown
    columns = group_of({0: slowed(behind, usual=0.9), 1: slowed(1.2)})
    span = (at(BEFORE), at(BEFORE + SPAN - 1))
    assert found(columns) == [(0, *span, (0, 1)), (1, *span, (0, 1))]


def test_a_member_slowed_by_exactly_min_group_slowdown_is_in_the_group() -> None:
    columns = group_of({0: slowed(DEFAULT.min_group_slowdown), 1: slowed(1.2)})
    span = (at(BEFORE), at(BEFORE + SPAN - 1))
    assert found(columns) == [(0, *span, (0, 1)), (1, *span, (0, 1))]
    assert found(group_of({0: slowed(1.09), 1: slowed(1.2)})) == [], "under it, worker 1 is alone"


def test_members_slowed_together_for_a_single_sample_are_a_group_then() -> None:
    """Worker 0 slowed for samples 30-32, worker 1 for 32-34: their episodes touch at sample 32, and each
    was slow for 3 of the run's 5 samples. They are a group, reported where both were slow: sample 32."""
    first = [1.0] * BEFORE + [1.18] * 3 + [1.0] * 27
    second = [1.0] * (BEFORE + 2) + [1.18] * 3 + [1.0] * 25
    both = at(BEFORE + 2)
    assert found(group_of({0: first, 1: second})) == [(0, both, both, (0, 1)), (1, both, both, (0, 1))]


def test_a_one_sample_episode_alone_at_either_end_of_a_group_episode_is_named_with_the_group() -> None:
    """With episodes that open at one slow sample, worker 0 is a straggler alone at the first sample of
    its group episode and worker 2 at the last: each keeps that episode, named with the group, and no
    second one; worker 1, a member only, is reported with the group's window."""
    policy = StragglerPolicy(enter_window=1, enter_count=1)
    tail = [1.0] * 20
    columns = group_of({
        0: [1.0] * BEFORE + [1.5] + [1.12] * (SPAN - 1) + tail,
        1: slowed(1.2),
        2: [1.0] * BEFORE + [1.12] * (SPAN - 1) + [1.5] + tail,
    })  # fmt: skip
    first, last, group = at(BEFORE), at(BEFORE + SPAN - 1), (0, 1, 2)
    assert found(columns, policy) == [(0, first, first, group), (1, first, last, group), (2, last, last, group)]


# --- measured against the rest of the job ---------------------------------------------------------


def test_a_group_is_measured_against_the_rest_without_a_worker_that_slowed_with_it() -> None:
    """During samples 30-39, workers 0 and 1 run at 1.09 and worker 2 at 1.05 (a member's entry, but too
    little against its noise to open an episode); the others spread from 0.90 to 1.02. Against workers
    2-9 (median 1.00) the members are 9 % slow, not a group; without worker 2, slowed with them by as
    much as a member opens at, the rest's median is 0.98 and they are 11 % slow: a group."""
    inside = {2: OPENING, 3: 0.98, 4: 1.02, 5: 1.02, 6: 1.02, 7: 0.90, 8: 0.92, 9: 0.94}
    columns = {w: slowed(1.09) if w < 2 else slowed(inside[w]) for w in range(10)}
    span = (at(BEFORE), at(BEFORE + SPAN - 1))
    assert found(columns) == [(0, *span, (0, 1)), (1, *span, (0, 1))]


def test_the_rest_is_measured_once_more_not_until_nothing_changes() -> None:
    """Point 5's two measures: the rest without the members (worker 2 is 5.2 % slow against it), then
    without worker 2 too. Against that rest four of eleven look slowed, the members 21 %: a group. A
    third measure, without worker 3 as well (5.3 % slow against the second rest), would see six."""
    inside = {2: 1.02, 3: 1.0, 4: 0.90, 5: 0.91, 6: 0.92, 7: 0.93, 8: 0.97, 9: 0.98, 10: 0.99}
    columns = {w: slowed(1.15) if w < 2 else slowed(inside[w]) for w in range(11)}
    span = (at(BEFORE), at(BEFORE + SPAN - 1))
    assert found(columns) == [(0, *span, (0, 1)), (1, *span, (0, 1))]


def test_the_rests_pace_is_the_median_of_all_its_workers() -> None:
    """Worker 9 ran 4 % slow during the members' 12 %: the rest's median is still 1.0, not worker 9's."""
    columns = group_of({0: slowed(1.12), 1: slowed(1.12)}, w9=slowed(1.04))
    span = (at(BEFORE), at(BEFORE + SPAN - 1))
    assert found(columns) == [(0, *span, (0, 1)), (1, *span, (0, 1))]


def test_workers_slowed_by_a_members_entry_count_toward_half_the_job_without_an_episode() -> None:
    """Three members 20 % slow and two workers slowed by exactly a member's entry (too little against
    their noise to open an episode): five of ten slowed is the job slowing, no group. With one of the
    two at 4 %, four of ten are: a group of three."""
    members = {w: slowed(1.2) for w in range(3)}
    assert found(group_of(members, w3=slowed(OPENING), w4=slowed(OPENING))) == []
    span = (at(BEFORE), at(BEFORE + SPAN - 1))
    group = found(group_of(members, w3=slowed(OPENING), w4=slowed(1.04)))
    assert group == [(w, *span, (0, 1, 2)) for w in range(3)]


# --- as clear as a worker alone ------------------------------------------------------------------


def test_a_group_exactly_as_clear_as_it_must_be_is_a_group() -> None:
    """Two members 20 % slow for one sample (episodes open at one): each median of one sample is
    0.2 / (2 % × √(π/2)) standard errors above the usual pace; Stouffer's sum of the two is the
    evidence. A `min_z` of exactly that (× √1) is met; the next float up is not."""
    z = (1.2 - 1.0) / (0.02 * 1.0 * math.sqrt(math.pi / 2) / math.sqrt(1))
    evidence = (z + z) / math.sqrt(2)
    columns = group_of({0: [1.0] * BEFORE + [1.2] + [1.0] * 20, 1: [1.0] * BEFORE + [1.2] + [1.0] * 20})
    policy = StragglerPolicy(enter_window=1, enter_count=1, min_z=evidence)
    assert found(columns, policy) == [(0, at(BEFORE), at(BEFORE), (0, 1)), (1, at(BEFORE), at(BEFORE), (0, 1))]
    stricter = StragglerPolicy(enter_window=1, enter_count=1, min_z=math.nextafter(evidence, math.inf))
    assert found(columns, stricter) == []


@pytest.mark.parametrize("pace", [1.0, 2.0])
def test_a_groups_evidence_does_not_depend_on_its_members_usual_pace(pace: float) -> None:
    """Two members 12 % slow for 3 samples: 2 × 8.3 standard errors over √2 is 11.7, met by a `min_z`
    of 6.5 (× √3 = 11.3), not by 7 (12.1), whether they usually run at the others' pace or at twice it
    (their noise floor, 2 % of their pace, is then twice as large)."""
    members = {w: [pace] * BEFORE + [1.12 * pace] * 3 + [pace] * 20 for w in (0, 1)}
    span = (at(BEFORE), at(BEFORE + 2))
    assert found(group_of(members), StragglerPolicy(min_z=6.5)) == [(0, *span, (0, 1)), (1, *span, (0, 1))]
    assert found(group_of(members), StragglerPolicy(min_z=7.0)) == []


def test_with_no_noise_floor_a_member_steady_against_the_rest_is_infinitely_clear() -> None:
    """Every worker's pace wavers 0-3 % alike, so against the rest the members never waver: with no
    `min_relative_sigma` their slowdown has no spread to be measured in, and is a group, not an error."""
    count = BEFORE + SPAN + 20
    wave = [1.0 + 0.01 * (k % 4) for k in range(count)]
    member = [v * (1.2 if BEFORE <= k < BEFORE + SPAN else 1.0) for k, v in enumerate(wave)]
    columns = {w: member if w < 2 else wave for w in range(10)}
    span = (at(BEFORE), at(BEFORE + SPAN - 1))
    assert found(columns, StragglerPolicy(min_relative_sigma=0.0)) == [(0, *span, (0, 1)), (1, *span, (0, 1))]


def test_zero_ratios_give_no_pace_to_measure_against() -> None:
    """At sample 5 every worker's ratio is 0 (the rest's median too), and worker 10, seen for five
    samples only, was at 0 for the three before the group: no usual pace. Neither is measured, nor
    divided by; the group is found."""
    columns = group_of({0: slowed(1.2), 1: slowed(1.2)}, workers=10)
    for values in columns.values():
        values[5] = 0.0
    lists = {w: [(at(k), v) for k, v in enumerate(values)] for w, values in columns.items()}
    lists[10] = [(at(k), 0.0 if k < BEFORE else 1.0) for k in range(BEFORE - 3, BEFORE + 2)]
    for skip_ahead in (True, False):
        episodes = _episodes_in(lists, DEFAULT, skip_ahead=skip_ahead)
        span = (at(BEFORE), at(BEFORE + SPAN - 1))
        assert [(e.worker, e.start, e.end, e.group) for e in episodes] == [(0, *span, (0, 1)), (1, *span, (0, 1))]


# --- the per-worker loop, alone or in a group ------------------------------------------------------


def test_an_episode_opens_at_the_first_samples_past_the_warmup() -> None:
    warmup = DEFAULT.warmup_samples
    columns = {0: [1.0] * warmup + [2.0] * 3 + [1.0] * 10, 1: [1.0] * (warmup + 13), 2: [1.0] * (warmup + 13)}
    assert found(columns) == [(0, at(warmup), at(warmup + 2), ())]


def test_an_episode_opens_right_after_the_previous_one_closed() -> None:
    """Closed by its third normal sample; the very next three are slow again: a second episode."""
    ratios = [1.0] * BEFORE + [2.0] * 5 + [1.0] * 3 + [2.0] * 3 + [1.0] * 10
    columns = {0: ratios, 1: [1.0] * len(ratios), 2: [1.0] * len(ratios)}
    assert found(columns) == [(0, at(BEFORE), at(BEFORE + 4), ()), (0, at(BEFORE + 8), at(BEFORE + 10), ())]


def test_a_worker_seen_too_briefly_or_never_spread_hides_none_after_it() -> None:
    """Worker 0 left after five samples, worker 1 never varied: neither can be slow, and worker 2 still is."""
    lists: dict[int, Sequence[tuple[float, float]]] = {
        0: [(at(k), 1.0) for k in range(5)],
        1: [(at(k), 1.0) for k in range(60)],
        2: [(at(k), v) for k, v in enumerate(slowed(2.0))],
        3: [(at(k), 1.0) for k in range(60)],
    }
    for skip_ahead in (True, False):
        episodes = _episodes_in(lists, DEFAULT, skip_ahead=skip_ahead)
        assert [(e.worker, e.start, e.end) for e in episodes] == [(2, at(BEFORE), at(BEFORE + SPAN - 1))]


def test_a_worker_with_a_nan_among_its_ratios_hides_none_before_it() -> None:
    """On one grid, worker 1's NaN sends it alone through the Python path; worker 0, before it, stays."""
    gap = steady()
    gap[5] = math.nan
    columns = {0: slowed(2.0), 1: gap, 2: steady()}
    assert found(columns) == [(0, at(BEFORE), at(BEFORE + SPAN - 1), ())]


def test_a_group_in_a_series_shorter_than_the_entry_window_is_found() -> None:
    """Episodes open at 2 slow samples of the last 6, after a warmup of 2: five samples are enough,
    the last three slow. The members' pre-filter (`_may_open`) looked only at whole windows of 6 and
    let neither member through, on either path: a group found with seven samples was missed with five."""
    policy = StragglerPolicy(warmup_samples=2, enter_window=6, enter_count=2)
    for count in (7, 5):
        members = {w: ([1.0, 1.0] + [1.2] * 3 + [1.0] * 2)[:count] for w in (0, 1)}
        span = (at(2), at(4))
        assert found(group_of(members), policy) == [(0, *span, (0, 1)), (1, *span, (0, 1))], count
