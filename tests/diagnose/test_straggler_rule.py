"""The Straggler and SlowWorker rules at their edges, and an active Straggler held past the window.

`test_rules.py` shows each rule finding its case; this pins what the operator carries from cycle to
cycle and where the rules draw their lines. A Straggler slow for longer than the window is measured
against the baseline, peak and start its previous finding recorded (`baselineRatio`,
`peakSlowdown`, `slowSinceUnixSeconds`): those figures, not the window, decide whether it still
holds and what it says. And the boundaries: three workers are enough, the grace period, an episode
that ended exactly `3 × sample_interval` before the latest sample, a worker exactly at the
SlowWorker limit. (Written after mutation testing of `rules.py` found these unread.)
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence

from gpuwise.api.trainingjob import Finding
from gpuwise.diagnose.rules import DiagnosisThresholds, diagnose
from gpuwise.diagnose.window import JobWindow, Sustain
from tests.diagnose.test_rules import context, group_slowed, run, steps, straggler_finding, window

Series = dict[int, list[tuple[float, float]]]


def diagnosed(w: JobWindow, held: Mapping[str, object] | None = None) -> dict[str, Finding]:
    """The findings of one cycle, after one in which a Straggler with `held` evidence was active."""
    previous = {"Straggler": straggler_finding(dict(held))} if held is not None else None
    return {finding.kind: finding for finding, _ in diagnose(context(w, previous=previous))}


def slower(factor: float, last: float | None = None, workers: int = 8) -> Series:
    """`steps(workers)` with worker 2 `factor` times slower throughout (`last` times at the latest sample)."""
    history = steps(workers)
    final = len(history[2]) - 1
    history[2] = [(t, s * (last if last and i == final else factor)) for i, (t, s) in enumerate(history[2])]
    return history


def latest_ratio(series: Mapping[int, Sequence[tuple[float, float]]], worker: int) -> float:
    """The worker's latest step time over the median of all the workers' latest step times."""
    return series[worker][-1][1] / statistics.median(points[-1][1] for points in series.values())


def test_a_held_straggler_keeps_its_baseline_from_the_evidence() -> None:
    """Worker 2 of 4 runs 1.05x its peers for the whole window: all steps within 10 % of one another,
    nothing to see in the window alone (the rule skips such a window, but not for a held Straggler).
    Before it slowed it ran at 0.9x (its finding says so): it is still slow against that."""
    history = slower(1.05, workers=4)
    held = {"worker": 2, "peakSlowdown": 1.1, "baselineRatio": "0.9000", "slowSinceUnixSeconds": 1600}
    finding = diagnosed(window(worker_step_seconds=history), held)["Straggler"]
    assert finding.worker == 2
    assert finding.evidence["baselineRatio"] == "0.9000", "carried over, not learnt from the window"
    assert finding.evidence["slowSinceUnixSeconds"] == "1600", "slow since it first slowed, not since this cycle"
    assert finding.evidence["peakSlowdown"] == f"{latest_ratio(history, 2) / 0.9:.3g}", "now worse than the peak held"
    # The same window against a baseline of 1.0: back under the exit rule's 1.125x, recovered.
    assert diagnosed(window(worker_step_seconds=history), {**held, "baselineRatio": "1.0000"}) == {}
    assert diagnosed(window(worker_step_seconds=history)) == {}, "and nothing without the hold"


def test_only_an_active_straggler_is_held() -> None:
    """`active` says which findings keep their hysteresis; `previous` only carries their evidence."""
    held = {"worker": 2, "peakSlowdown": 1.1, "baselineRatio": "0.9000", "slowSinceUnixSeconds": 1600}
    ctx = context(window(worker_step_seconds=slower(1.05)), previous={"Straggler": straggler_finding(held)})
    assert [finding.kind for finding, _ in diagnose(ctx)] == ["Straggler"]
    assert diagnose(dataclasses.replace(ctx, active=frozenset())) == []


def test_a_held_straggler_reports_the_worst_slowdown_it_reached_and_is_as_sure_as_that() -> None:
    """The peak held in the evidence stays while the worker is less slow now; a slower latest sample
    raises it. The confidence is 0.5 + (peak − 1) / 2, at most 0.95."""
    history = slower(1.05)
    for peak, confidence in ((1.2, 0.6), (1.6, 0.8), (1.9, 0.95), (2.5, 0.95)):
        held = {"worker": 2, "peakSlowdown": peak, "baselineRatio": "0.9000", "slowSinceUnixSeconds": 1600}
        finding = diagnosed(window(worker_step_seconds=history), held)["Straggler"]
        assert finding.evidence["peakSlowdown"] == f"{peak:.3g}"
        assert finding.confidence == confidence, peak
        assert finding.message == (
            f"Worker 2 runs {peak:.1f}x slower than its own baseline against its peers; "
            "every step of the job waits for it."
        )
    worse = slower(1.05, last=1.25)  # its latest step is its slowest yet
    held = {"worker": 2, "peakSlowdown": 1.2, "baselineRatio": "0.9000", "slowSinceUnixSeconds": 1600}
    finding = diagnosed(window(worker_step_seconds=worse), held)["Straggler"]
    assert finding.evidence["peakSlowdown"] == f"{latest_ratio(worse, 2) / 0.9:.3g}" == "1.38"


def test_a_held_straggler_without_figures_in_its_evidence_is_measured_against_its_peers() -> None:
    """A finding that carries no baseline, peak or start (an older operator's, or one edited by hand)
    takes parity with the peers as the baseline and the latest slowdown as the peak, and claims no start."""
    history = slower(1.3)
    finding = diagnosed(window(worker_step_seconds=history), {"worker": 2})["Straggler"]
    assert finding.worker == 2
    assert finding.evidence["baselineRatio"] == "1.0000"
    assert finding.evidence["peakSlowdown"] == f"{latest_ratio(history, 2):.3g}" == "1.29"
    assert "slowSinceUnixSeconds" not in finding.evidence, "no start known: not the Unix epoch"
    # Figures that do not parse are as good as none.
    unreadable = {"worker": 2, "peakSlowdown": "n/a", "baselineRatio": "?", "slowSinceUnixSeconds": "soon"}
    assert diagnosed(window(worker_step_seconds=history), unreadable)["Straggler"].evidence == finding.evidence


def test_a_held_group_says_which_workers_slowed_together() -> None:
    history = group_slowed(60, 0, slowdown=1.1)
    held = {"worker": 2, "group": "2,5,7", "peakSlowdown": 1.3, "baselineRatio": "1.0000", "slowSinceUnixSeconds": 1000}
    finding = diagnosed(window(worker_step_seconds=history), held)["Straggler"]
    assert finding.message == (
        "Workers 2, 5 and 7 slowed together against the rest of the job, worker 2 1.30x against its own "
        "baseline; every step of the job waits for them."
    )
    assert (finding.confidence, finding.evidence["group"]) == (0.65, "2,5,7")


def test_a_straggler_is_found_from_the_end_of_the_grace_period_on() -> None:
    grace = Sustain().grace_seconds
    straggling = steps(8, slow=5, from_sample=40)
    assert "Straggler" in run(window(worker_step_seconds=straggling, job_age_seconds=grace))
    assert "Straggler" not in run(window(worker_step_seconds=straggling, job_age_seconds=grace - 1))


def test_three_workers_are_enough_to_find_a_straggler() -> None:
    finding, _ = run(window(worker_step_seconds=steps(3, slow=1, from_sample=40)))["Straggler"]
    assert finding.worker == 1
    assert finding.evidence["slowSinceUnixSeconds"] == str(1000 + 15 * 40), "its first slow sample"


def test_an_episode_that_ended_three_samples_before_the_latest_is_still_ongoing() -> None:
    """The last slow sample 3 × 15 s before the latest one: ongoing; 4 × 15 s: over, and a straggler
    that has recovered is no SlowWorker either."""
    for last_slow, ongoing in ((56, True), (55, False)):  # of samples 0..59
        history = steps(8, slow=5, from_sample=40)
        history[5] = [(t, s if i <= last_slow else 0.5) for i, (t, s) in enumerate(history[5])]
        found = run(window(worker_step_seconds=history, sample_interval_seconds=15))
        assert list(found) == (["Straggler"] if ongoing else []), last_slow


def test_the_slowest_of_several_steadily_slow_workers_is_named() -> None:
    steady = steps(8)
    steady[1] = [(t, s * 1.4) for t, s in steady[1]]
    steady[6] = [(t, s * 1.2) for t, s in steady[6]]
    finding, _ = run(window(worker_step_seconds=steady))["SlowWorker"]
    assert finding.worker == 1
    assert finding.message == "Worker 1 has been 1.39x slower than its peers for the whole window."


def test_a_worker_exactly_at_the_slow_worker_limit_is_one() -> None:
    """Three workers, one exactly 1.1x (`persistent_slowdown`) the others: as far apart as steps may be
    for the shortcut that skips workers in step (`steps_alike`) to say nothing could be found, and no
    further: it is a SlowWorker."""
    limit = DiagnosisThresholds().persistent_slowdown
    at_limit = {w: [(1000.0 + 15 * i, 0.5 * (limit if w == 2 else 1.0)) for i in range(60)] for w in range(3)}
    finding, _ = run(window(worker_step_seconds=at_limit))["SlowWorker"]
    assert finding.worker == 2
    under = {w: [(t, s * (0.999 if w == 2 else 1.0)) for t, s in points] for w, points in at_limit.items()}
    assert run(window(worker_step_seconds=under)) == {}


def test_the_shortcut_for_workers_in_step_measures_the_spread_as_the_peer_ratios_do() -> None:
    """0.1122 s against 0.102 s is 1.1x as the peer ratio takes it (a quotient), though 0.1122 is less
    than 1.1 × 0.102 in floating point (a product, rounded up): the shortcut must not call the steps
    alike and drop the SlowWorker that the same proportions at 0.55 s and 0.5 s make."""
    at_limit = {w: [(1000.0 + 15 * i, 0.1122 if w == 2 else 0.102) for i in range(60)] for w in range(3)}
    limit = DiagnosisThresholds().persistent_slowdown
    assert limit == 0.1122 / 0.102 and limit * 0.102 > 0.1122, "the quotient is the limit, the product more"
    finding, _ = run(window(worker_step_seconds=at_limit))["SlowWorker"]
    assert finding.worker == 2


def test_a_step_time_of_zero_is_no_ratio_and_stops_no_diagnosis() -> None:
    """A worker that reported 0 s for a sample (no step measured): the shortcut does not divide by it,
    and the rules go on without that sample."""
    steady = steps(8)
    steady[3] = [(t, 0.0 if i == 7 else s) for i, (t, s) in enumerate(steady[3])]
    assert run(window(worker_step_seconds=steady)) == {}
    straggling = steps(8, slow=5, from_sample=40)
    straggling[3] = steady[3]
    assert run(window(worker_step_seconds=straggling))["Straggler"][0].worker == 5
