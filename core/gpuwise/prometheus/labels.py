"""What a series' label set says, decoded once per label set rather than once per series.

Every answer of the batched read (`gpuwise.prometheus.batched`) spells every job's labels again;
`LabelSets` turns the bytes Prometheus wrote into a job key, a worker index and a GPU model, and
keeps them from one round to the next.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence

from gpuwise.prometheus import answers

JobKey = tuple[str, str]  # (namespace, trainingjob)


def job_key(labels: Mapping[str, str]) -> JobKey:
    return labels.get("namespace", ""), labels.get("trainingjob", "")


# What a series' label set says, decoded: its job, its worker index (None where it has none that
# is a whole number) and its GPU model (the gpu_model fact's only label of its own).
Labels = tuple[JobKey, int | None, str | None]


class LabelSets:
    """What each series' label set says, decoded once per label set rather than once per series.

    Every query aggregates `by (namespace, trainingjob)` or by those and one more label, and
    Prometheus writes a given label set the same way every time (names sorted, one JSON
    encoder), so the label set's bytes as written are a key, looked up here (`of`); only those
    not seen before are decoded. At 10,000 jobs of 4 workers a round reads 250,000 series but
    60,000 label sets, all seen before from the second round on: `json.loads` of each series'
    labels was 0.5 s of CPU a round. One table goes from round to round (`Snapshot.label_sets`).

    Bounded: once it has grown by a quarter since it was last pruned, the label sets of jobs that
    the round did not see are dropped (`prune`), so it holds at most 5/4 of what a round sees
    (some 15 MB at 10,000 jobs). Pruning every round would cost a set of every job and a new
    table, 50 ms, each round. Each job gets one (namespace, trainingjob) tuple, whichever answer
    spells it and in whichever round it was decoded (19 tuples and 38 strings per job where one
    of each does, some 30 MB at 10,000 jobs). Dict operations are atomic, so the fetching
    threads share it.
    """

    def __init__(self) -> None:
        self._labels: dict[bytes, Labels] = {}
        self._keys: dict[JobKey, JobKey] = {}
        self._pruned_size = 0

    def __len__(self) -> int:
        return len(self._labels)

    def of(self, raws: Sequence[bytes]) -> list[Labels]:
        """What each of `raws` says, in order."""
        said: list[Labels | None] = list(map(self._labels.get, raws))
        if None in said:
            said = [labels or self._learn(raw) for raw, labels in zip(raws, said, strict=True)]
        return said  # type: ignore[return-value]  # no None left

    def _learn(self, raw: bytes) -> Labels:
        try:
            decoded: dict[str, str] = json.loads(raw)
        except ValueError as exc:
            raise answers.MalformedAnswer(f"not a label set: {raw[:200]!r}") from exc
        key = job_key(decoded)
        worker = decoded.get("worker", "")
        labels = (
            self._keys.setdefault(key, key),
            int(worker) if worker.isdecimal() else None,
            decoded.get("modelName"),
        )
        return self._labels.setdefault(raw, labels)

    def prune(self, jobs: Callable[[], Collection[JobKey]]) -> None:
        """Drop the label sets of jobs not in `jobs()`, the round's, once the table has grown by a quarter."""
        if len(self._labels) <= self._pruned_size * 5 // 4:
            return
        live = set(jobs())
        self._labels = {raw: labels for raw, labels in self._labels.items() if labels[0] in live}
        self._keys = {key: key for key in self._keys if key in live}
        self._pruned_size = len(self._labels)
