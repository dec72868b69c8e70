"""The straggler detector on jobs it was not written against.

Synthetic jobs draw the worker count, steady per-worker offsets, noise, job-wide drift and the
straggler itself at random; the detector must find injected episodes (and only those) with the
same defaults it uses on the PAI traces.
"""

from __future__ import annotations

import csv
import math
import pathlib
import random
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.diagnose.straggler import (
    Episode,
    StragglerPolicy,
    detect_stragglers,
    job_peer_ratios,
    peer_ratios,
    persistent_slow_workers,
)
from gpuwise.diagnose.window import Points

DATA = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "pai-minibatch"
Samples = list[tuple[float, int, float]]


def synthetic_job(rng: random.Random, *, steps: int = 200, job_wide_spike: bool = False) -> Samples:
    workers = rng.randint(4, 16)
    offsets = [rng.uniform(0.85, 1.15) for _ in range(workers)]
    noise = rng.uniform(0.01, 0.06)
    samples: Samples = []
    for step in range(steps):
        drift = 500 * (1 + 0.2 * math.sin(step / rng.uniform(20, 60)))
        if job_wide_spike and 100 <= step < 130:
            drift *= 2.5  # e.g. every worker waits on shared storage
        for worker in range(workers):
            value = drift * offsets[worker] * math.exp(rng.gauss(0, noise))
            samples.append((10.0 * step, worker, value))
    return samples


def inject(samples: Samples, worker: int, start: float, end: float, slowdown: float) -> Samples:
    return [(t, w, v * slowdown if w == worker and start <= t <= end else v) for t, w, v in samples]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_quiet_jobs_have_no_stragglers(seed: int) -> None:
    assert detect_stragglers(synthetic_job(random.Random(seed))) == []


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_job_wide_slowdown_is_not_a_straggler(seed: int) -> None:
    assert detect_stragglers(synthetic_job(random.Random(seed), job_wide_spike=True)) == []


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), slowdown=st.floats(1.5, 3.0), length=st.integers(6, 40))
def test_an_injected_straggler_is_found_where_it_is(seed: int, slowdown: float, length: int) -> None:
    rng = random.Random(seed)
    base = synthetic_job(rng)
    worker = rng.randrange(max(w for _, w, _ in base) + 1)
    start_step = rng.randint(60, 200 - length - 5)
    start, end = 10.0 * start_step, 10.0 * (start_step + length - 1)
    (episode,) = detect_stragglers(inject(base, worker, start, end, slowdown))
    assert episode.worker == worker
    # Within two samples of the truth at both ends (hysteresis may hold on through noise).
    assert start <= episode.start <= start + 20
    assert end - 20 <= episode.end <= end + 20
    assert episode.peak_slowdown >= 1.25


def test_a_mild_slowdown_is_not_reported() -> None:
    base = synthetic_job(random.Random(7))
    assert detect_stragglers(inject(base, 2, 1000, 1500, 1.12)) == []


def test_steady_differences_are_a_separate_milder_finding() -> None:
    samples = [(10.0 * s, w, 100.0 * (1.3 if w == 3 else 1.0)) for s in range(100) for w in range(8)]
    assert detect_stragglers(samples) == []
    assert persistent_slow_workers(samples) == {3: 1.3}


def test_policy_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="min_slowdown must exceed 1"):
        StragglerPolicy(min_slowdown=0.9)
    with pytest.raises(ValueError, match="enter_count"):
        StragglerPolicy(enter_count=5, enter_window=4)


def load(name: str) -> Samples:
    path = DATA / name
    if not path.exists():
        pytest.skip(f"{path} not found: the PAI traces live in ../shared/data beside the repository")
    with path.open(newline="") as handle:
        return [(float(r["time"]), int(r["worker"]), float(r["batch_time_norm"])) for r in csv.DictReader(handle)]


def test_pai_job_1_worker_6_becomes_a_straggler() -> None:
    (episode,) = detect_stragglers(load("job_1_norm.csv"))
    assert episode.worker == 6
    assert 1780 <= episode.start <= 1850
    assert 1900 <= episode.end <= 1970


def test_pai_job_2_has_no_straggler_but_a_persistently_slow_worker() -> None:
    samples = load("job_2_norm.csv")
    assert detect_stragglers(samples) == []
    assert set(persistent_slow_workers(samples)) == {5}


def test_pai_job_2_with_an_injected_episode() -> None:
    samples = inject(load("job_2_norm.csv"), worker=3, start=1201, end=1401, slowdown=1.6)
    assert detect_stragglers(samples) == [Episode(3, 1201.0, 1401.0, pytest.approx(1.6, rel=0.1))]  # type: ignore[arg-type]


def test_noise_near_the_lower_threshold_does_not_stretch_an_episode() -> None:
    # Eight steady workers; worker 2 is 2.5x slower for steps 100-109, then shows one 1.15x blip.
    samples = [(10.0 * s, w, 100.0) for s in range(200) for w in range(8) if w != 2]
    for s in range(200):
        factor = 2.5 if 100 <= s <= 109 else 1.15 if s == 112 else 1.0
        samples.append((10.0 * s, 2, 100.0 * factor))
    (episode,) = detect_stragglers(samples)
    assert (episode.worker, episode.start, episode.end) == (2, 1000.0, 1090.0)


@pytest.mark.parametrize("workers", [3, 4, 5, 8])
def test_peer_ratios_of_aligned_workers_are_those_of_the_samples(workers: int) -> None:
    """The numpy path (workers on one grid) gives `peer_ratios`' very numbers, and falls back where it must."""
    rng = random.Random(workers)
    times = array("d", [1_795_000_000 + 15 * k for k in range(61)])
    for case in range(40):
        values = {w: array("d", [rng.choice([0.5, 0.5, 0.51, 0.7, 1.3]) * rng.uniform(0.9, 1.1) for _ in times])
                  for w in rng.sample(range(16), workers)}  # fmt: skip
        if case % 4 == 1:  # a NaN (no step in the rate's window), a zero: left out of the medians
            values[next(iter(values))][rng.randrange(61)] = rng.choice([math.nan, 0.0, -1.0])
        series = {w: Points(times if case % 4 != 2 else array("d", times), v) for w, v in values.items()}
        if case % 4 == 3:  # a worker sampled at other times
            first = next(iter(series))
            series[first] = Points(array("d", [t + 1 for t in times]), values[first])
        expected = peer_ratios((t, w, s) for w, points in series.items() for t, s in points)
        got = job_peer_ratios(series)
        assert list(got) == list(expected)
        assert (bool(got) and all(isinstance(r, Points) for r in got.values())) == (case % 4 in (0, 2)), (
            "numpy where it can"
        )
        assert {w: repr(list(r)) for w, r in got.items()} == {w: repr(list(r)) for w, r in expected.items()}
