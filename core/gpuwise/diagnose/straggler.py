"""Straggler detection: a worker whose step time rises against its own past and its peers.

In synchronous data-parallel training every step waits for the slowest worker, so one worker
running 25 % slower makes the whole job 25 % slower. The detector looks for exactly that, and
only that:

1. **Against the peers.** Each sample is divided by the median of all workers at the same moment.
   A job-wide slowdown (a slow checkpoint, a shared-storage hiccup) moves the median too and
   cancels out: it is not a straggler. A slow sample must also be behind the peers at that moment
   (at least half the entry slowdown above their median): when most workers slow down together,
   the few that did not run ahead meanwhile, and are not stragglers when the others recover.
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
5. **A group slowed together.** Fewer than half of the workers, and at least two, slowed
   together by a smaller factor, `min_group_slowdown` (1.1 against 1.25 alone): the job waits
   for them as it would for one. Several workers rising at once against their own pasts and the
   others' median is stronger evidence than one worker doing so, and what a group shares (a
   node, a switch, a rack) is a cause worth acting on; 10 % is the excess from which a worker
   steadily slower than its peers is worth a note (`DiagnosisThresholds.persistent_slowdown`).
   The members' episodes are found as a single worker's are, with that slowdown and the z-score
   two agreeing members add up to (`min_z` / √2 each, Stouffer's sum); an episode counts only if
   its median sample is `min_group_slowdown` slow, not just its entry (noise around a 7 % slowdown
   now and then crosses 10 % three samples in four). At least two such episodes overlapping in
   time, of fewer than half of the job's workers, are a group; half or more are the job itself
   slowing (step 1 already sees most of those as no one's). The group must be as clear as a
   worker alone is when its episode opens: `enter_count` samples `min_z` above its baseline add
   up to `min_z` × √`enter_count` (Stouffer's), and so must the members' slowdowns over the
   group's span, each in standard errors of its span's median. Among a dozen workers with 6 %
   noise, two will now and then run 12 % slow together for three or four samples by chance.
   Each member is reported with the group (`Episode.group`): a member that is a straggler alone
   too keeps that episode's window.

The defaults come from those principles, not from any one trace; `bench/stragglers.py` runs them
on Alibaba PAI traces the detector was not fitted to.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, overload

from gpuwise.diagnose.window import Points, step_values

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

K = TypeVar("K")
MIN_GROUP = 2  # the fewest workers that make a straggler group
MAD_TO_SIGMA = 1.4826  # a normal distribution's sigma from its median absolute deviation
# Samples that `_WorkerState.skip_ahead` judges one by one before it takes the rolling medians.
_CHEAP_CANDIDATES = 3
_MEDIAN_ERROR = math.sqrt(math.pi / 2)  # a median's standard error over a mean's, for normal noise


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
    # A minority of workers (two or more, fewer than half) slowed together: see the module's point 5.
    min_group_slowdown: float = 1.1

    def __post_init__(self) -> None:
        if self.min_slowdown <= 1:
            raise ValueError(f"min_slowdown must exceed 1 (got {self.min_slowdown})")
        if self.min_group_slowdown <= 1:
            raise ValueError(f"min_group_slowdown must exceed 1 (got {self.min_group_slowdown})")
        if not 1 <= self.enter_count <= self.enter_window:
            raise ValueError("enter_count must be between 1 and enter_window")
        if self.warmup_samples < 2 or self.baseline_samples < self.warmup_samples:
            raise ValueError("need warmup_samples ≥ 2 and baseline_samples ≥ warmup_samples")

    @property
    def stay_slowdown(self) -> float:
        return 1 + (self.min_slowdown - 1) / 2

    @property
    def group_member(self) -> StragglerPolicy:
        """The policy a group's members' episodes are found with, before each is measured against
        the rest of the job (`_slowdown_against`): they open at half `min_group_slowdown`'s excess,
        as an episode holds at half its entry's, and with the z-score two members add up to
        `min_z` with (Stouffer's z of k members is their sum over √k)."""
        return dataclasses.replace(
            self, min_slowdown=1 + (self.min_group_slowdown - 1) / 2, min_z=self.min_z / math.sqrt(MIN_GROUP)
        )

    def least_slowdown(self, workers: int) -> float:
        """The smallest slowdown that makes an episode among `workers` workers: one worker's against
        its baseline, or a group's against the rest of the job where there is room for a group
        (`has_groups`). Step times that never spread by its square root make neither."""
        return min(self.min_slowdown, self.min_group_slowdown) if has_groups(workers) else self.min_slowdown


def has_groups(workers: int) -> bool:
    """Whether `workers` workers can hold a straggler group: at least `MIN_GROUP` workers, fewer than half."""
    return workers > 2 * MIN_GROUP


@dataclass(frozen=True)
class Episode:
    worker: int
    start: float
    end: float
    peak_slowdown: float  # worst sample against the worker's own baseline
    # The worker's baseline (its usual step time ÷ its peers' median) when the episode opened: what
    # "recovered" means once the window no longer reaches back before the episode.
    baseline: float = field(default=1.0, compare=False)
    # The workers that slowed together, this one among them (module docstring, point 5); () alone.
    group: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, float | int | list[int]]:
        shown: dict[str, float | int | list[int]] = {
            "worker": self.worker,
            "start": self.start,
            "end": self.end,
            "peak_slowdown": round(self.peak_slowdown, 3),
        }
        if self.group:
            shown["group"] = list(self.group)
        return shown


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
    times = _common_times(series)
    steps = worker_matrix(series) if times is not None else None
    if times is not None and steps is not None and (steps > 0).all():
        import numpy as np  # there: `worker_matrix` found it

        ordered, half = np.sort(steps, axis=0), len(series) // 2
        middle = ordered[half] if len(series) % 2 else (ordered[half - 1] + ordered[half]) / 2
        ratios = steps / middle
        return {worker: Points(times, array("d", ratios[i].tobytes())) for i, worker in enumerate(series)}
    return dict(peer_ratios((t, worker, seconds) for worker, points in series.items() for t, seconds in points))


