"""Straggler detection: a worker whose step time rises against its own past and its peers.

In synchronous data-parallel training every step waits for the slowest worker, so one worker
running 25 % slower makes the whole job 25 % slower. The detector looks for exactly that, and
only that:

1. **Against the peers.** Each sample is divided by the median of all workers at the same moment.
   A job-wide slowdown (a slow checkpoint, a shared-storage hiccup) moves the median too and
   cancels out: it is not a straggler.
2. **Against its own past.** Workers differ steadily (another GPU model, a busier node); each
   worker's ratio is compared with its own trailing baseline, so a worker that was always 8 %
   slower is not flagged for being 8 % slower. That steady difference is reported separately
   and more mildly by `persistent_slow_workers()`.
3. **Material and clear.** A sample counts as slow when it is both at least `min_slowdown` times
   its baseline and `min_z` robust standard deviations (MAD-based) above it, so noisy workers
   need a larger jump than quiet ones.
4. **Sustained, with hysteresis.** An episode opens when `enter_count` of the last `enter_window`
   samples are slow; samples above a lower threshold (half the entry slowdown) hold it open
   through brief dips, and it closes after `exit_after` normal samples in a row. It ends at its
   last clearly slow sample: noise near the lower threshold never stretches it. Samples inside an
   episode never update the baseline, so a long episode cannot teach the detector that slow is
   normal.

The defaults come from those principles, not from any one trace; `bench/stragglers.py` runs them
on Alibaba PAI traces the detector was not fitted to.
"""

from __future__ import annotations

import collections
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

from gpuwise.diagnose.window import Points, step_values

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

MAD_TO_SIGMA = 1.4826  # a normal distribution's sigma from its median absolute deviation


@dataclass(frozen=True)
class StragglerPolicy:
    min_slowdown: float = 1.25
    min_z: float = 4.0
    # Noise floor: never treat a worker as steadier than 2 % of its baseline.
    min_relative_sigma: float = 0.02
    baseline_samples: int = 30
    warmup_samples: int = 10
    enter_window: int = 4
    enter_count: int = 3
    exit_after: int = 3

    def __post_init__(self) -> None:
        if self.min_slowdown <= 1:
            raise ValueError(f"min_slowdown must exceed 1 (got {self.min_slowdown})")
        if not 1 <= self.enter_count <= self.enter_window:
            raise ValueError("enter_count must be between 1 and enter_window")
        if self.warmup_samples < 2 or self.baseline_samples < self.warmup_samples:
            raise ValueError("need warmup_samples ≥ 2 and baseline_samples ≥ warmup_samples")

    @property
    def stay_slowdown(self) -> float:
        return 1 + (self.min_slowdown - 1) / 2


@dataclass(frozen=True)
class Episode:
    worker: int
    start: float
    end: float
    peak_slowdown: float  # worst sample against the worker's own baseline
    # The worker's baseline (its usual step time ÷ its peers' median) when the episode opened: what
    # "recovered" means once the window no longer reaches back before the episode.
    baseline: float = field(default=1.0, compare=False)

    def as_dict(self) -> dict[str, float | int]:
        return {
            "worker": self.worker,
            "start": self.start,
            "end": self.end,
            "peak_slowdown": round(self.peak_slowdown, 3),
        }


def median(values: Iterable[float]) -> float:
    """`statistics.median`, without its checks: the detector takes several per sample of every worker."""
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


def peer_ratios(samples: Iterable[tuple[float, int, float]]) -> dict[int, list[tuple[float, float]]]:
    """Each worker's (time, step time ÷ median step time of all workers at that time)."""
    by_time: dict[float, dict[int, float]] = {}
    for time, worker, value in samples:
        if value > 0:
            if (row := by_time.get(time)) is None:
                by_time[time] = row = {}
            row[worker] = value
    ratios: dict[int, list[tuple[float, float]]] = {}
    for time in sorted(by_time):
        row = by_time[time]
        if len(row) < 3:  # a median of one or two workers says nothing about peers
            continue
        middle = median(row.values())
        for worker, value in row.items():
            if (series := ratios.get(worker)) is None:
                ratios[worker] = series = []
            series.append((time, value / middle))
    return ratios


