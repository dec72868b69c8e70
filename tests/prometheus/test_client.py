"""`Prometheus.range()` reads an answer as it arrives: what it makes of answers that are not a range of series."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from gpuwise.prometheus.client import CHUNK_BYTES, Prometheus, PrometheusError

MATRIX = (
    b'{"status":"success","data":{"resultType":"matrix","result":['
    b'{"metric":{"namespace":"ml","trainingjob":"bert"},"values":[[1795000000,"1"],[1795000015,"2"]]},'
    b'{"metric":{"namespace":"ml","trainingjob":"gpt"},"values":[[1795000000,"3"]]}]}}'
)


class Answering(Prometheus):
    """A Prometheus that answers `body`, `size` bytes at a time."""

    body: bytes = b""
    size: int = CHUNK_BYTES

    def _chunks(self, path: str, params: Mapping[str, str]) -> Iterator[bytes]:
        for at in range(0, len(self.body), self.size):
            yield self.body[at : at + self.size]


def answering(body: bytes, size: int) -> Answering:
    source = Answering("http://prometheus")
    object.__setattr__(source, "body", body)
    object.__setattr__(source, "size", size)
    return source


@pytest.mark.parametrize("size", [1, 5, 64, CHUNK_BYTES])
def test_series_arrive_whatever_the_pieces(size: int) -> None:
    series = list(answering(MATRIX, size).range("up", 0, 15, 15))
    assert [(s.labels["trainingjob"], list(s.points(15))) for s in series] == [
        ("bert", [(1795000000.0, 1.0), (1795000015.0, 2.0)]),
        ("gpt", [(1795000000.0, 3.0)]),
    ]


@pytest.mark.parametrize("size", [1, 64])
def test_an_error_says_what_prometheus_said(size: int) -> None:
    error = b'{"status":"error","errorType":"bad_data","error":"parse error at char 3"}'
    with pytest.raises(PrometheusError, match="parse error at char 3"):
        list(answering(error, size).range("up{", 0, 15, 15))


@pytest.mark.parametrize("size", [1, 64])
def test_another_kind_of_answer_or_a_cut_one_is_refused(size: int) -> None:
    vector = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    with pytest.raises(PrometheusError, match="not a range of series"):
        list(answering(vector, size).range("up", 0, 15, 15))
    with pytest.raises(PrometheusError, match="not a Prometheus matrix answer"):
        list(answering(MATRIX[: MATRIX.index(b'"2"')], size).range("up", 0, 15, 15))


def test_instant_answers_that_are_not_a_vector_are_refused() -> None:
    vector = b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"b"},"value":[1,"2"]}]}}'
    assert answering(vector, CHUNK_BYTES).vector("up", 1) == [(b'{"a":"b"}', b"2")]
    error = b'{"status":"error","errorType":"bad_data","error":"parse error at char 3"}'
    with pytest.raises(PrometheusError, match="parse error at char 3"):
        answering(error, CHUNK_BYTES).vector("up{", 1)
    with pytest.raises(PrometheusError, match="not a vector"):
        answering(MATRIX, CHUNK_BYTES).vector("up", 1)
    with pytest.raises(PrometheusError, match="not a Prometheus vector answer"):
        answering(vector[:-3], CHUNK_BYTES).vector("up", 1)