def _common_times(series: Mapping[int, Sequence[tuple[float, float]]]) -> array[float] | None:
    """The workers' common times, when there are 3 or more workers and all are `Points` at the
    same times; None otherwise."""
    if len(series) < 3 or not all(isinstance(points, Points) for points in series.values()):
        return None
    columns = [points for points in series.values() if isinstance(points, Points)]
    times = columns[0].times
    if not times or any(p.times is not times and p.times != times for p in columns):
        return None
    return times


@overload
def _slow_enough(policy: StragglerPolicy, slowdown: float) -> bool: ...
@overload
def _slow_enough(policy: StragglerPolicy, slowdown: NDArray[np.float64]) -> NDArray[np.bool_]: ...
def _slow_enough(policy: StragglerPolicy, slowdown: Any) -> Any:
    """Whether a sample `slowdown` times its baseline is slow enough to be clearly slow (if its
    z-score is high enough too): for one sample (`_WorkerState.step`) and, elementwise, for a
    numpy array of them (`_WorkerState.skip_ahead`)."""
    return slowdown >= policy.min_slowdown


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
        base, sigma = self._baseline or self.baseline()
        slowdown, z = ratio / base, (ratio - base) / sigma
        # Clearly slow: against its own past, and against its peers now. A worker that ran ahead of
        # its peers while most of them were slowed (its ratio, and so its baseline, fell) is back
        # among them when they recover, not behind them: it holds no step back.
        slow = _slow_enough(policy, slowdown) and z >= policy.min_z and ratio >= policy.stay_slowdown
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

    def skip_ahead(
        self, times: Sequence[float], values: Sequence[float], ratios: NDArray[np.float64], lowest: float, first: int
    ) -> int:
        """`step()` through the samples from `first` on, outside an episode, up to and including the
        first clearly slow one; returns the index of the sample after it (or the end).

        Outside an episode each sample that is not clearly slow is remembered, and one can be
        clearly slow only `_slow_enough` against its baseline's median. No median is below the
        smallest of all the ratios, `lowest`, so most samples cannot be: those are remembered (and,
        past the warmup, noted as not slow) without a `baseline()` each, and the others go through
        `step()`, which judges them by the rules. When the first few of those were not slow after
        all, the others are told apart by their very medians: numpy takes them for all the samples
        at once (`_rolling_medians`), as long as every sample was remembered. The first slow one
        is not: there this returns. `ratios` is `values` as a numpy array, all positive and under
        1e300 (`_skip_through`).
        """
        import numpy as np  # here, not at the top: the sidecar imports this package without numpy

        policy, count = self.policy, len(values)
        judged = first + max(0, policy.warmup_samples - len(self.history))  # the first sample step() judges
        done = first
        if judged < count:
            cheap = _slow_enough(policy, ratios[judged:] / lowest).nonzero()[0].tolist()
            for k in cheap[:_CHEAP_CANDIDATES]:
                if self._slow_at(times, values, done, judged + k, judged):
                    return judged + k + 1
                done = judged + k + 1
            if len(cheap) > _CHEAP_CANDIDATES:  # as many were not slow after all: take the medians
                after, history = judged + cheap[_CHEAP_CANDIDATES], np.array(self.history)
                window = np.concatenate((history, ratios[done:]))  # the history now, and every ratio after it
                medians = _rolling_medians(window, policy.baseline_samples, len(history), after - done + len(history))
                for k in _slow_enough(policy, ratios[after:] / medians).nonzero()[0].tolist():
                    if self._slow_at(times, values, done, after + k, judged):
                        return after + k + 1
                    done = after + k + 1
        self._remember_all(times, values, done, count, judged)
        return count

    def _slow_at(self, times: Sequence[float], values: Sequence[float], first: int, sample: int, judged: int) -> bool:
        """Remember the samples from `first` to `sample` (none of them slow), then `step()` that one;
        whether it was slow."""
        self._remember_all(times, values, first, sample, judged)
        self.step(times[sample], values[sample])
        return self.start is not None or self.recent[-1][1]

    def _remember_all(
        self, times: Sequence[float], values: Sequence[float], first: int, stop: int, judged: int
    ) -> None:
        """What `step()` does with samples `first` to `stop` that are not clearly slow, outside an
        episode: remember them, and note those from `judged` on as not slow."""
        if stop > first:
            self.history.extend(values[max(first, stop - self.policy.baseline_samples) : stop])
            self._baseline = None
            noted = max(first, judged, stop - self.policy.enter_window)
            self.recent.extend(zip(times[noted:stop], itertools.repeat(False)))