def job_peer_ratios(series: Mapping[int, Sequence[tuple[float, float]]]) -> dict[int, Sequence[tuple[float, float]]]:
    """`peer_ratios` of a job's workers, from each worker's (time, step time) series.

    Workers read in one query share their sample times (`Points` on the query's grid); then the
    ratios of the whole job are a few numpy operations on a workers × times matrix instead of a
    sort and a dict per sample, some 30 times faster for the same numbers: each column's median
    is its middle value or the two middle values' sum halved, as `median` takes it, and each
    ratio the same division. Anything else (workers sampled at other times, a value that is not
    positive, fewer than three workers) goes through `peer_ratios`.
    """
    aligned = _aligned(series)
    if aligned is not None:
        import numpy as np  # here, not at the top: the sidecar imports this package without numpy

        times, rows = aligned
        steps = np.array([np.frombuffer(values, dtype=np.float64) for values in rows.values()])
        if (steps > 0).all():
            ordered, half = np.sort(steps, axis=0), len(rows) // 2
            middle = ordered[half] if len(rows) % 2 else (ordered[half - 1] + ordered[half]) / 2
            ratios = steps / middle
            return {worker: Points(times, array("d", ratios[i].tobytes())) for i, worker in enumerate(rows)}
    return dict(peer_ratios((t, worker, seconds) for worker, points in series.items() for t, seconds in points))


def _aligned(
    series: Mapping[int, Sequence[tuple[float, float]]],
) -> tuple[array[float], dict[int, array[float]]] | None:
    """The workers' common times and each one's values, when there are 3 or more workers and all
    are `Points` at the same times; None otherwise."""
    if len(series) < 3 or not all(isinstance(points, Points) for points in series.values()):
        return None
    columns = [points for points in series.values() if isinstance(points, Points)]
    times = columns[0].times
    if not times or any(p.times is not times and p.times != times for p in columns):
        return None
    return times, {worker: points.values for worker, points in series.items() if isinstance(points, Points)}


@overload
def _judge(policy: StragglerPolicy, ratio: float, base: float, sigma: float) -> tuple[float, float, bool]: ...
@overload
def _judge(
    policy: StragglerPolicy, ratio: NDArray[np.float64], base: NDArray[np.float64], sigma: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]: ...
def _judge(policy: StragglerPolicy, ratio: Any, base: Any, sigma: Any) -> Any:
    """A sample's slowdown against its baseline, its z-score, and whether it is clearly slow.

    Operators only, so that the one rule applies alike to a sample (`_WorkerState.step`) and,
    elementwise with the same IEEE operations, to numpy arrays of samples (`_WorkerState.skip_ahead`).
    """
    slowdown, z = ratio / base, (ratio - base) / sigma
    return slowdown, z, (slowdown >= policy.min_slowdown) & (z >= policy.min_z)


@dataclass
class _WorkerState:
    policy: StragglerPolicy
    history: collections.deque[float] = field(init=False)
    recent: collections.deque[tuple[float, bool]] = field(init=False)
    start: float | None = None
    last_slow: float = 0.0
    normal_streak: int = 0
    peak: float = 1.0
    base: float = 1.0  # the baseline the open episode is measured against
    # baseline() of the history as it is: while an episode lasts the history does not change.
    _baseline: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        self.history = collections.deque(maxlen=self.policy.baseline_samples)
        self.recent = collections.deque(maxlen=self.policy.enter_window)

    def remember(self, ratio: float) -> None:
        self.history.append(ratio)
        self._baseline = None

    def baseline(self) -> tuple[float, float]:
        if self._baseline is None:
            base = median(self.history)
            mad = median([abs(h - base) for h in self.history])
            self._baseline = base, max(MAD_TO_SIGMA * mad, self.policy.min_relative_sigma * base)
        return self._baseline

    def step(self, time: float, ratio: float) -> tuple[float, float, float, float] | None:
        """Feed one sample; returns (start, end, peak, baseline) when an episode closes."""
        policy = self.policy
        if len(self.history) < policy.warmup_samples:
            self.remember(ratio)
            return None
        base, sigma = self.baseline()
        slowdown, z, slow = _judge(policy, ratio, base, sigma)
        if self.start is None:
            self.recent.append((time, slow))
            if slow and sum(s for _, s in self.recent) >= policy.enter_count:
                self.start = next(t for t, s in self.recent if s)
                self.last_slow, self.normal_streak, self.peak, self.base = time, 0, slowdown, base
            elif not slow:
                self.remember(ratio)
            return None
        if slow:  # clearly slow: the episode goes on
            self.last_slow, self.normal_streak = time, 0
            self.peak = max(self.peak, slowdown)
            return None
        if slowdown >= policy.stay_slowdown and z >= policy.min_z / 2:  # a dip: hold the episode open
            self.normal_streak = 0
            return None
        self.normal_streak += 1
        if self.normal_streak < policy.exit_after:
            return None
        return self.close()

    def close(self) -> tuple[float, float, float, float] | None:
        if self.start is None:
            return None
        episode = (self.start, self.last_slow, self.peak, self.base)
        self.start = None
        self.recent.clear()
        return episode


