"""`LabelSets`: what a series' label set says, decoded once, for as long as its job is seen."""

from __future__ import annotations

import json

import pytest

from gpuwise.prometheus import answers
from gpuwise.prometheus.labels import LabelSets


def raw(**labels: str) -> bytes:
    return json.dumps(labels, separators=(",", ":")).encode()


def test_what_a_label_set_says() -> None:
    table = LabelSets()
    sets = [
        raw(namespace="ml", trainingjob="bert"),
        raw(namespace="ml", trainingjob="bert", worker="3"),
        raw(modelName="NVIDIA H100 80GB HBM3", namespace="ml", trainingjob="bert"),
        raw(namespace="ml", trainingjob="bert", worker="x"),
        raw(trainingjob="lone"),
    ]
    said = table.of(sets)
    assert said == [
        (("ml", "bert"), None, None),
        (("ml", "bert"), 3, None),
        (("ml", "bert"), None, "NVIDIA H100 80GB HBM3"),
        (("ml", "bert"), None, None),
        (("", "lone"), None, None),
    ]
    assert len({id(key) for key, _, _ in said[:4]}) == 1, "one tuple per job"
    again = table.of([bytes(sets[1]), sets[0]])  # new bytes objects, the same label sets
    assert again == said[1::-1] and again[0] is said[1] and len(table) == len(sets)
    with pytest.raises(answers.MalformedAnswer, match="not a label set"):
        table.of([b'{"namespace":'])


def test_gone_jobs_are_dropped_once_the_table_has_grown_by_a_quarter() -> None:
    table = LabelSets()
    jobs = [("ml", f"job-{i}") for i in range(8)]
    table.of([raw(namespace=ns, trainingjob=job) for ns, job in jobs])
    table.prune(lambda: jobs)
    assert len(table) == 8
    table.of([raw(namespace="ml", trainingjob="new-1"), raw(namespace="ml", trainingjob="new-2")])
    table.prune(lambda: [("ml", "new-1"), ("ml", "new-2")])
    assert len(table) == 10, "grown by a quarter, not more: kept"
    table.of([raw(namespace="ml", trainingjob="new-3")])
    table.prune(lambda: [("ml", "new-1"), ("ml", "new-2"), ("ml", "new-3")])
    assert len(table) == 3
    (key, _, _), *_ = table.of([raw(namespace="ml", trainingjob="job-0")])
    assert len(table) == 4 and key == ("ml", "job-0"), "a job seen again is decoded again"