def _rolling_medians(window: NDArray[np.float64], size: int, known: int, first: int) -> NDArray[np.float64]:
    """The median of the last `size` ratios before each of `window[first:]`: bit for bit what `median`
    takes of a `_WorkerState.history` that held `window[:known]` and then remembered them all.

    One row per ratio of the `size` before it (+∞ where there are fewer), sorted: the median is the
    row's middle value or its two middle values' sum halved, as `median` takes it. An odd count's
    middle value is taken as itself halved twice over, (x + x) / 2, which is x for any x under 1e300.
    """
    import numpy as np

    window = np.concatenate((np.full(size - known, np.inf), window))
    rows, lower, upper = _median_layout(size, known, first - known, len(window) - size)
    ordered = np.sort(window[rows], axis=1).ravel()
    medians: NDArray[np.float64] = (ordered[lower] + ordered[upper]) / 2
    return medians


@functools.lru_cache(maxsize=256)
def _median_layout(
    size: int, known: int, first: int, count: int
) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.intp]]:
    """For `_rolling_medians`: each row's indices into the window, and where its middle values
    lie once the rows are sorted and laid end to end."""
    import numpy as np

    offsets = np.arange(first, count)
    lengths = np.minimum(known + offsets, size)  # ratios before each one, ≥ warmup_samples ≥ 2
    starts = np.arange(len(offsets)) * size
    rows = offsets[:, None] + np.arange(size)
    for array_ in (rows, starts):
        array_.flags.writeable = False
    lower, upper = starts + (lengths - 1) // 2, starts + lengths // 2
    lower.flags.writeable = upper.flags.writeable = False
    return rows, lower, upper


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
    evaluating a fleet's jobs would otherwise cost; the result is the same. For the same reason
    the others skip, outside episodes, the samples that cannot be slow
    (`_WorkerState.skip_ahead`): the same episodes as one `step()` a sample, some 3.5 times faster
    on a benchmark's straggler job (`bench/straggler_speed.py`).
    """
    return _episodes_in(ratios, policy or StragglerPolicy(), skip_ahead=True)


def _episodes_in(ratios: PeerRatios, policy: StragglerPolicy, *, skip_ahead: bool) -> list[Episode]:
    """`episodes_in`; with `skip_ahead`, the stretches outside episodes go through
    `_WorkerState.skip_ahead` rather than one `step()` a sample: the same episodes, faster."""
    episodes = _worker_episodes(_followed(ratios, policy, skip_ahead), policy)
    if has_groups(len(ratios)):
        episodes = _with_groups(episodes, ratios, policy, skip_ahead)
    return sorted(episodes, key=lambda e: (e.start, e.worker))


def _worker_episodes(followed: list[_Followed], policy: StragglerPolicy) -> list[Episode]:
    """Each followed worker's episodes under `policy`, worker by worker."""
    episodes: list[Episode] = []
    for worker, series, ahead, lowest in followed:
        values = step_values(series)
        times = _times(series)
        state, closed = _WorkerState(policy), []
        step, i, count = state.step, 0, len(values)
        while i < count:
            # Outside an episode, with no slow sample in sight: skip to the next slow one.
            if ahead is not None and state.start is None and not any(slow for _, slow in state.recent):
                i = state.skip_ahead(times, values, ahead, lowest, i)
            elif (episode := step(times[i], values[i])) is None:
                i += 1
            else:
                closed.append(episode)
                i += 1
        if (episode := state.close()) is not None:
            closed.append(episode)
        episodes += [Episode(worker, *episode) for episode in closed]
    return episodes


