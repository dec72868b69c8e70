"""Prometheus range-query answers, decoded with a Python object per series rather than per point.

A range query over 10,000 jobs answers with 12 MB of `[timestamp,"value"]` pairs. `json.loads`
builds a list, an int and a str for each of its 610,000 points, and we then convert every str
again: about 0.8 s of operator CPU per query, most of an evaluation cycle (bench/evaluate.py).
A successful answer's shape is fixed by Prometheus' HTTP API, so here only each series' labels go
through `json.loads`; its points stay one `bytes` slice, read by a regular expression when a
caller asks for them. Any other answer (an error, another result type) is for `json.loads`.

Why a label value cannot fool the byte patterns: inside a JSON string every `"` is escaped as
`\\"`, so the unescaped `{"metric":` that starts a series, and the `,"values":[` that ends its
labels, occur only as structure (a label value is a string, so never followed by `[`). A
series' points end at the first `]]`, which no number or value string contains.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Final

SUCCESSFUL_MATRIX: Final = b'{"status":"success","data":{"resultType":"matrix","result":['
_SERIES: Final = b'{"metric":'
_VALUES: Final = b',"values":['
_POINT: Final = re.compile(rb'\[([^,\]]+),"([^"]*)"\]')
_VALUE: Final = re.compile(rb',"([^"]*)"\]')


class MalformedAnswer(ValueError):
    """The body starts like a matrix answer but is not one."""


@dataclass(frozen=True, slots=True)
class RangeSeries:
    """One series of a matrix: its labels, and its points as Prometheus wrote them."""

    labels: dict[str, str]
    points: bytes  # `[t,"v"],[t,"v"]...`

    def values(self) -> list[float]:
        return list(map(float, _VALUE.findall(self.points)))

    def timed(self) -> list[tuple[float, float]]:
        """(unix time, value) per point."""
        return [(float(t), float(v)) for t, v in _POINT.findall(self.points)]


def decode(body: bytes) -> list[RangeSeries] | None:
    """The series of a successful matrix answer; None when `body` is any other answer."""
    if not body.startswith(SUCCESSFUL_MATRIX):
        return None
    labels, points = [], []
    try:
        for chunk in body[len(SUCCESSFUL_MATRIX) :].split(_SERIES)[1:]:
            labels_end = chunk.index(_VALUES)
            points_start = labels_end + len(_VALUES)
            labels.append(chunk[:labels_end])
            points.append(chunk[points_start : chunk.index(b"]]", points_start) + 1])
        # All label sets in one json.loads: a call per series would cost more than the points.
        decoded = json.loads(b"[" + b",".join(labels) + b"]")
    except ValueError as exc:  # index() found no marker, or the labels are not JSON
        raise MalformedAnswer(f"not a Prometheus matrix answer: {exc}") from exc
    return [RangeSeries(names, raw) for names, raw in zip(decoded, points, strict=True)]
