"""The TrainingJob CustomResourceDefinition, generated from the pydantic models.

pydantic writes JSON Schema 2020-12; the API server wants a *structural* OpenAPI v3.0 schema:
no `$ref`, no `anyOf` with null for optional fields, boolean `exclusiveMinimum`, no
`uniqueItems`, no `additionalProperties: false`, and a `type` on every node. `structural()`
does exactly that translation, so the models stay the single source and `crds/trainingjob.yaml`
is only ever this module's output (a test fails when the file drifts).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from gpuwise.api import trainingjob as tj

# JSON Schema keywords the API server does not accept or that only decorate.
_DROPPED = {"title", "additionalProperties", "$defs", "discriminator"}

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Nodes", "type": "integer", "jsonPath": ".spec.trainer.numNodes"},
    {"name": "Mode", "type": "string", "jsonPath": ".spec.efficiency.mode", "priority": 1},
    {
        "name": "GPU-Util",
        "type": "number",
        "jsonPath": ".status.efficiency.gpuUtilization",
        "description": "Mean GPU utilization (%) over the efficiency window",
    },
    {"name": "Finding", "type": "string", "jsonPath": ".status.efficiency.topFinding"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def structural(schema: dict[str, Any]) -> dict[str, Any]:
    """Translate a pydantic JSON schema into a Kubernetes structural schema."""
    definitions: dict[str, Any] = schema.get("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, list):
            return [resolve(item) for item in node]
        if not isinstance(node, dict):
            return node
        node = _drop_null_branch(node)
        if "$ref" in node:
            target = definitions[node["$ref"].rsplit("/", 1)[-1]]
            return resolve({**target, **{k: v for k, v in node.items() if k != "$ref"}})
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROPPED and not (key == "additionalProperties" and isinstance(value, dict)):
                continue
            if key == "properties":
                out[key] = {name: resolve(sub) for name, sub in value.items()}
            elif key in {"items", "additionalProperties", "anyOf", "allOf"}:
                out[key] = resolve(value)
            else:
                out[key] = value
        return _openapi_v3_0(out)

    return resolve({k: v for k, v in schema.items() if k != "$defs"})  # type: ignore[no-any-return]


def _drop_null_branch(node: dict[str, Any]) -> dict[str, Any]:
    """`X | None` becomes plain X: optional means "may be absent", never "may be null"."""
    branches = node.get("anyOf")
    if not branches:
        return node
    kept = [b for b in branches if b != {"type": "null"}]
    if len(kept) == len(branches):
        return node
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    if rest.get("default", ...) is None:
        del rest["default"]
    if len(kept) == 1:
        return {**kept[0], **rest}
    return {**rest, "anyOf": kept}


def _openapi_v3_0(node: dict[str, Any]) -> dict[str, Any]:
    if "exclusiveMinimum" in node and not isinstance(node["exclusiveMinimum"], bool):
        node["minimum"], node["exclusiveMinimum"] = node["exclusiveMinimum"], True
    if "exclusiveMaximum" in node and not isinstance(node["exclusiveMaximum"], bool):
        node["maximum"], node["exclusiveMaximum"] = node["exclusiveMaximum"], True
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if node.get("x-kubernetes-int-or-string"):
        node.pop("type", None)
        node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    elif node.get("x-kubernetes-preserve-unknown-fields") and "type" not in node:
        node["type"] = "object"
    elif "enum" in node and "type" not in node:
        node["type"] = "string"
    if "properties" in node or ("additionalProperties" in node and "type" not in node):
        node.setdefault("type", "object")
    if node.get("type") == "object" and node.get("additionalProperties") is True:
        node.pop("additionalProperties")
        node["x-kubernetes-preserve-unknown-fields"] = True
    return node


def schema() -> dict[str, Any]:
    """The openAPIV3Schema of a TrainingJob."""
    spec = structural(tj.TrainingJobSpec.model_json_schema(by_alias=True, mode="validation"))
    status = structural(tj.TrainingJobStatus.model_json_schema(by_alias=True, mode="validation"))
    spec["description"] = "Desired state, written by the user; gpuwise never changes it."
    status["description"] = "Observed state, written by gpuwise."
    return {
        "type": "object",
        "description": "A distributed PyTorch training job whose GPU efficiency gpuwise watches.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }


def definition() -> dict[str, Any]:
    """The whole CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{tj.PLURAL}.{tj.API_VERSION.split('/')[0]}",
            "labels": {"app.kubernetes.io/name": "gpuwise", "app.kubernetes.io/component": "crd"},
        },
        "spec": {
            "group": tj.API_VERSION.split("/")[0],
            "scope": "Namespaced",
            "names": {
                "kind": tj.KIND,
                "listKind": f"{tj.KIND}List",
                "plural": tj.PLURAL,
                "singular": tj.SINGULAR,
                "shortNames": list(tj.SHORT_NAMES),
                "categories": ["all", "gpuwise"],
            },
            "versions": [
                {
                    "name": tj.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": schema()},
                }
            ],
        },
    }


def render() -> str:
    header = "# Generated by `gpuwise crd` from the pydantic models in core/gpuwise/api. Do not edit.\n"
    return header + yaml.safe_dump(definition(), sort_keys=False, width=100)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuwise crd", description="Print the TrainingJob CRD as YAML.")
    parser.parse_args(argv)
    sys.stdout.write(render())
    return 0
