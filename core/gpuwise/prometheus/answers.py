"""Prometheus query answers, decoded with a few Python objects per series rather than per point.

A range query over 10,000 jobs answers with 12 MB of `[timestamp,"value"]` pairs. `json.loads`
builds a list, an int and a str for each of its 610,000 points, and we then convert every str
again: about 0.8 s of operator CPU per query, most of an evaluation cycle (bench/evaluate.py).
A successful answer's shape is fixed by Prometheus' HTTP API, so here a series is two byte
strings cut from the body by one regular expression: its label set as Prometheus wrote it (the
caller decodes each distinct one once, see `gpuwise.prometheus.batched`) and the text of its
points, read when a caller asks for them. Any other answer (an error, another result type) is for
`json.loads`.

Why a label value cannot fool the byte patterns: inside a JSON string every `"` is escaped as
`\\"`, so the unescaped `{"metric":` that starts a series, and the `},"values":[` that ends its
labels, occur only as structure (a label value is a string, so never followed by `[`). A
series' points end at the first `]]}`, which no number or value string contains; they hold no
`}` at all. A label value may hold a `}`: the fast pattern assumes none does, every answer's
count of series starts (`{"metric":`) checks that it found them all, and where it did not, a
pattern that skips a `}` inside a string reads that part again.
"""

from __future__ import annotations

import functools
import json
import math
import re
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final, NamedTuple

from gpuwise.diagnose.window import Points

SUCCESSFUL_MATRIX: Final = b'{"status":"success","data":{"resultType":"matrix","result":['
SUCCESSFUL_VECTOR: Final = b'{"status":"success","data":{"resultType":"vector","result":['
_SERIES: Final = b'{"metric":'
# (label set, points): the labels up to their first "}", then "values" (or "value") and the points.
_MATRIX_FAST: Final = re.compile(rb'\{"metric":(\{[^}]*\}),"values":\[([^}]*)\]\}')
_MATRIX_ANY: Final = re.compile(rb'\{"metric":(\{.*?\}),"values":\[([^}]*)\]\}', re.DOTALL)
_VECTOR_FAST: Final = re.compile(rb'\{"metric":(\{[^}]*\}),"value":\[[^,\]]*,"([^"]*)"\]\}')
_VECTOR_ANY: Final = re.compile(rb'\{"metric":(\{.*?\}),"value":\[[^,\]]*,"([^"]*)"\]\}', re.DOTALL)
_VALUE: Final = re.compile(rb',"([^"]*)"\]')
_TIME: Final = re.compile(rb'\[([^,\]]+),"')
_MILLISECONDS: Final = re.compile(rb"(\d+)(?:\.(\d{1,3}))?")  # how Prometheus writes a timestamp

Pair = tuple[bytes, bytes]  # (label set as written, points text or value text)


class _Shape(NamedTuple):
    fast: re.Pattern[bytes]  # for label sets without a "}"
    careful: re.Pattern[bytes]
    kind: str


_MATRIX: Final = _Shape(_MATRIX_FAST, _MATRIX_ANY, "matrix")
_VECTOR: Final = _Shape(_VECTOR_FAST, _VECTOR_ANY, "vector")


def _milliseconds(timestamp: bytes) -> int | None:
    """A timestamp as Prometheus writes it (seconds, at most 3 decimals) in whole milliseconds."""
    match = _MILLISECONDS.fullmatch(timestamp)
    if match is None:
        return None
    seconds, fraction = match.groups()
    return int(seconds) * 1000 + int((fraction or b"").ljust(3, b"0"))


def timestamp_text(ms: int) -> bytes:
    """A time as Prometheus writes it in an answer: whole seconds, then 3 decimals if any are not 0."""
    seconds, fraction = divmod(ms, 1000)
    return b"%d.%03d" % (seconds, fraction) if fraction else b"%d" % seconds


@functools.lru_cache(maxsize=64)  # every series of a query shares the query's grid
def grid_times(first_ms: int, step_ms: int, points: int) -> array[float]:
    """The shared times (never write into them) of `points` steps from `first_ms`, `step_ms` apart,
    as `float(text)` would read them.

    An exact whole number of milliseconds divided by 1000 is correctly rounded, as is parsing
    its decimal text: the same double.
    """
    return array("d", [(first_ms + k * step_ms) / 1000 for k in range(points)])


@functools.lru_cache(maxsize=64)  # a few lengths: the window's sample count, and a few short of it
def zeros_of(points: int) -> array[float]:
    """The shared array of `points` zeros: never write into it."""
    return array("d", bytes(8 * points))


