"""The range-answer decoder reads what `json.loads` reads, whatever the label values hold."""

from __future__ import annotations

import json
import math
from array import array
from typing import Any

import pytest

from gpuwise.prometheus import answers

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
    decoded = answers.decode(body)
    assert decoded is not None
    expected = json.loads(body)["data"]["result"]
    assert [s.labels for s in decoded] == [s["metric"] for s in expected]
    for got, want in zip(decoded, expected, strict=True):
        timed = [(float(t), float(v)) for t, v in want["values"]]
        assert repr(list(got.points(15))) == repr(timed)  # repr: NaN equals NaN
        assert repr(list(got.values())) == repr([v for _, v in timed])
    assert math.isinf(decoded[1].values()[1])


def test_all_zero_values_are_counted_not_parsed() -> None:
    decoded = answers.decode(
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
    (only,) = answers.decode(body) or []
    assert list(only.points(15)) == [(1_795_000_000.5, 1.0), (1_795_000_001.25, 2.0)]
    assert answers.decode(answer([])) == []


def test_other_answers_are_left_to_json() -> None:
    error = b'{"status":"error","errorType":"bad_data","error":"parse error"}'
    assert answers.decode(error) is None
    vector = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    assert answers.decode(vector) is None


def test_a_truncated_answer_is_refused() -> None:
    body = answer([series(NASTY[0], ["1", "2"])])
    with pytest.raises(answers.MalformedAnswer, match="not a Prometheus matrix answer"):
        answers.decode(body[: body.index(b'"values"') + 5])


def test_points_are_the_answers_pairs_with_the_grid_computed_or_read() -> None:
    start = 1_795_000_000.125
    on_grid = [[start + 15 * i, v] for i, v in enumerate(["1", "0.5042016806722689", "NaN", "3"])]
    with_gap = [on_grid[0], on_grid[2], on_grid[3]]
    whole_seconds = [[1_795_000_000 + 15 * i, "2"] for i in range(3)]
    body = answer([{"metric": {}, "values": v} for v in (on_grid, with_gap, whole_seconds, on_grid[:1])])
    decoded = answers.decode(body)
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
    whole = answers.decode(body)
    assert whole is not None
    pieces = list(answers.series_in(body[i : i + size] for i in range(0, len(body), size)))
    assert [s.labels for s in pieces] == [s.labels for s in whole]
    assert [repr(list(s.points(15))) for s in pieces] == [repr(list(s.points(15))) for s in whole]
    truncated = body[: body.index(b"+Inf")]
    with pytest.raises(answers.MalformedAnswer, match="ends inside a series"):
        list(answers.series_in(truncated[i : i + size] for i in range(0, len(truncated), size)))


def test_a_label_value_with_a_brace_is_read_all_the_same() -> None:
    labels = [{"namespace": "ml", "trainingjob": "a}b"}, {"namespace": "}{", "trainingjob": '"}],"values":[['}]
    body = answer([series(labels[0], ["1", "2"]), series(labels[1], ["3"])], warnings=["a", "4"])
    pieces = list(answers.matrix_in([body]))
    assert [json.loads(raw) for piece in pieces for raw, _ in piece.pairs] == labels
    # The warnings after the last series (`,"4"]`) are no series' values.
    assert [value for piece in pieces for value in piece.values()] == [1.0, 2.0, 3.0]


def vector_answer(result: list[dict[str, Any]], **extra: Any) -> bytes:
    body = {"status": "success", "data": {"resultType": "vector", "result": result}, **extra}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def test_vector_samples_are_label_sets_as_written_and_value_texts() -> None:
    result: list[dict[str, Any]] = [
        {"metric": labels, "value": [1_795_000_000.5, str(i)]} for i, labels in enumerate(NASTY)
    ]
    result.append({"metric": {"a": "}"}, "value": [1_795_000_000.5, "NaN"]})
    body = vector_answer(result, warnings=['{"metric":{}'])
    samples = answers.vector(body)
    assert samples is not None
    assert [(json.loads(raw), value) for raw, value in samples] == [
        (s["metric"], s["value"][1].encode()) for s in result
    ]
    assert answers.vector(vector_answer([])) == []
    assert answers.vector(answer([])) is None, "a matrix is not a vector"
    for cut in (body[: body.index(b'"NaN"')], body[: body.rindex(b"]}") - 1], body[:-1]):
        with pytest.raises(answers.MalformedAnswer, match="not a Prometheus vector answer"):
            answers.vector(cut)


def test_a_grid_of_multiples_of_the_step() -> None:
    grid = answers.Grid.ending(1_795_486_245.7, 900, 15)
    assert (grid.start, grid.end, grid.step, grid.count) == (1_795_485_345.0, 1_795_486_245.0, 15.0, 61)
    assert grid.times is answers.Grid(grid.first_ms, 15_000, 61).times, "one array for the grid"
    assert answers.Grid.ending(1_795_486_259.999, 900, 15).end == grid.end, "up to a step old"
    assert answers.Grid.ending(1_795_486_245.7, 100, 15).count == 7, "the window rounded down to the grid"
    half = answers.Grid.ending(1_795_486_245.7, 10, 0.5)
    assert half.end == 1_795_486_245.5 and half.first == b'[1795486235.500,"' and half.count == 21


def test_a_series_on_the_grid_from_its_start_or_to_its_end() -> None:
    grid = answers.Grid(1_795_000_000_000, 15_000, 5)

    def text(*indexes: int) -> bytes:
        return b",".join(b'[%d,"1"]' % (1_795_000_000 + 15 * i) for i in indexes)

    assert grid.span(text(0, 1, 2, 3, 4), 5) == 0
    assert grid.span(text(0, 1, 2), 3) == 0 and grid.span(text(2, 3, 4), 3) == 2
    assert grid.span(text(0, 2, 3), 3) is None and grid.span(text(1, 2, 3), 3) is None
    assert answers.times(text(2, 3, 4), 3, 15, grid) == grid.times[2:]
    assert answers.times(text(0, 2, 4), 3, 15, grid) == array("d", [grid.times[0], grid.times[2], grid.times[4]])
