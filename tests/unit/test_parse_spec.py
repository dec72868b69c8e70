"""`parse_spec`: validated once per spec object inside one evaluation, every time outside it."""

from __future__ import annotations

from typing import Any

from gpuwise.operator.reconcile import parse_spec, specs_remembered


def body(num_nodes: Any = 1) -> dict[str, Any]:
    trainer = {"image": "x", "numNodes": num_nodes}
    return {"metadata": {"name": "train", "namespace": "ml"}, "spec": {"trainer": trainer}}


def test_inside_one_evaluation_the_same_spec_object_is_validated_once() -> None:
    job = body()
    with specs_remembered():
        first, _ = parse_spec(job)
        again, _ = parse_spec(dict(job))  # a shallow copy shares the spec object
        other, _ = parse_spec(body())  # an equal spec, but another object: validated on its own
    assert first is not None and again is first
    assert other is not None and other is not first and other == first


def test_a_spec_replaced_inside_an_evaluation_is_validated_again() -> None:
    job = body()
    with specs_remembered():
        valid, _ = parse_spec(job)
        job["spec"] = body(num_nodes=0)["spec"]
        spec, problem = parse_spec(job)
    assert valid is not None and spec is None
    assert problem is not None and "spec.trainer.numNodes" in problem.message


def test_outside_an_evaluation_nothing_is_remembered() -> None:
    job = body()
    first, _ = parse_spec(job)
    job["spec"]["trainer"]["numNodes"] = 0  # changed in place: only safe because nothing is remembered
    spec, problem = parse_spec(job)
    assert first is not None and spec is None and problem is not None
    with specs_remembered():
        pass
    assert parse_spec(body())[0] is not parse_spec(body())[0]


def test_the_name_is_part_of_what_is_validated() -> None:
    job = body()
    renamed = {"metadata": {"name": "Not_A_Label", "namespace": "ml"}, "spec": job["spec"]}
    with specs_remembered():
        assert parse_spec(job)[0] is not None
        spec, problem = parse_spec(renamed)
    assert spec is None and problem is not None and "metadata.name" in problem.message