def _times(series: Sequence[tuple[float, float]]) -> Sequence[float]:
    return series.times if isinstance(series, Points) else [time for time, _ in series]


def _with_groups(alone: list[Episode], ratios: PeerRatios, policy: StragglerPolicy, skip_ahead: bool) -> list[Episode]:
    """`alone` (one worker's episodes), with the straggler groups among `ratios`' workers (module
    docstring, point 5): a member that has an episode alone overlapping its group's keeps that
    one, named with the group; the others are reported with their group episode, while at least
    one other member's is open too (they were slow together then; alone, near the noise a member
    opens at, it was not).

    The members' episodes are found by the same means as one worker's, so skipping ahead finds
    the same groups; a job with fewer than two workers whose ratios spread by the members'
    slowdown has none, and costs no more than the reductions `_followed` takes.
    """
    member = policy.group_member
    followed = _may_open(_followed(ratios, member, skip_ahead), member)
    if len(followed) < MIN_GROUP:
        return alone
    episodes = list(alone)
    for run in _overlapping(_worker_episodes(followed, member)):
        group = _group(run, ratios, policy)
        for slow in (e for e in run if e.worker in group):
            held = [
                k
                for k, e in enumerate(episodes)
                if e.worker == slow.worker and e.start <= slow.end and slow.start <= e.end
            ]
            for k in held:
                if not episodes[k].group:
                    episodes[k] = dataclasses.replace(episodes[k], group=group)
            others = [e for e in run if e.worker in group and e.worker != slow.worker]
            start, end = max(slow.start, min(e.start for e in others)), min(slow.end, max(e.end for e in others))
            if not held and start <= end:
                episodes.append(dataclasses.replace(slow, start=start, end=end, group=group))
    return episodes