PeerRatios = Mapping[int, Sequence[tuple[float, float]]]  # per worker: (time, step time ÷ peers' median)


def detect_stragglers(
    samples: Iterable[tuple[float, int, float]], policy: StragglerPolicy | None = None
) -> list[Episode]:
    """Straggler episodes in (time, worker, step time) samples, in time order."""
    return episodes_in(peer_ratios(samples), policy)


def episodes_in(ratios: PeerRatios, policy: StragglerPolicy | None = None) -> list[Episode]:
    """Straggler episodes in workers' peer ratios (`peer_ratios`), in time order.

    A worker whose ratios never spread by `min_slowdown` is skipped: a sample is slow only at
    `min_slowdown` × a baseline that is a median of the worker's own earlier ratios, so at least
    that much above the smallest of them. Most workers of most jobs are such, and following
    each sample's baseline (two medians of up to `baseline_samples` values) is most of what
    evaluating a fleet's jobs would otherwise cost; the result is the same.
    """
    policy = policy or StragglerPolicy()
    episodes: list[Episode] = []
    for worker, series in ratios.items():
        values = step_values(series)
        if len(values) <= policy.warmup_samples or max(values) < policy.min_slowdown * min(values):
            continue
        state = _WorkerState(policy)
        closed = [state.step(time, ratio) for time, ratio in series] + [state.close()]
        episodes += [Episode(worker, *episode) for episode in filter(None, closed)]
    return sorted(episodes, key=lambda e: (e.start, e.worker))


def recovered(ratios: Sequence[tuple[float, float]], limit: float, policy: StragglerPolicy | None = None) -> bool:
    """Whether a worker's last `exit_after` peer ratios are all under `limit`: the detector's exit rule.

    Too few samples to tell is not recovered.
    """
    policy = policy or StragglerPolicy()
    recent = ratios[-policy.exit_after :]
    return len(recent) == policy.exit_after and all(ratio < limit for _, ratio in recent)


def still_slow(ratios: Sequence[tuple[float, float]], baseline: float, policy: StragglerPolicy | None = None) -> bool:
    """Whether a straggler is still slow, from its latest peer ratios and its baseline before the episode.

    The detector's own exit rule (`recovered` under `stay_slowdown` × the baseline), for an
    episode that opened before the samples at hand. Once a straggler has been slow for longer
    than the window, the window holds no baseline to compare with, and the detector would take
    the slow ratio for the worker's normal; the caller carries the baseline over from when the
    episode opened (`Episode.baseline`).
    """
    policy = policy or StragglerPolicy()
    return not recovered(ratios, policy.stay_slowdown * baseline, policy)


def persistent_slow_workers(
    samples: Iterable[tuple[float, int, float]], min_slowdown: float = 1.05
) -> Mapping[int, float]:
    """Workers steadily slower than their peers over the whole series (median peer ratio)."""
    return steadily_slow(peer_ratios(samples), min_slowdown)


def steadily_slow(ratios: PeerRatios, min_slowdown: float = 1.05) -> Mapping[int, float]:
    """Workers whose median peer ratio (`peer_ratios`) is at least `min_slowdown`, with that median."""
    typical = {w: median(step_values(series)) for w, series in ratios.items()}
    return {w: round(ratio, 3) for w, ratio in sorted(typical.items()) if ratio >= min_slowdown}
