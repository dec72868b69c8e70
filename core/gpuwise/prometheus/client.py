"""Prometheus' HTTP query API, as the batched read asks it: answers decoded as they arrive.

A range answer at 10,000 jobs is tens of megabytes; it is read `CHUNK_BYTES` at a time and cut
into series as it arrives (`gpuwise.prometheus.answers`), never held whole.
"""

from __future__ import annotations

import itertools
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuwise.prometheus import answers

CHUNK_BYTES: Final = 1 << 18  # read from an answer at a time


class PrometheusError(RuntimeError):
    """Prometheus could not answer; the message says which query and why."""


@dataclass(frozen=True)
class Prometheus:
    url: str
    timeout: float = 10.0

    def _chunks(self, path: str, params: Mapping[str, str]) -> Iterator[bytes]:
        """The answer's body as it arrives, `CHUNK_BYTES` at a time: the one request every query makes."""
        address = f"{self.url.rstrip('/')}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(address, timeout=self.timeout) as response:
                while chunk := response.read(CHUNK_BYTES):
                    yield chunk
        except (urllib.error.URLError, OSError) as exc:
            raise PrometheusError(f"{self.url}: {params.get('query')!r} failed: {exc}") from exc

    def _get(self, path: str, params: Mapping[str, str]) -> bytes:
        return b"".join(self._chunks(path, params))

    def _result(self, body: bytes, query: str) -> Any:
        try:
            answer = json.loads(body)
        except ValueError as exc:
            raise PrometheusError(f"{self.url}: {query!r} failed: {exc}") from exc
        if answer.get("status") != "success":
            raise PrometheusError(f"{self.url}: {query!r}: {answer.get('error', answer)}")
        return answer["data"]["result"]

    def instant(self, query: str, at: float) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._result(
            self._get("/api/v1/query", {"query": query, "time": f"{at:.3f}"}), query
        )
        return result

    def vector(self, query: str, at: float) -> list[answers.Pair]:
        """An instant query's samples as (label set as written, value text): see `gpuwise.prometheus.answers`."""
        body = self._get("/api/v1/query", {"query": query, "time": f"{at:.3f}"})
        try:
            samples = answers.vector(body)
        except answers.MalformedAnswer as exc:
            raise PrometheusError(f"{self.url}: {query!r}: {exc}") from exc
        if samples is None:
            self._result(body, query)  # raises with Prometheus' own error
            raise PrometheusError(f"{self.url}: {query!r}: the answer is not a vector of samples")
        return samples

    def range(self, query: str, start: float, end: float, step: float) -> Iterator[answers.RangeSeries]:
        """The series of a range query, decoded as the answer arrives (see `gpuwise.prometheus.answers`)."""
        for piece in self.range_texts(query, start, end, step):
            for raw, text in piece.pairs:
                yield answers.RangeSeries(raw, text)

    def range_texts(self, query: str, start: float, end: float, step: float) -> Iterator[answers.Piece]:
        """A range query's series as (label set as written, points text), a `answers.Piece` at a time.

        A piece is freed once its series are cut from it: at 10,000 jobs of 4 workers an answer
        is up to 66 MB, which need never be in memory whole.
        """
        params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        chunks = self._chunks("/api/v1/query_range", params)
        head = b""
        for chunk in chunks:
            head += chunk
            if len(head) >= len(answers.SUCCESSFUL_MATRIX):
                break
        if not head.startswith(answers.SUCCESSFUL_MATRIX):
            self._result(head + b"".join(chunks), query)  # raises with Prometheus' own error
            raise PrometheusError(f"{self.url}: {query!r}: the answer is not a range of series")
        try:
            yield from answers.matrix_in(itertools.chain([head], chunks))
        except answers.MalformedAnswer as exc:
            raise PrometheusError(f"{self.url}: {query!r}: {exc}") from exc
