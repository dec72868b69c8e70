"""The CRD's list types: what the API server merges by key, and what it calls a duplicate.

A `map` list (`x-kubernetes-list-type: map`) is merged by its key fields: server-side apply and
strategic merges address an item by its key, and the API server refuses two items with one key.
So the key must be what makes an item itself: a container's env by name, a pod's volumes by name,
mounts by their path (one volume may be mounted at two paths, never two volumes at one), status
conditions by type and workers by index. tests/support/apiserver.py plays the API server's part.
"""

from __future__ import annotations

import copy
import pathlib
from typing import Annotated, Any

import pytest
import yaml
from pydantic import Field

from gpuwise.api import crd
from gpuwise.api.base import ApiModel, list_map
from tests.support.apiserver import SCHEMA, duplicates, list_type_problems, lists

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "trainingjob.yaml").read_text())


def test_every_list_type_is_one_the_api_server_accepts() -> None:
    assert list_type_problems(SCHEMA) == []


def test_the_lists_merged_by_key_are_keyed_as_the_api_needs() -> None:
    typed = {path: node.get("x-kubernetes-list-type") for path, node in lists(SCHEMA)}
    keys = {
        path: node["x-kubernetes-list-map-keys"] for path, node in lists(SCHEMA) if "x-kubernetes-list-map-keys" in node
    }
    assert keys == {
        "spec.trainer.env": ["name"],
        "spec.trainer.volumeMounts": ["mountPath"],
        "spec.pod.volumes": ["name"],
        "status.conditions": ["type"],
        "status.workers": ["index"],
    }
    assert {path for path, kind in typed.items() if kind == "map"} == set(keys)
    assert {path for path, kind in typed.items() if kind == "set"} == {"spec.efficiency.actions"}


def with_spec(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(EXAMPLE)
    *parents, last = path.split(".")
    target = doc["spec"]
    for name in parents:
        target = target.setdefault(name, {})
    target[last] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "refused"),
    [
        (with_spec("trainer.env", [{"name": "A", "value": "1"}, {"name": "B", "value": "1"}]), []),
        (with_spec("trainer.env", [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]), ["spec.trainer.env[1]"]),
        (
            with_spec("trainer.env", [{"name": "A"}, {"name": "B"}, {"name": "A"}, {"name": "B"}]),
            ["spec.trainer.env[2]", "spec.trainer.env[3]"],
        ),
        # One volume at two paths is fine; two volumes at one path is not.
        (
            with_spec("trainer.volumeMounts", [{"name": "d", "mountPath": "/a"}, {"name": "d", "mountPath": "/b"}]),
            [],
        ),
        (
            with_spec("trainer.volumeMounts", [{"name": "d", "mountPath": "/a"}, {"name": "e", "mountPath": "/a"}]),
            ["spec.trainer.volumeMounts[1]"],
        ),
        (
            with_spec("pod.volumes", [{"name": "d", "emptyDir": {}}, {"name": "d", "configMap": {"name": "c"}}]),
            ["spec.pod.volumes[1]"],
        ),
        (with_spec("efficiency.actions", ["AdjustConfig", "Pack"]), []),
        (with_spec("efficiency.actions", ["Pack", "AdjustConfig", "Pack"]), ["spec.efficiency.actions[2]"]),
        # Lists without a type are atomic: repeats are the user's business (tolerations may repeat).
        (with_spec("pod.tolerations", [{"key": "a"}, {"key": "a"}]), []),
    ],
)
def test_a_repeated_key_is_a_duplicate_value(doc: dict[str, Any], refused: list[str]) -> None:
    assert duplicates(doc) == refused


def status_with(**lists_: list[dict[str, Any]]) -> dict[str, Any]:
    return {**EXAMPLE, "status": {"phase": "Running", **lists_}}


CONDITION = {"status": "True", "reason": "Up", "lastTransitionTime": "2026-01-01T00:00:00Z"}
WORKER = {"phase": "Running", "pod": "p"}


def test_status_lists_are_keyed_by_condition_type_and_worker_index() -> None:
    assert duplicates(status_with(conditions=[{"type": "A", **CONDITION}, {"type": "B", **CONDITION}])) == []
    assert duplicates(status_with(conditions=[{"type": "A", **CONDITION}, {"type": "A", **CONDITION}])) == [
        "status.conditions[1]"
    ]
    assert duplicates(status_with(workers=[{"index": 0, **WORKER}, {"index": 1, **WORKER}])) == []
    assert duplicates(status_with(workers=[{"index": 0, **WORKER}, {"index": 0, **WORKER, "pod": "q"}])) == [
        "status.workers[1]"
    ]


def test_list_map_makes_a_list_merged_by_its_key() -> None:
    # list_map() runs once per list as the models are defined; this list is made here, so that a
    # test sees list_map() itself (mutation testing switches a mutant on after the models exist).
    class Item(ApiModel):
        name: str
        size: int = 0

    class Holder(ApiModel):
        items: Annotated[list[Item], Field(json_schema_extra=list_map("name"))]

    schema = crd.structural(Holder.model_json_schema(by_alias=True))
    assert list_type_problems(schema) == []
    assert duplicates({"items": [{"name": "a"}, {"name": "b", "size": 1}]}, schema) == []
    assert duplicates({"items": [{"name": "a"}, {"name": "a", "size": 1}]}, schema) == ["items[1]"]


@pytest.mark.parametrize(
    ("node", "says"),
    [
        ({"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "MAP"}, "is not one of"),
        ({"type": "object", "x-kubernetes-list-type": "set"}, "not an array"),
        ({"type": "array", "items": {"type": "object"}, "x-kubernetes-list-type": "set"}, "not of scalars"),
        ({"type": "array", "items": {"type": "string"}, "x-kubernetes-list-map-keys": ["a"]}, "without"),
        (
            {
                "type": "array",
                "items": {"type": "string"},
                "x-kubernetes-list-type": "atomic",
                "x-kubernetes-list-map-keys": ["a"],
            },
            "on a list of type atomic",
        ),
        ({"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "map"}, "not of objects"),
        (
            {"type": "array", "items": {"type": "object", "properties": {}}, "x-kubernetes-list-type": "map"},
            "without x-kubernetes-list-map-keys",
        ),
        (
            {
                "type": "array",
                "items": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["b"],
            },
            "'b' is not a property",
        ),
        (
            {
                "type": "array",
                "items": {"type": "object", "properties": {"a": {"type": "object"}}, "required": ["a"]},
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["a"],
            },
            "not a scalar",
        ),
        (
            {
                "type": "array",
                "items": {"type": "object", "properties": {"a": {"type": "string"}}},
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["a"],
            },
            "neither required nor defaulted",
        ),
    ],
)
def test_list_markers_the_api_server_refuses_are_found(node: dict[str, Any], says: str) -> None:
    problems = list_type_problems({"type": "object", "properties": {"l": node}})
    assert any(says in problem for problem in problems), problems


def test_a_defaulted_map_key_is_accepted() -> None:
    node = {
        "type": "array",
        "items": {"type": "object", "properties": {"a": {"type": "string", "default": "x"}}},
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["a"],
    }
    assert list_type_problems({"type": "object", "properties": {"l": node}}) == []