def _may_open(followed: list[_Followed], policy: StragglerPolicy) -> list[_Followed]:
    """The followed workers whose ratios could open an episode: `enter_count` of some
    `enter_window` samples in a row (of all of them in a series shorter than that: an episode opens
    on fewer samples than a window where there are no more) at least `stay_slowdown` (behind the
    peers) and `min_slowdown` times the worker's smallest ratio (no baseline is below it). Taken for
    a group's members, who open at a slowdown that a noisy worker's ratios spread by, but seldom so
    many in a row. A worker whose smallest ratio is not positive (or NaN) has no such bound: it
    stays. Workers with their ratios as arrays of one length (`_followed`'s from one matrix) are
    taken in one go."""
    window, count = policy.enter_window, policy.enter_count
    floors = [max(policy.stay_slowdown, policy.min_slowdown * lowest) for _, _, _, lowest in followed]
    rows = [ahead for _, _, ahead, _ in followed if ahead is not None]
    opens: list[bool]
    if followed and len(rows) == len(followed) and len({len(row) for row in rows}) == 1:
        import numpy as np  # there: `_followed` made the rows with it

        window = min(window, len(rows[0]))
        runs = np.cumsum(np.vstack(rows) >= np.array(floors)[:, None], axis=1, dtype=np.intp)  # how many so far
        within = runs[:, window - 1 :].copy()  # how many in each `window` samples in a row
        within[:, 1:] -= runs[:, :-window]
        opens = np.any(within >= count, axis=1).tolist()
    else:
        opens = []
        for (_, series, _, _), floor in zip(followed, floors, strict=True):
            marks = [value >= floor for value in step_values(series)]
            opens.append(any(sum(marks[k : k + window]) >= count for k in range(max(1, len(marks) - window + 1))))
    return [worker for worker, may in zip(followed, opens, strict=True) if may or not worker[3] > 0]


def _group(run: list[Episode], ratios: PeerRatios, policy: StragglerPolicy) -> tuple[int, ...]:
    """The straggler group among a run of overlapping member episodes (`_with_groups`); () if none.

    Each worker is measured over the run's span against the median of the workers outside the
    run (`_slowdown_against`): those are the rest of the job if the run is a group, and keep their
    pace against one another, whatever the group does to the median of all. The workers of the run
    slowed by `min_group_slowdown` are the group (slow for most of the run: together, not one long
    episode and another's brief brush with the noise); with every worker slowed by as much as a
    member opens at, they must be fewer than half of the job's. When most of the job slowed, the
    workers outside the run are slowed and unslowed ones mixed, and many move against their median.
    A worker slowed with the group that opened no episode (a member faster than the rest before,
    and barely behind the median of all after) is taken out of the rest for a second measure, but
    not named: it has no episode to report. Last, the group's slowdowns must be clear of the
    members' noise, by as much as a worker's alone when its episode opens (module docstring,
    point 5).
    """
    workers = {e.worker for e in run}
    if len(workers) < MIN_GROUP:
        return ()
    span, opening = (min(e.start for e in run), max(e.end for e in run)), policy.group_member.min_slowdown
    measures: dict[int, _Slowdown] = {}
    for _ in range(2):  # once more without the workers that slowed with the run but opened no episode
        rest = _rest_medians(ratios, workers | {w for w, m in measures.items() if m.slowdown >= opening})
        measures = {
            worker: _slowdown_against(series, rest, *span, policy.min_relative_sigma)
            for worker, series in ratios.items()
        }
    group = tuple(sorted(w for w in workers if measures[w].slowdown >= policy.min_group_slowdown))
    slowed = sum(m.slowdown >= opening for m in measures.values())
    if len(group) < MIN_GROUP or slowed >= len(ratios) / 2:
        return ()
    evidence = sum(measures[w].z for w in group) / math.sqrt(len(group))  # Stouffer's
    return group if evidence >= policy.min_z * math.sqrt(policy.enter_count) else ()


class _Slowdown(NamedTuple):
    """A worker's slowdown against the rest of the job over a span (`_slowdown_against`), and how
    many standard errors of its span's median above its usual pace that is."""

    slowdown: float
    z: float


def _rest_medians(ratios: PeerRatios, excluded: set[int]) -> dict[float, float]:
    """At each time, the median ratio of the workers not `excluded`: a worker's ratio over it is its
    step time over the median step time of those others (the job's median cancels)."""
    columns: dict[float, list[float]] = {}
    for worker, series in ratios.items():
        if worker not in excluded:
            for time, ratio in series:
                if (column := columns.get(time)) is None:
                    columns[time] = column = []
                column.append(ratio)
    return {time: median(column) for time, column in columns.items()}


