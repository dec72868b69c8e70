"""The range-answer decoder reads what `json.loads` reads, whatever the label values hold."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from gpuwise.diagnose import matrix

NASTY = [
    {"namespace": "ml", "trainingjob": "bert"},
    {"namespace": 'a{"metric":{"x":"y"},"values":[[1,"2"]]}', "trainingjob": "]]"},
    {"namespace": 'back\\slash "quoted" ,"values":[', "trainingjob": "ünïcødé ✓"},
    {"namespace": "ml", "trainingjob": "gpt", "worker": "3"},
]


def answer(result: list[dict[str, Any]], **extra: Any) -> bytes:
    """A body shaped as Prometheus writes it: compact JSON, status first."""
    body = {"status": "success", "data": {"resultType": "matrix", "result": result}, **extra}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def series(labels: dict[str, str], values: list[str]) -> dict[str, Any]:
    return {"metric": labels, "values": [[1_795_000_000 + 15 * i, v] for i, v in enumerate(values)]}


def test_decodes_labels_and_points_as_json_does() -> None:
    values = [["30", "31.5", "1e-05"], ["NaN", "+Inf", "-Inf"], ["0.25"], ["2", "3"]]
    result = [series(labels, v) for labels, v in zip(NASTY, values, strict=True)]
    body = answer(result, warnings=['x"]],"1"]', "second"])
    decoded = matrix.decode(body)
    assert decoded is not None
    expected = json.loads(body)["data"]["result"]
    assert [s.labels for s in decoded] == [s["metric"] for s in expected]
    for got, want in zip(decoded, expected, strict=True):
        timed = [(float(t), float(v)) for t, v in want["values"]]
        assert repr(list(got.points(15))) == repr(timed)  # repr: NaN equals NaN
        assert repr(list(got.values())) == repr([v for _, v in timed])
    assert math.isinf(decoded[1].values()[1])


def test_all_zero_values_are_counted_not_parsed() -> None:
    decoded = matrix.decode(
        answer(
            [
                series({"a": '],[x,"0"]'}, ["0"] * 5),
                series({}, ["0", "0.0", "0"]),
                series({}, ["0"]),
                series({}, ["10"]),
            ]
        )
    )
    assert decoded is not None
    zeros, spelled, one, busy = (s.zeros() for s in decoded)
    assert zeros is not None and list(zeros) == [0.0] * 5 == list(decoded[0].values())
    assert spelled is None, "anything but Prometheus' own '0' is parsed"
    assert one is not None and list(one) == [0.0]
    assert busy is None


def test_fractional_timestamps_and_an_empty_result() -> None:
    body = answer([{"metric": {}, "values": [[1_795_000_000.5, "1"], [1_795_000_001.25, "2"]]}])
    (only,) = matrix.decode(body) or []
    assert list(only.points(15)) == [(1_795_000_000.5, 1.0), (1_795_000_001.25, 2.0)]
    assert matrix.decode(answer([])) == []


def test_other_answers_are_left_to_json() -> None:
    error = b'{"status":"error","errorType":"bad_data","error":"parse error"}'
    assert matrix.decode(error) is None
    vector = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    assert matrix.decode(vector) is None


def test_a_truncated_answer_is_refused() -> None:
    body = answer([series(NASTY[0], ["1", "2"])])
    with pytest.raises(matrix.MalformedAnswer, match="not a Prometheus matrix answer"):
        matrix.decode(body[: body.index(b'"values"') + 5])


def test_points_are_the_answers_pairs_with_the_grid_computed_or_read() -> None:
    start = 1_795_000_000.125
    on_grid = [[start + 15 * i, v] for i, v in enumerate(["1", "0.5042016806722689", "NaN", "3"])]
    with_gap = [on_grid[0], on_grid[2], on_grid[3]]
    whole_seconds = [[1_795_000_000 + 15 * i, "2"] for i in range(3)]
    body = answer([{"metric": {}, "values": v} for v in (on_grid, with_gap, whole_seconds, on_grid[:1])])
    decoded = matrix.decode(body)
    assert decoded is not None
    expected = json.loads(body)["data"]["result"]
    for got, want in zip(decoded, expected, strict=True):
        timed = [(float(t), float(v)) for t, v in want["values"]]
        for step in (15.0, 7.5, 0.0001):  # the query's step, another, one finer than a millisecond
            points = got.points(step)
            assert repr(list(points)) == repr(timed) == repr(points)
            assert len(points) == len(timed) and points[-1] == timed[-1]
            assert repr(points[1:]) == repr(timed[1:])
    assert decoded[0].points(15).times is decoded[0].points(15.0).times, "one grid for a query's series"
    assert decoded[1].texts() == [b"1", b"NaN", b"3"]


@pytest.mark.parametrize("size", [1, 2, 7, 64, 1000])
def test_an_answer_read_in_pieces_decodes_as_a_whole(size: int) -> None:
    values = [["30", "31.5", "1e-05"], ["NaN", "+Inf", "-Inf"], ["0.25"], ["2", "3"]]
    body = answer([series(labels, v) for labels, v in zip(NASTY, values, strict=True)], warnings=['{"metric":]]'])
    whole = matrix.decode(body)
    assert whole is not None
    pieces = list(matrix.series_in(body[i : i + size] for i in range(0, len(body), size)))
    assert [s.labels for s in pieces] == [s.labels for s in whole]
    assert [repr(list(s.points(15))) for s in pieces] == [repr(list(s.points(15))) for s in whole]
    truncated = body[: body.index(b"+Inf")]
    with pytest.raises(matrix.MalformedAnswer, match="ends inside a series"):
        list(matrix.series_in(truncated[i : i + size] for i in range(0, len(truncated), size)))