class Grid:
    """The times a range query is evaluated at: `count` points `step_ms` apart from `first_ms`.

    `times` is one array for every series that has a point at each of them (never write into
    it); `starts[k]` is how a point at the k-th time starts in the answer (`first`, `last`).
    """

    __slots__ = ("count", "first", "first_ms", "last", "starts", "step_ms", "times")

    def __init__(self, first_ms: int, step_ms: int, count: int) -> None:
        self.first_ms, self.step_ms, self.count = first_ms, step_ms, count
        self.times = grid_times(first_ms, step_ms, count)
        self.starts = [b"[" + timestamp_text(first_ms + k * step_ms) + b',"' for k in range(count)]
        self.first, self.last = self.starts[0], self.starts[-1]

    @classmethod
    def ending(cls, now: float, window_seconds: float, step_seconds: float) -> Grid:
        """The window before `now` on the multiples of the step, so that consecutive rounds' grids coincide.

        The last point is the latest multiple of the step at or before `now`, so up to one step
        old. The step is taken in whole milliseconds, Prometheus' resolution.
        """
        step_ms = max(1, round(step_seconds * 1000))
        last_ms = math.floor(now * 1000) // step_ms * step_ms
        count = int(window_seconds * 1000) // step_ms + 1
        return cls(last_ms - (count - 1) * step_ms, step_ms, count)

    def span(self, text: bytes, count: int) -> int | None:
        """Where the `count` points of a series' points text start on the grid, when they are at every time from there.

        A range answer has a point at a time of its query's grid or none, so a series whose first
        and last points are `count` times apart has one at each time between. Checked for a
        series from the grid's first time, or up to its last, with two byte comparisons; None
        for any other (it may have a point at every time too).
        """
        if 0 < count <= self.count:
            last_at = text.rfind(b"[")
            if text.startswith(self.first):
                return 0 if text.startswith(self.starts[count - 1], last_at) else None
            skipped = self.count - count
            if text.startswith(self.last, last_at) and text.startswith(self.starts[skipped]):
                return skipped
        return None

    @property
    def last_ms(self) -> int:
        return self.first_ms + (self.count - 1) * self.step_ms

    @property
    def start(self) -> float:
        return self.first_ms / 1000

    @property
    def end(self) -> float:
        return self.last_ms / 1000

    @property
    def step(self) -> float:
        return self.step_ms / 1000

    def zeros(self) -> array[float]:
        return zeros_of(self.count)

    def __repr__(self) -> str:
        return f"Grid({self.first_ms}, {self.step_ms}, {self.count})"


class MalformedAnswer(ValueError):
    """The body starts like a matrix or vector answer but is not one."""


def values(text: bytes) -> array[float]:
    """The values of a series' points text, unboxed: 8 bytes each rather than a float object and a list slot (32)."""
    return array("d", map(float, _VALUE.findall(text)))


def texts(text: bytes) -> list[bytes]:
    """The values of a series' points text as Prometheus wrote them, unparsed."""
    return _VALUE.findall(text)


def zeros(text: bytes) -> array[float] | None:
    """The values when every one is 0, counted rather than parsed; None when any is not.

    Most series of some queries are zero throughout (the clock-event reasons of GPUs that
    are not throttled): two byte counts instead of a float per point, and one array for all
    of them (`zeros_of`): never write into it.
    """
    points = text.count(b"],[") + 1
    return zeros_of(points) if text.count(b',"0"]') == points else None


def points(text: bytes, step_seconds: float, grid: Grid | None = None) -> Points:
    """(unix time, value) per point, compact, with the times computed rather than parsed where they can be."""
    found = values(text)
    return Points(times(text, len(found), step_seconds, grid), found)


def times(text: bytes, count: int, step_seconds: float, grid: Grid | None = None) -> array[float]:
    """The times of a series' `count` points, from its points text.

    On the query's `grid` where `Grid.span` finds them there; else the times of its own first to
    last point where none is missing between (`grid_times`, shared too), or else its times as written.
    """
    at = grid.span(text, count) if grid is not None else None
    if grid is not None and at is not None:
        return grid.times if count == grid.count else grid_times(grid.first_ms + at * grid.step_ms, grid.step_ms, count)
    computed = _evenly_spaced_times(text, count, step_seconds)
    return computed if computed is not None else array("d", map(float, _TIME.findall(text)))


def shared(times: array[float], step_ms: int) -> array[float]:
    """`times`, or the equal shared array (`grid_times`) when they are `step_ms` apart from first to last."""
    count = len(times)
    if count == 0:
        return times
    first, last = round(times[0] * 1000), round(times[-1] * 1000)
    return grid_times(first, step_ms, count) if last - first == (count - 1) * step_ms else times


def shared_zeros(values: array[float]) -> bool:
    """Whether `values` is the shared array of zeros of its length (`zeros`)."""
    return values is zeros_of(len(values))


