"""`parse_spec`: a job's spec is validated again only when it is no longer equal to the last one."""

from __future__ import annotations

import json
from typing import Any

from gpuwise.operator.reconcile import forget_spec, parse_spec


def body(num_nodes: Any = 1, *, name: str = "train", namespace: str = "ml") -> dict[str, Any]:
    trainer = {"image": "x", "numNodes": num_nodes}
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"trainer": trainer}}


def test_an_equal_spec_of_the_same_job_is_not_validated_again() -> None:
    job = body(namespace="same")
    first, _ = parse_spec(job)
    again, _ = parse_spec(dict(job))  # a shallow copy shares the spec object
    from_a_watch_event, _ = parse_spec(json.loads(json.dumps(job)))  # an equal spec, a new object
    assert first is not None and again is first and from_a_watch_event is first


def test_a_changed_spec_is_validated_again() -> None:
    valid, _ = parse_spec(body(namespace="changed"))
    spec, problem = parse_spec(body(num_nodes=0, namespace="changed"))
    assert valid is not None and spec is None
    assert problem is not None and "spec.trainer.numNodes" in problem.message
    assert parse_spec(body(namespace="changed"))[0] == valid  # and back


def test_jobs_with_equal_specs_each_have_their_own() -> None:
    one, _ = parse_spec(body(namespace="a"))
    other, _ = parse_spec(body(namespace="b"))
    assert one is not None and other is not one and other == one


def test_a_forgotten_job_is_validated_again() -> None:
    first, _ = parse_spec(body(namespace="gone"))
    forget_spec("gone", "train")
    again, _ = parse_spec(body(namespace="gone"))
    assert first is not None and again is not first and again == first


def test_the_name_is_part_of_what_is_validated() -> None:
    spec, problem = parse_spec(body(name="Not_A_Label"))
    assert spec is None and problem is not None and "metadata.name" in problem.message
