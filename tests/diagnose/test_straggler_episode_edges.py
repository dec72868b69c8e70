"""A straggler episode's edges, sample by sample, on crafted peer ratios: the thresholds that make a
sample slow at their very value, exactly `enter_count` slow samples to open, exactly `exit_after`
normal ones to close, the dips that hold an episode open, the baseline's noise floor; each both
ways (one `step()` a sample, and skipping ahead), which must agree. Each case here was a mutant of
`straggler.py` that the other tests let live (`make mutation`)."""

from __future__ import annotations

from array import array

import pytest

from gpuwise.diagnose.straggler import (
    StragglerPolicy,
    _episodes_in,
    job_peer_ratios,
    peer_ratios,
    still_slow,
)
from gpuwise.diagnose.window import Points
from tests.diagnose.test_straggler import plain_and_fast

DEFAULT = StragglerPolicy()  # min_slowdown 1.25, stay_slowdown 1.125, min_z 4, enter 3 of 4, exit after 3
# A noise floor of 1/8 of the baseline: at a baseline of 1.0, a ratio of 1.5 is exactly 4 sigmas
# above it (min_z) and one of 1.25 exactly 2 (the dip's min_z / 2), both exact in binary.
WIDE = StragglerPolicy(min_relative_sigma=0.125)
QUIET = [1.0] * DEFAULT.warmup_samples  # a baseline of 1.0; its sigma is the floor, 2 % of it by default
SLOW = [2.0] * DEFAULT.enter_count  # opens an episode at sample 10 (time 100), its last at time 120


def found(values: list[float], policy: StragglerPolicy = DEFAULT) -> list[tuple[float, float, float]]:
    """One worker's episodes (start, end, peak) in `values`, a sample each 10 s from time 0: the
    same whether each sample goes through `step()` or the detector skips ahead, from a list of
    (time, ratio) pairs or from `Points`."""
    times = [10.0 * k for k in range(len(values))]
    pairs = list(zip(times, values, strict=True))
    shapes = {"pairs": pairs, "points": Points(array("d", times), array("d", values))}
    seen = {
        (shape, skip): [(e.start, e.end, e.peak_slowdown) for e in _episodes_in({0: series}, policy, skip_ahead=skip)]
        for shape, series in shapes.items()
        for skip in (False, True)
    }
    plain = seen["pairs", False]
    assert all(episodes == plain for episodes in seen.values()), seen
    assert all(e.worker == 0 for e in _episodes_in({0: pairs}, policy, skip_ahead=False))
    return plain


def test_exactly_enter_count_slow_samples_open_an_episode_and_one_fewer_does_not() -> None:
    assert found(QUIET + SLOW + [1.0] * 5) == [(100.0, 120.0, 2.0)]
    assert found(QUIET + SLOW[:-1] + [1.0] * 5) == []


def test_the_slow_samples_that_open_an_episode_need_only_be_within_enter_window() -> None:
    # 3 slow of the last 4: the episode starts at the first of them, the normal one between included.
    assert found(QUIET + [2.0, 1.0, 2.0, 2.0] + [1.0] * 5) == [(100.0, 130.0, 2.0)]
    # 2 of the last 4, then 3 of the last 4 (the first slow one has left the window): from the second.
    assert found(QUIET + [2.0, 1.0, 1.0, 2.0, 2.0] + [1.0] * 5) == []
    assert found(QUIET + [2.0, 1.0, 1.0, 2.0, 2.0, 2.0] + [1.0] * 5) == [(130.0, 150.0, 2.0)]


def test_exactly_exit_after_normal_samples_close_an_episode() -> None:
    # Two normal samples do not close it: a slow one after them goes on with the episode.
    assert found(QUIET + SLOW + [1.0] * 2 + [2.0] + [1.0] * 3) == [(100.0, 150.0, 2.0)]
    # Three do: a lone slow sample after them opens nothing.
    assert found(QUIET + SLOW + [1.0] * 3 + [2.0] + [1.0] * 3) == [(100.0, 120.0, 2.0)]


def test_a_slow_sample_within_an_episode_starts_the_count_of_normal_ones_again() -> None:
    assert found(QUIET + SLOW + [3.0] + [1.0] * 2 + [2.0] + [1.0] * 3) == [(100.0, 160.0, 3.0)]
    assert found(QUIET + SLOW + [1.0] * 2 + [3.0] + [1.0] * 2 + [2.0] + [1.0] * 3) == [(100.0, 180.0, 3.0)]


