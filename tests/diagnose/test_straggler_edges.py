"""The straggler detector's edges: the policy's checks, the thresholds on their very value, the exit
rule. Each case here was a mutant of `straggler.py` that the other tests let live (`make mutation`)."""

from __future__ import annotations

import re

import pytest

from gpuwise.diagnose.straggler import (
    Episode,
    StragglerPolicy,
    detect_stragglers,
    has_groups,
    peer_ratios,
    persistent_slow_workers,
    recovered,
    steadily_slow,
    still_slow,
)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"min_slowdown": 1.0}, "min_slowdown must exceed 1 (got 1.0)"),
        ({"min_group_slowdown": 1.0}, "min_group_slowdown must exceed 1 (got 1.0)"),
        ({"enter_count": 5}, "enter_count must be between 1 and enter_window"),
        ({"warmup_samples": 1}, "need warmup_samples ≥ 2 and baseline_samples ≥ warmup_samples"),
        ({"baseline_samples": 5}, "need warmup_samples ≥ 2 and baseline_samples ≥ warmup_samples"),
    ],
)
def test_a_policy_that_cannot_work_is_refused_with_the_reason(settings: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        StragglerPolicy(**settings)  # type: ignore[arg-type]


def test_only_positive_step_times_of_three_or_more_workers_make_ratios() -> None:
    samples = [
        (0.0, 0, 1.0), (0.0, 1, 1.0), (0.0, 2, 0.0),  # a zero is no step time: two workers left, no ratio
        (1.0, 0, 1.0), (1.0, 1, 2.0), (1.0, 2, 4.0),
    ]  # fmt: skip
    assert peer_ratios(samples) == {0: [(1.0, 0.5)], 1: [(1.0, 1.0)], 2: [(1.0, 2.0)]}


def test_steadily_slow_holds_at_its_threshold_and_rounds_to_three_places() -> None:
    assert steadily_slow({0: [(0.0, 1.05)], 1: [(0.0, 1.04999)], 2: [(0.0, 1.23456)]}) == {0: 1.05, 2: 1.235}
    samples = [(float(t), w, 1.2 if w == 0 else 1.0) for t in range(5) for w in range(4)]
    assert persistent_slow_workers(samples) == {0: 1.2}
    assert persistent_slow_workers(samples, min_slowdown=1.5) == {}, "its threshold, not the default"


def job(slowdown: float) -> list[tuple[float, int, float]]:
    """4 steady workers; worker 3 `slowdown` times slower from sample 40 to 59."""
    return [
        (10.0 * t, w, (slowdown if w == 3 and 40 <= t < 60 else 1.0) * (1.0 + 0.001 * ((t * 7 + w * 3) % 5)))
        for t in range(80)
        for w in range(4)
    ]


def test_the_policy_given_is_the_one_used() -> None:
    assert [e.worker for e in detect_stragglers(job(2.0))] == [3]
    assert detect_stragglers(job(2.0), StragglerPolicy(min_slowdown=3.0)) == []


def test_an_episode_reads_as_a_dict_with_its_peak_rounded() -> None:
    episode = Episode(worker=3, start=400.0, end=590.0, peak_slowdown=2.01234, baseline=1.1)
    assert episode.as_dict() == {"worker": 3, "start": 400.0, "end": 590.0, "peak_slowdown": 2.012}
    grouped = Episode(worker=3, start=400.0, end=590.0, peak_slowdown=1.2, group=(3, 5))
    assert grouped.as_dict() == {"worker": 3, "start": 400.0, "end": 590.0, "peak_slowdown": 1.2, "group": [3, 5]}


def test_a_group_needs_two_workers_and_fewer_than_half_of_the_job() -> None:
    assert [has_groups(n) for n in range(3, 7)] == [False, False, True, True]
    policy = StragglerPolicy()
    assert (policy.least_slowdown(4), policy.least_slowdown(5)) == (1.25, 1.1)
    assert StragglerPolicy(min_group_slowdown=1.3).least_slowdown(5) == 1.25, "whichever is smaller"
    member = policy.group_member
    assert member.min_slowdown == pytest.approx(1.05) and member.min_z == pytest.approx(4 / 2**0.5)


def test_recovery_needs_the_last_exit_after_ratios_all_under_the_limit() -> None:
    under = [(float(t), 1.0) for t in range(3)]
    assert recovered(under, 1.1)
    assert not recovered(under[:2], 1.1), "too few to tell"
    assert not recovered([(0.0, 1.0), (1.0, 1.1), (2.0, 1.0)], 1.1), "one at the limit is not under it"
    assert recovered([(0.0, 9.0), *under], 1.1), "only the last three count"
    assert not recovered(under, 1.1, StragglerPolicy(exit_after=4)), "its policy's exit_after"


def test_a_straggler_is_still_slow_above_its_stay_threshold_times_its_baseline() -> None:
    # stay_slowdown is 1.125 with the defaults: a baseline of 1.2 puts the line at 1.35.
    assert still_slow([(float(t), 1.36) for t in range(3)], 1.2)
    assert not still_slow([(float(t), 1.34) for t in range(3)], 1.2)
    assert still_slow([(0.0, 1.34), (1.0, 1.35), (2.0, 1.34)], 1.2), "at the line is not under it"
    assert still_slow([(float(t), 1.30) for t in range(3)], 1.2, StragglerPolicy(min_slowdown=1.1)), "its policy's line"