def _evenly_spaced_times(text: bytes, count: int, step_seconds: float) -> array[float] | None:
    """The times of `count` points when none is missing between the first and the last; else None.

    A range answer's points lie on the query's grid, `step_seconds` apart: when the first and
    the last are as far apart as the number of points says, every time in between is known.
    """
    step_ms = round(step_seconds * 1000)
    if count == 0 or step_ms != step_seconds * 1000:
        return None
    first = _milliseconds(text[1 : text.find(b",")])
    last_start = text.rfind(b"[") + 1
    last = _milliseconds(text[last_start : text.find(b",", last_start)])
    if first is None or last is None or last - first != (count - 1) * step_ms:
        return None
    return grid_times(first, step_ms, count)


@dataclass(frozen=True, slots=True)
class RangeSeries:
    """One series of a matrix: its label set as Prometheus wrote it, and the text of its points."""

    raw_labels: bytes  # {"name":"value",...}
    text: bytes  # [t,"v"],[t,"v"]...

    @property
    def labels(self) -> dict[str, str]:
        labels: dict[str, str] = json.loads(self.raw_labels)
        return labels

    def values(self) -> array[float]:
        return values(self.text)

    def texts(self) -> list[bytes]:
        return texts(self.text)

    def zeros(self) -> array[float] | None:
        return zeros(self.text)

    def points(self, step_seconds: float, grid: Grid | None = None) -> Points:
        return points(self.text, step_seconds, grid)


def decode(body: bytes) -> list[RangeSeries] | None:
    """The series of a successful matrix answer; None when `body` is any other answer."""
    if not body.startswith(SUCCESSFUL_MATRIX):
        return None
    return list(series_in([body]))


def series_in(chunks: Iterable[bytes]) -> Iterator[RangeSeries]:
    """The series of a successful matrix answer arriving in `chunks`, as each piece completes some."""
    for piece in matrix_in(chunks):
        for raw, text in piece.pairs:
            yield RangeSeries(raw, text)


class Piece(NamedTuple):
    """The whole series in a piece of a matrix answer: body[start:end]."""

    pairs: list[Pair]  # (label set, points text) of each
    body: bytes
    start: int
    end: int

    def values(self) -> array[float]:
        """The values of all its series, one after another: one pass over the piece rather than one per series."""
        return array("d", map(float, _VALUE.findall(self.body, self.start, self.end)))


def matrix_in(chunks: Iterable[bytes]) -> Iterator[Piece]:
    """The series of a successful matrix answer arriving in `chunks`, a `Piece` at a time.

    A piece holds the series that end in what arrived; it is freed once they are cut from it.
    The last series a piece starts may go on in the next, so it waits for it.
    """
    pending, at = b"", -1
    for chunk in chunks:
        pending += chunk
        if at < 0:  # looking for the first series, past the answer's opening
            if len(pending) < len(SUCCESSFUL_MATRIX):
                continue
            if not pending.startswith(SUCCESSFUL_MATRIX):
                raise MalformedAnswer("not a Prometheus matrix answer")
            at = len(SUCCESSFUL_MATRIX)
        last = pending.rfind(_SERIES, at)
        if last > at:
            yield Piece(_pairs(_MATRIX, pending, at, last), pending, at, last)
            pending, at = pending[last:], 0
    if at < 0:
        raise MalformedAnswer("not a Prometheus matrix answer")
    last = pending.find(_SERIES, at)
    if last >= 0:  # the last series, and the answer's end (whose warnings are no series' values)
        match = _MATRIX.careful.match(pending, pending.rfind(_SERIES, at))
        if match is None:
            raise MalformedAnswer("not a Prometheus matrix answer: it ends inside a series")
        yield Piece(_pairs(_MATRIX, pending, at, match.end()), pending, at, match.end())


def _pairs(shape: _Shape, body: bytes, at: int, end: int) -> list[Pair]:
    """Every series in body[at:end], which holds whole series only; `MalformedAnswer` where one is not whole."""
    expected = body.count(_SERIES, at, end)
    found: list[Pair] = shape.fast.findall(body, at, end)
    if len(found) != expected:  # a label value holds a "}", or the answer is not what it seems
        found = shape.careful.findall(body, at, end)
        if len(found) != expected:
            raise MalformedAnswer(f"not a Prometheus {shape.kind} answer: a series is cut or misshapen")
    return found


def vector(body: bytes) -> list[Pair] | None:
    """(label set, value text) of each sample of a successful vector answer; None when `body` is any other answer."""
    if not body.startswith(SUCCESSFUL_VECTOR):
        return None
    found = _pairs(_VECTOR, body, len(SUCCESSFUL_VECTOR), len(body))
    last = body.rfind(_SERIES)
    match = _VECTOR.careful.match(body, last) if last >= 0 else None
    end = match.end() if match is not None else len(SUCCESSFUL_VECTOR)
    try:  # the result list closes after its last sample, and the answer after it
        json.loads(b'{"data":{"result":[' + body[end:])
    except ValueError as exc:
        raise MalformedAnswer(f"not a Prometheus vector answer: {exc}") from exc
    return found
