"""Prometheus range-query answers, decoded with a Python object per series rather than per point.

A range query over 10,000 jobs answers with 12 MB of `[timestamp,"value"]` pairs. `json.loads`
builds a list, an int and a str for each of its 610,000 points, and we then convert every str
again: about 0.8 s of operator CPU per query, most of an evaluation cycle (bench/evaluate.py).
A successful answer's shape is fixed by Prometheus' HTTP API, so here only each series' labels go
through `json.loads`; its points stay where they are in the body, read by a regular expression
when a caller asks for them. Any other answer (an error, another result type) is for `json.loads`.

Why a label value cannot fool the byte patterns: inside a JSON string every `"` is escaped as
`\\"`, so the unescaped `{"metric":` that starts a series, and the `,"values":[` that ends its
labels, occur only as structure (a label value is a string, so never followed by `[`). A
series' points end at the first `]]`, which no number or value string contains.
"""

from __future__ import annotations

import functools
import json
import re
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from gpuwise.diagnose.window import Points

SUCCESSFUL_MATRIX: Final = b'{"status":"success","data":{"resultType":"matrix","result":['
_SERIES: Final = b'{"metric":'
_VALUES: Final = b',"values":['
_VALUE: Final = re.compile(rb',"([^"]*)"\]')
_TIME: Final = re.compile(rb'\[([^,\]]+),"')
_MILLISECONDS: Final = re.compile(rb"(\d+)(?:\.(\d{1,3}))?")  # how Prometheus writes a timestamp


def _milliseconds(timestamp: bytes) -> int | None:
    """A timestamp as Prometheus writes it (seconds, at most 3 decimals) in whole milliseconds."""
    match = _MILLISECONDS.fullmatch(timestamp)
    if match is None:
        return None
    seconds, fraction = match.groups()
    return int(seconds) * 1000 + int((fraction or b"").ljust(3, b"0"))


@functools.lru_cache(maxsize=64)  # every series of a query shares the query's grid
def _grid(first_ms: int, step_ms: int, points: int) -> array[float]:
    """`points` times from `first_ms`, `step_ms` apart, as `float(text)` would read them.

    An exact whole number of milliseconds divided by 1000 is correctly rounded, as is parsing
    its decimal text: the same double.
    """
    return array("d", [(first_ms + k * step_ms) / 1000 for k in range(points)])


class MalformedAnswer(ValueError):
    """The body starts like a matrix answer but is not one."""


@dataclass(frozen=True, slots=True)
class RangeSeries:
    """One series of a matrix: its labels, and where its points are in the answer's body."""

    labels: dict[str, str]
    body: bytes  # the whole answer, shared by its series: slicing it would copy it
    start: int  # `[t,"v"],[t,"v"]...` is body[start:end]
    end: int

    def values(self) -> array[float]:
        """The values, unboxed: 8 bytes each rather than a float object and a list slot (32)."""
        return array("d", map(float, _VALUE.findall(self.body, self.start, self.end)))

    def texts(self) -> list[bytes]:
        """The values as Prometheus wrote them, unparsed."""
        return _VALUE.findall(self.body, self.start, self.end)

    def zeros(self) -> array[float] | None:
        """The values when every one is 0, counted rather than parsed; None when any is not.

        Most series of some queries are zero throughout (the clock-event reasons of GPUs that
        are not throttled): two byte counts instead of a float per point, and one array for all
        of them (`_zeros`): never write into it.
        """
        points = self.body.count(b"],[", self.start, self.end) + 1
        return _zeros(points) if self.body.count(b',"0"]', self.start, self.end) == points else None

    def points(self, step_seconds: float) -> Points:
        """(unix time, value) per point, compact, with the times computed rather than parsed where they can be."""
        values = self.values()
        times = self._grid_times(len(values), step_seconds)
        if times is None:
            times = array("d", map(float, _TIME.findall(self.body, self.start, self.end)))
        return Points(times, values)

    def _grid_times(self, count: int, step_seconds: float) -> array[float] | None:
        """The times of `count` points when none is missing between the first and the last; else None.

        A range answer's points lie on the query's grid, `step_seconds` apart: when the first and
        the last are as far apart as the number of points says, every time in between is known.
        """
        step_ms = round(step_seconds * 1000)
        if count == 0 or step_ms != step_seconds * 1000:
            return None
        first = _milliseconds(self.body[self.start + 1 : self.body.find(b",", self.start, self.end)])
        last_start = self.body.rfind(b"[", self.start, self.end) + 1
        last = _milliseconds(self.body[last_start : self.body.find(b",", last_start, self.end)])
        if first is None or last is None or last - first != (count - 1) * step_ms:
            return None
        return _grid(first, step_ms, count)


@functools.lru_cache(maxsize=64)  # a few lengths: the window's sample count, and a few short of it
def _zeros(points: int) -> array[float]:
    return array("d", bytes(8 * points))


def decode(body: bytes) -> list[RangeSeries] | None:
    """The series of a successful matrix answer; None when `body` is any other answer."""
    if not body.startswith(SUCCESSFUL_MATRIX):
        return None
    return list(series_in([body]))


def series_in(chunks: Iterable[bytes]) -> Iterator[RangeSeries]:
    """The series of a successful matrix answer arriving in `chunks`, as each piece completes some.

    The series of a piece share it as their `body`, so a piece lives as long as the series read
    from it, not as long as the whole answer. A piece's series are decoded together, so its
    labels go through one `json.loads`.
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
        complete, at = _complete_series(pending, at)
        yield from complete
        pending, at = pending[at:], 0
    if pending.find(_SERIES) >= 0:
        raise MalformedAnswer("not a Prometheus matrix answer: it ends inside a series")


def _complete_series(body: bytes, at: int) -> tuple[list[RangeSeries], int]:
    """The series that start at or after `at` and end within `body`, and where the rest starts."""
    labels: list[bytes] = []
    spans: list[tuple[int, int]] = []
    while (start := body.find(_SERIES, at)) >= 0:
        labels_end = body.find(_VALUES, start)
        points_end = body.find(b"]]", labels_end + len(_VALUES)) if labels_end >= 0 else -1
        if points_end < 0:
            break  # this series goes on in the next chunk
        labels.append(body[start + len(_SERIES) : labels_end])
        spans.append((labels_end + len(_VALUES), points_end + 1))
        at = points_end + 1
    try:
        # All label sets in one json.loads: a call per series would cost more than the points.
        decoded = json.loads(b"[" + b",".join(labels) + b"]")
    except ValueError as exc:  # the labels are not JSON
        raise MalformedAnswer(f"not a Prometheus matrix answer: {exc}") from exc
    series = [RangeSeries(names, body, start, end) for names, (start, end) in zip(decoded, spans, strict=True)]
    return series, at