def _slowdown_against(
    series: Sequence[tuple[float, float]], rest: Mapping[float, float], start: float, end: float, floor: float
) -> _Slowdown:
    """How much slower against `rest` (`_rest_medians`) a worker ran from `start` to `end` than it
    does otherwise: the median of its ratios to the rest inside over the median of those outside,
    before and after alike. Not against the baseline a member's episode opened with: the median of
    all workers moves as a group leaves the middle of their order, and a baseline learnt while most
    of the job was slowed (the worker ran ahead) is not its usual pace. 0 where there is nothing
    to compare.

    The z-score is the inside median's excess over the standard error of a median of that many
    samples (√(π/2) σ/√n), with σ from the outside ratios' spread as a baseline's is taken
    (`_WorkerState.baseline`, `floor` for `min_relative_sigma`). Not the members' per-sample
    z-scores: a worker that is often the median of all has a ratio of exactly 1 then, and a
    spread that looks far smaller than it is.
    """
    inside: list[float] = []
    outside: list[float] = []
    for time, ratio in series:
        middle = rest.get(time, math.nan)
        if middle > 0:
            (inside if start <= time <= end else outside).append(ratio / middle)
    usual = median(outside) if outside else math.nan
    if not (inside and usual > 0):
        return _Slowdown(0.0, 0.0)
    typical = median(inside)
    sigma = max(MAD_TO_SIGMA * median([abs(r - usual) for r in outside]), floor * usual)
    error = sigma * _MEDIAN_ERROR / math.sqrt(len(inside))
    z = (typical - usual) / error if error > 0 else math.inf if typical > usual else 0.0
    return _Slowdown(typical / usual, z)


def _overlapping(episodes: Iterable[Episode]) -> list[list[Episode]]:
    """Episodes in runs whose time spans overlap, one after the other: in time order, each episode
    joins the run before it if it starts before that run's last end."""
    runs: list[list[Episode]] = []
    end = -math.inf
    for episode in sorted(episodes, key=lambda e: (e.start, e.worker)):
        if runs and episode.start <= end:
            runs[-1].append(episode)
            end = max(end, episode.end)
        else:
            runs.append([episode])
            end = episode.end
    return runs


# A worker, its ratios, and those as a numpy array and their smallest, for `_WorkerState.skip_ahead`.
_Followed = tuple[int, Sequence[tuple[float, float]], "NDArray[np.float64] | None", float]


def _followed(ratios: PeerRatios, policy: StragglerPolicy, skip_ahead: bool) -> list[_Followed]:
    """The workers whose ratios spread by `min_slowdown` (`episodes_in`: the others have no
    episode), with their ratios as a numpy array for `skip_ahead` where they are `_skippable`.

    With `skip_ahead`, workers that share their sample times (`Points` from `job_peer_ratios`)
    are taken together: each one's smallest and largest ratio is then a numpy reduction over
    them all, not two Python loops that box every sample. A worker with a NaN among its ratios,
    whose Python min() and max() depend on where the NaN lies, is taken alone.
    """
    matrix = worker_matrix(ratios) if skip_ahead else None
    if matrix is None:
        followed: list[_Followed] = []
        for worker, series in ratios.items():
            values = step_values(series)
            if len(values) <= policy.warmup_samples:
                continue
            lowest = min(values)
            if max(values) < policy.min_slowdown * lowest:
                continue
            followed.append((worker, series, _skippable(values, lowest, policy) if skip_ahead else None, lowest))
        return followed
    if matrix.shape[1] <= policy.warmup_samples:
        return []
    import numpy as np

    lows, highs = np.minimum.reduce(matrix, axis=1).tolist(), np.maximum.reduce(matrix, axis=1).tolist()
    followed = []
    for row, (worker, series) in enumerate(ratios.items()):
        lowest, highest = lows[row], highs[row]
        if highest >= policy.min_slowdown * lowest:
            followed.append((worker, series, matrix[row] if _skip_through(lowest, highest, policy) else None, lowest))
        elif math.isnan(lowest):  # so is highest; Python's min() and max() could be something else
            followed += _followed({worker: series}, policy, skip_ahead=False)
    return followed