def test_a_dip_at_the_stay_slowdown_holds_an_episode_open_and_starts_the_count_again() -> None:
    # 1.125 is stay_slowdown times the baseline exactly, 6.25 sigmas above it: it holds.
    assert found(QUIET + SLOW + [1.125] * 3 + [2.0] + [1.0] * 3) == [(100.0, 160.0, 2.0)]
    # Two normal samples, a dip, two normal samples: five, but never three in a row.
    assert found(QUIET + SLOW + [1.0] * 2 + [1.125] + [1.0] * 2 + [2.0] + [1.0] * 3) == [(100.0, 180.0, 2.0)]
    # 1.1 is 5 sigmas above, more than min_z / 2, but under stay_slowdown: normal, it closes the episode.
    assert found(QUIET + SLOW + [1.1] * 3 + [2.0] + [1.0] * 3) == [(100.0, 120.0, 2.0)]


def test_a_dip_must_be_min_z_over_two_sigmas_above_the_baseline_to_hold() -> None:
    # With a sigma of 0.125: 2.0 is 8 sigmas above (slow), 1.25 exactly 2 (holds), 1.2 only 1.6 (normal).
    assert found(QUIET + SLOW + [1.25] * 3 + [2.0] + [1.0] * 3, WIDE) == [(100.0, 160.0, 2.0)]
    assert found(QUIET + SLOW + [1.2] * 3 + [2.0] + [1.0] * 3, WIDE) == [(100.0, 120.0, 2.0)]


def test_a_sample_exactly_min_slowdown_times_its_baseline_is_slow() -> None:
    assert found(QUIET + [1.25] * 3 + [1.0] * 3) == [(100.0, 120.0, 1.25)]
    assert found(QUIET + [1.24] * 3 + [1.0] * 3) == []


def test_a_sample_exactly_min_z_sigmas_above_its_baseline_is_slow() -> None:
    assert found(QUIET + [1.5] * 3 + [1.0] * 3, WIDE) == [(100.0, 120.0, 1.5)]
    assert found(QUIET + [1.49] * 3 + [1.0] * 3, WIDE) == []


def test_a_sample_exactly_stay_slowdown_behind_its_peers_is_slow() -> None:
    # A worker that ran at half its peers' pace: 1.125 is 2.25 times its baseline, and behind them
    # by exactly the stay slowdown; 1.12 is as far above its own past, but not that far behind them.
    assert found([0.5] * 10 + [1.125] * 3 + [0.5] * 3) == [(100.0, 120.0, 2.25)]
    assert found([0.5] * 10 + [1.12] * 3 + [0.5] * 3) == []


def test_the_noise_floor_is_min_relative_sigma_times_the_baseline() -> None:
    # A baseline of 2.0 and a floor of 10 %: sigma 0.2. 2.6 is 1.3 times the baseline but only
    # 3 sigmas above it; 2.9 is 4.5.
    policy = StragglerPolicy(min_relative_sigma=0.1)
    assert found([2.0] * 10 + [2.6] * 3 + [2.0] * 3, policy) == []
    assert found([2.0] * 10 + [2.9] * 3 + [2.0] * 3, policy) == [(100.0, 120.0, 2.9 / 2.0)]


def test_a_noise_floor_that_underflows_to_zero_is_not_skipped_through() -> None:
    # The smallest float times 0.4 is 0: the baseline of 0.4 (no spread) has a sigma of 0, and
    # `step()` divides by it. Skipping ahead takes no sigma for samples that cannot be slow, so it
    # must not run where one `step()` a sample would raise: both raise alike.
    policy = StragglerPolicy(min_relative_sigma=5e-324)
    values = [1.0] + [0.4] * 20
    times = [10.0 * k for k in range(len(values))]
    for series in (list(zip(times, values, strict=True)), Points(array("d", times), array("d", values))):
        plain, fast = plain_and_fast({0: series}, policy)  # type: ignore[dict-item]
        assert plain.startswith("raises") and fast == plain


def test_still_slow_takes_its_policys_exit_after() -> None:
    ratios = [(0.0, 1.5), (1.0, 1.0), (2.0, 1.0), (3.0, 1.0)]
    assert not still_slow(ratios, 1.0), "the last three are under 1.125"
    assert still_slow(ratios, 1.0, StragglerPolicy(exit_after=4)), "of the last four, one is not"


@pytest.mark.parametrize("shape", ["points", "pairs"])
def test_job_peer_ratios_need_three_workers_and_take_pairs_too(shape: str) -> None:
    times = [0.0, 15.0]

    def series(values: list[float]) -> Points | list[tuple[float, float]]:
        if shape == "points":
            return Points(array("d", times), array("d", values))
        return list(zip(times, values, strict=True))

    two = {0: series([1.0, 2.0]), 1: series([2.0, 4.0])}
    assert job_peer_ratios(two) == {}, "no peers' median of two workers"
    three = {0: series([1.0, 2.0]), 1: series([2.0, 4.0]), 2: series([4.0, 4.0])}
    expected = peer_ratios((t, w, s) for w, points in three.items() for t, s in points)
    assert {w: list(r) for w, r in job_peer_ratios(three).items()} == expected
    assert expected[0] == [(0.0, 0.5), (15.0, 0.5)]
