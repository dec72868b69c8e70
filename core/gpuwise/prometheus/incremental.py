"""A round's range answers read into each series' points, joined to the previous round's.

The batched read (`gpuwise.prometheus.batched.fetch`) asks, after its first round, only for the
last few steps of the window: `Splice` says which previous points a series keeps and how the new
ones join them, `Reader` reads an answer into points, with or without a previous round.
"""

from __future__ import annotations

import bisect
import itertools
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, TypeVar

from gpuwise.diagnose.window import Points, slowdown_bits
from gpuwise.prometheus import answers
from gpuwise.prometheus.labels import JobKey, LabelSets

if TYPE_CHECKING:  # the snapshot's module reads with this one: only its type is needed here
    from gpuwise.prometheus.snapshot import Snapshot

OVERLAP_STEPS: Final = 1  # re-read by an incremental read before the previous one's last point (see `fetch`)
K = TypeVar("K")
V = TypeVar("V")


class Splice:
    """How a round's answers over its last few steps join the previous round's points (see `fetch`).

    A series' points over the new window are the previous round's from the window's start up to
    the re-read start (`read`), then the new answer's. Mostly both lie on their query's grid
    (`Grid.times`, which their points share): then it is a slice of the previous values and one
    concatenation, onto the new window's shared times, and a series of zeros before and now
    stays the one shared array of zeros (`answers.zeros`). Any other (a series with gaps, one
    that started late) is cut by its times, and shares what a full read's would.
    """

    def __init__(self, previous: Snapshot, before: answers.Grid, window: answers.Grid, read: answers.Grid) -> None:
        self.previous, self.window, self.read = previous, window, read
        step = window.step_ms
        # A series on its grid before (`before_times`) keeps the values at `kept`.
        self.before_times, self._before_first, self._before_last = before.times, before.first_ms, before.last_ms
        self.kept = slice((window.first_ms - before.first_ms) // step, (read.first_ms - before.first_ms) // step)
        self.before_zeros, self.read_zeros = before.zeros(), read.zeros()
        self.zeros = Points(window.times, window.zeros())  # for every series of zeros throughout
        self._start, self._reread = window.start, read.start

    @classmethod
    def after(cls, previous: Snapshot | None, window: answers.Grid, window_seconds: float) -> Splice | None:
        """How to join this round to `previous`; None when it cannot be: the round reads the whole window."""
        before = previous.grid if previous is not None else None
        if previous is None or before is None or previous.window_seconds != window_seconds:
            return None
        if (before.step_ms, before.count) != (window.step_ms, window.count):
            return None
        reread_ms = before.last_ms - OVERLAP_STEPS * window.step_ms
        if before.last_ms > window.last_ms or reread_ms <= window.first_ms:
            return None  # the clock went back, or the previous round is about as old as the window
        count = (window.last_ms - reread_ms) // window.step_ms + 1
        return cls(previous, before, window, answers.Grid(reread_ms, window.step_ms, count))

    def reached(self, old: Points) -> bool:
        """Whether `old`, a previous round's series, has a point at that round's last step: it was answered."""
        return bool(old.times) and round(old.times[-1] * 1000) == self._before_last

    def join(self, old: Points, new: Points) -> Points:
        """The points of a series in both answers, whatever their times."""
        return self.cut(old, new) or new

    def cut(self, old: Points, new: Points | None = None) -> Points | None:
        """`old`'s points from the window's start to the re-read start, then `new`'s; None if there are none.

        Where each has a point at every step from its first to its last (a series that started,
        or stopped, within the window), that is index arithmetic, as on the grid.
        """
        step, start, reread = self.window.step_ms, self.window.first_ms, self.read.first_ms
        first = self._first(old)
        new_first = self._first(new) if new is not None else None
        if first is None or (new is not None and new_first is None):
            return self._cut_by_times(old, new)
        low = max(0, (start - first) // step)
        high = max(low, min(len(old), (reread - first) // step))
        kept_first, zeros = first + low * step, answers.shared_zeros(old.values)
        values = old.values[low:high]
        if not values:
            return new
        if new is None:
            return Points(self.times(kept_first, len(values)), answers.zeros_of(len(values)) if zeros else values)
        zeros = zeros and answers.shared_zeros(new.values)
        count = len(values) + len(new)
        if kept_first + len(values) * step == new_first:  # no step missing between them
            times = self.times(kept_first, count)
        else:
            times = self.times(kept_first, len(values)) + new.times
        return Points(times, answers.zeros_of(count) if zeros else values + new.values)

    def _first(self, points: Points) -> int | None:
        """The time of the first of `points`, in ms, where they are at every step from it to the last; else None."""
        times = points.times
        if times is self.before_times:
            return self._before_first
        count, step = len(times), self.window.step_ms
        if not count:
            return None
        first = round(times[0] * 1000)
        every_step = round(times[-1] * 1000) - first == (count - 1) * step
        return first if every_step and (first - self.window.first_ms) % step == 0 else None

    def times(self, first_ms: int, count: int) -> array[float]:
        """The shared times of `count` steps from `first_ms`: the window's own when they are the window."""
        window = self.window
        if (first_ms, count) == (window.first_ms, window.count):
            return window.times
        return answers.grid_times(first_ms, window.step_ms, count)

    def _cut_by_times(self, old: Points, new: Points | None) -> Points | None:
        """`cut` for series with steps missing: by their times."""
        low, high = bisect.bisect_left(old.times, self._start), bisect.bisect_left(old.times, self._reread)
        times, values = old.times[low:high], old.values[low:high]
        if new is not None:
            times, values = times + new.times, values + new.values
        return Points(answers.shared(times, self.window.step_ms), values) if values else None

    def series(self, new: dict[JobKey, Points], gone: Mapping[JobKey, Points]) -> dict[JobKey, Points]:
        """`new` with the `gone` series that it no longer has, cut to their points before the re-read."""
        kept = {key: points for key, old in gone.items() if key not in new and (points := self.cut(old))}
        # Sorted as Prometheus sorts its series (by label values), as a full read would be.
        return dict(sorted({**new, **kept}.items())) if kept else new

    def workers(
        self, new: dict[JobKey, dict[int, Points]], gone: Iterable[tuple[JobKey, Mapping[int, Points]]]
    ) -> dict[JobKey, dict[int, Points]]:
        """`new` with the `gone` workers that it no longer has, like `series`."""
        resort = False
        for key, before in gone:
            now = new.get(key, {})
            kept = {worker: points for worker, old in before.items() if worker not in now and (points := self.cut(old))}
            if kept:
                resort = True
                # Prometheus sorts a job's series by the worker label's text: "10" before "2".
                new[key] = dict(sorted({**now, **kept}.items(), key=lambda item: str(item[0])))
        return dict(sorted(new.items())) if resort else new


class Reader:
    """A range query's answer, read into each series' points over the window.

    Without a `Splice` the answer covers the window; with one, it covers the last few steps and
    is joined to the previous round's points. A range answer has a point at a step of the query
    or none, so a series with as many points as the grid has times has one at each: its times
    are the grid's (`Grid.times`, shared), and where every series of a piece of the answer has
    them all, each one's values are a slice of the piece's, parsed in one pass (`Piece.values`).
    """

    def __init__(self, grid: answers.Grid, splice: Splice | None, labels: LabelSets) -> None:
        self.read = grid if splice is None else splice.read
        self.splice = splice
        self.labels = labels
        # `old.times is self._before` only for a previous series that lay on its grid.
        self._before: array[float] | None = splice.before_times if splice is not None else None
        self._zeros = Points(self.read.times, self.read.zeros())  # for every series of zeros throughout

    def _values(self, piece: answers.Piece) -> list[array[float]]:
        """Each series' values."""
        count, every = self.read.count, piece.values()
        if len(every) == count * len(piece.pairs):
            return [every[at : at + count] for at in range(0, len(every), count)]
        ends = list(itertools.accumulate(text.count(b"],[") + 1 for _, text in piece.pairs))
        if ends[-1] != len(every):
            raise answers.MalformedAnswer("not a Prometheus matrix answer: its points are misshapen")
        return [every[start:end] for start, end in zip([0, *ends], ends, strict=False)]

    def _points(self, text: bytes, values: array[float], old: Points | None) -> Points:
        """A series' points from its points text and values, joined to its `old` ones."""
        read, splice, count = self.read, self.splice, len(values)
        at = 0 if count == read.count else read.span(text, count)  # a point at each time from `at`
        if at == 0 and old is not None and splice is not None and old.times is self._before:
            # At every step before, and now from the re-read start on (to its end, or stopped since).
            window = splice.window
            if old.values is splice.before_zeros and values is splice.read_zeros:  # zeros throughout
                return splice.zeros
            # A new array of just the right size (`+=` would allocate an eighth more, to grow it).
            kept = old.values[splice.kept] + values
            return Points(window.times if count == read.count else splice.times(window.first_ms, len(kept)), kept)
        if at is None:
            times = answers.times(text, count, read.step)
        elif count == read.count:
            if values is self._zeros.values and (old is None or splice is None):
                return self._zeros
            times = read.times
        else:
            times = answers.grid_times(read.first_ms + at * read.step_ms, read.step_ms, count)
        new = Points(times, values)
        return new if old is None or splice is None else splice.join(old, new)

    def per_job(self, answer: Iterable[answers.Piece], old: Mapping[JobKey, Points]) -> dict[JobKey, Points]:
        """Per job, the points of its series in a per-job range answer; `old`'s are taken from it (see `fetch`)."""
        previous = take_over(old)
        points, take, found = self._points, previous.pop, {}
        for piece in answer:
            raws, texts = columns(piece.pairs)
            for labels, text, values in zip(self.labels.of(raws), texts, self._values(piece), strict=True):
                found[labels[0]] = points(text, values, take(labels[0], None))
        if self.splice is not None and previous:
            found = self.splice.series(found, previous)  # what is left in `previous` is no longer answered
        previous.clear()
        return found

    def per_worker(
        self, answer: Iterable[answers.Piece], old: Mapping[JobKey, Mapping[int, Points]], *, clocks: bool = False
    ) -> dict[JobKey, dict[int, Points]]:
        """Per job, per worker index, the points of that worker's series; series without a worker index left out.

        `old`'s are taken from it, like `per_job`. `clocks`: the values are clock-event reasons
        masks, kept as their slowdown bits (`slowdowns`).
        """
        previous, points = take_over(old), self._points
        by_job: dict[JobKey, dict[int, Points]] = {}
        taken: list[tuple[JobKey, dict[int, Points]]] = []  # the jobs' previous workers, as they are taken
        job: JobKey | None = None
        workers: dict[int, Points] = {}
        before: dict[int, Points] = {}
        for piece in answer:
            raws, texts = columns(piece.pairs)
            values = list(map(slowdowns, texts)) if clocks else self._values(piece)
            for (key, worker, _), text, found in zip(self.labels.of(raws), texts, values, strict=True):
                if worker is None:
                    continue
                if key is not job:  # a job's series come one after another: look it up once
                    job, before = key, take_over(previous.pop(key, {}))
                    taken.append((key, before))
                    workers = by_job.setdefault(key, {})
                workers[worker] = points(text, found, before.pop(worker, None))
        if self.splice is not None:  # what is left in `taken` and `previous` is no longer answered
            by_job = self.splice.workers(by_job, itertools.chain(taken, previous.items()))
        previous.clear()
        return by_job


def take_over(old: Mapping[K, V]) -> dict[K, V]:
    """`old` itself, to take series from as they are joined (see `fetch`); a copy where it is not a dict."""
    return old if isinstance(old, dict) else dict(old)


def columns(pairs: Sequence[answers.Pair]) -> tuple[Sequence[bytes], Sequence[bytes]]:
    """The first and the second of each pair."""
    if not pairs:
        return (), ()
    first, second = zip(*pairs, strict=True)
    return first, second


def slowdowns(text: bytes) -> array[float]:
    """The slowdown bits at each sample of a points text; for most GPUs nothing to parse or mask (`zeros`).

    A mask takes a handful of values, each repeated over many samples: each distinct one is
    parsed and masked once.
    """
    masked = answers.zeros(text)
    if masked is None:
        texts = answers.texts(text)
        bits = {text: float(slowdown_bits(float(text))) for text in set(texts)}
        masked = array("d", map(bits.__getitem__, texts))
    return masked