def worker_matrix(ratios: PeerRatios) -> NDArray[np.float64] | None:
    """The workers' values (ratios, or step times for `job_peer_ratios` and `step_extremes`) as
    the rows of a matrix, read-only, when all are `Points` of as many samples and numpy is there;
    None otherwise."""
    columns = [series.values for series in ratios.values() if isinstance(series, Points)]
    if not columns or len(columns) < len(ratios) or len({len(values) for values in columns}) > 1:
        return None
    try:
        import numpy as np
    except ImportError:  # the sidecar's image has no numpy
        return None
    return np.frombuffer(b"".join(columns), dtype=np.float64).reshape(len(columns), len(columns[0]))


def step_extremes(series: Mapping[int, Sequence[tuple[float, float]]]) -> tuple[float, float] | None:
    """The smallest and the largest step time of all the workers (NaN if one is); None if a worker
    has none, or there are no workers.

    Taken in C: Python's min() and max() would box every sample. Workers on one grid, as a
    snapshot's are, make one matrix (`worker_matrix`) with no copy per worker.
    """
    import numpy as np  # here, not at the top: the sidecar image imports this module and has no numpy

    steps = worker_matrix(series)
    if steps is None:
        columns = [np.asarray(step_values(points), dtype=np.float64) for points in series.values()]
        if not columns or not all(column.size for column in columns):
            return None
        steps = np.concatenate(columns)
    elif not steps.size:
        return None
    return float(steps.min()), float(steps.max())


def step_extremes_by_job(
    jobs: Mapping[K, Mapping[int, Sequence[tuple[float, float]]]], batch: int = 256
) -> dict[K, tuple[float, float]]:
    """`step_extremes` of each job that has them, `batch` jobs at a time.

    The values of a batch's jobs that hold them in arrays (`Points`) are joined once, and each
    job's smallest and largest is a numpy `reduceat` over its stretch: not a numpy matrix and two
    reductions per job, which cost more in calls than in arithmetic. A batch joins at most
    `batch` jobs' step times (a few hundred kB), never a fleet's. The others take `step_extremes`.
    """
    import numpy as np  # here, not at the top: the sidecar image imports this module and has no numpy

    extremes: dict[K, tuple[float, float]] = {}
    keys = list(jobs)
    for first in range(0, len(keys), batch):
        joined: list[K] = []
        columns: list[array[float]] = []
        starts: list[int] = []
        at = 0
        for key in keys[first : first + batch]:
            workers = [points.values for points in jobs[key].values() if isinstance(points, Points)]
            if not workers or len(workers) < len(jobs[key]) or not all(workers):
                if (alone := step_extremes(jobs[key])) is not None:
                    extremes[key] = alone
                continue
            joined.append(key)
            starts.append(at)
            columns += workers
            at += sum(map(len, workers))
        if joined:
            values = np.frombuffer(b"".join(columns), dtype=np.float64)
            lows = np.minimum.reduceat(values, starts).tolist()
            highs = np.maximum.reduceat(values, starts).tolist()
            extremes.update(zip(joined, zip(lows, highs, strict=True), strict=True))
    return extremes


def _skippable(values: Sequence[float], lowest: float, policy: StragglerPolicy) -> NDArray[np.float64] | None:
    """`values`, whose smallest is `lowest`, as a numpy array for `_WorkerState.skip_ahead` when
    `_skip_through` says so and numpy is there; None otherwise."""
    total = sum(values)  # at least the largest value if all are positive; NaN if one is NaN
    if not (total < 1e300 and _skip_through(lowest, total, policy)):
        return None
    try:
        import numpy as np
    except ImportError:
        return None
    return np.asarray(values, dtype=np.float64)


def _skip_through(lowest: float, highest: float, policy: StragglerPolicy) -> bool:
    """Whether `_WorkerState.skip_ahead` may go through a worker's ratios from `lowest` to `highest`
    (no NaN among them): when all are positive, none is 1e300 or more times another (peer ratios
    are nowhere near), and no baseline's sigma can be zero.

    With numpy, a quotient or a sum that overflows is infinite as it is in Python, but with a
    warning. `skip_ahead` takes no sigma for the samples that cannot be slow; `step()` would, and
    with a zero sigma it raises ZeroDivisionError. A sigma is at least `min_relative_sigma` times
    its median, which is at least the smallest ratio.
    """
    return lowest > 0 and highest < 1e300 and highest / lowest < 1e300 and policy.min_relative_sigma * lowest > 0


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
