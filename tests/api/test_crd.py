"""The generated CRD: in sync with the models, structural, and strict about bad manifests.

The emulator does not validate against schemas, so this is where the API server's schema
validation is tested: every manifest is checked against the CRD's own openAPIV3Schema.
"""

from __future__ import annotations

import copy
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
import yaml

from gpuwise.api import crd

ROOT = pathlib.Path(__file__).resolve().parents[2]


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from nodes(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from nodes(schema[key], f"{path}[]")


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return crd.schema()


def validator(schema: dict[str, Any]) -> jsonschema.Draft4Validator:
    # OpenAPI v3.0 shares Draft 4's boolean exclusiveMinimum; x-kubernetes-* keys are ignored.
    return jsonschema.Draft4Validator(schema)


def test_committed_crd_matches_the_models() -> None:
    committed = (ROOT / "crds" / "trainingjob.yaml").read_text()
    assert committed == crd.render(), "crds/trainingjob.yaml is stale: run `make crd`"


def test_cli_prints_the_crd() -> None:
    out = subprocess.run([sys.executable, "-m", "gpuwise.cli", "crd"], capture_output=True, text=True, check=True)
    assert yaml.safe_load(out.stdout) == crd.definition()


def test_schema_is_structural(schema: dict[str, Any]) -> None:
    for path, node in nodes(schema):
        assert "$ref" not in node and "$defs" not in node, path
        assert "uniqueItems" not in node, f"{path}: the API server forbids uniqueItems"
        assert not {"patternProperties", "propertyNames"} & set(node), f"{path}: not in a CRD's schema"
        assert node.get("additionalProperties", {}) is not False, path
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string"), f"{path}: anyOf only for int-or-string"
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True, f"{path}: OpenAPI 3.0 wants a boolean"
        assert not ("properties" in node and "additionalProperties" in node), path


def test_crd_shape() -> None:
    definition = crd.definition()
    version = definition["spec"]["versions"][0]
    assert definition["metadata"]["name"] == "trainingjobs.gpuwise.io"
    assert definition["spec"]["names"]["shortNames"] == ["tj"]
    assert definition["spec"]["scope"] == "Namespaced"
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Phase"] == ".status.phase"
    assert columns["Nodes"] == ".spec.trainer.numNodes"
    assert columns["GPU-Util"] == ".status.efficiency.gpuUtilization"
    assert columns["Finding"] == ".status.efficiency.topFinding"
    assert columns["Age"] == ".metadata.creationTimestamp"
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["trainer"]["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"
    assert (
        spec["efficiency"]["properties"]["tunables"]["properties"]["batchSize"]["x-kubernetes-validations"][0]["rule"]
        == "self.min <= self.max"
    )
    assert spec["trainer"]["properties"]["env"]["x-kubernetes-list-map-keys"] == ["name"]


# Every plain scalar YAML 1.1 reads as a boolean (kubectl's Go YAML and PyYAML follow YAML 1.1).
YAML_1_1_BOOLEANS = frozenset(
    case(word) for word in ("y", "n", "yes", "no", "true", "false", "on", "off") for case in (str, str.title, str.upper)
)
# Kubernetes' own convention (metav1.Condition): gpuwise writes it as JSON, nobody types it in YAML.
CONDITION_STATUS = (".status.conditions[].status", ("True", "False", "Unknown"))


def test_no_enum_value_is_another_type_to_a_yaml_reader(schema: dict[str, Any]) -> None:
    """An unquoted `instrumentation: Off` reaches the API server as false: no enum may look like that."""
    enums = {path: tuple(node["enum"]) for path, node in nodes(schema) if "enum" in node}
    assert {".spec.telemetry.instrumentation", ".spec.efficiency.mode", ".status.phase"} <= set(enums)
    assert enums.pop(CONDITION_STATUS[0]) == CONDITION_STATUS[1]
    for path, values in enums.items():
        for value in values:
            assert isinstance(value, str), f"{path}: {value!r}"
            assert value not in YAML_1_1_BOOLEANS, f"{path}: {value!r} is a boolean in YAML 1.1"
            assert yaml.safe_load(f"v: {value}")["v"] == value, f"{path}: {value!r} does not stay a string"


def test_examples_validate(schema: dict[str, Any]) -> None:
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    assert examples
    for path in examples:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "TrainingJob":
                validator(schema).validate(doc)


def test_the_crd_and_the_sidecar_share_the_sampling_bounds(schema: dict[str, Any]) -> None:
    from gpuwise.sidecar import sidecar_command

    interval = schema["properties"]["spec"]["properties"]["telemetry"]["properties"]["sampleIntervalSeconds"]
    assert (interval["minimum"], interval["maximum"]) == (sidecar_command.MIN_INTERVAL, sidecar_command.MAX_INTERVAL)


@pytest.mark.parametrize(
    ("path", "value", "says"),
    [
        (("trainer", "numNodes"), 0, "less than the minimum of 1"),
        (("trainer", "image"), "", "should be non-empty"),
        (("telemetry", "instrumentation"), False, "is not of type 'string'"),
        (("efficiency", "mode"), "Off", "is not one of"),
        (("efficiency", "window"), "1 day", "does not match"),
        (("telemetry", "sampleIntervalSeconds"), 0.05, "less than the minimum of 0.1"),
        (("trainer", "numNodes"), 1_000_000, "greater than the maximum of 100000"),
        (("trainer", "image"), "my image", "does not match"),
        (("trainer", "shmSize"), "-1Gi", "does not match"),
        (("trainer", "resourcesPerNode"), {"limits": {"memory": "-16Gi"}}, "does not match"),
        (("trainer", "resourcesPerNode"), {"limits": {"memory": "lots"}}, "does not match"),
        (("runPolicy", "backoffLimit"), -1, "less than the minimum of 0"),
    ],
)
def test_schema_rejects_bad_manifests(schema: dict[str, Any], path: tuple[str, ...], value: Any, says: str) -> None:
    doc = yaml.safe_load((ROOT / "examples" / "trainingjob.yaml").read_text())
    target = doc["spec"]
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = copy.deepcopy(value)
    messages = [error.message for error in validator(schema).iter_errors(doc)]
    assert any(says in message for message in messages), messages
