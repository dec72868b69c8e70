"""Strict JSON schemas for the custom resources the chart renders, which kubernetes-validate lacks.

* Prometheus Operator (`monitoring.coreos.com/v1` PodMonitor, ServiceMonitor, PrometheusRule): a
  minimal schema of the fields the chart uses, written from the upstream CRDs
  (prometheus-operator's `example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml`,
  `_servicemonitors.yaml` and `_prometheusrules.yaml`, v0.82 to v0.91): the same types, patterns,
  enums and required fields, but every object closed (`additionalProperties: false`). Stricter
  than the API server, which would silently prune a misspelt field: here it fails, and a field
  the chart starts to use must be added below from the upstream CRD.
* kopf's peering objects (`kopf.dev/v1`): the chart's own CRDs in `crds/kopfpeering.yaml`.

`metadata` and label selectors are Kubernetes' own definitions (kubernetes-validate's strict
`_definitions.json`), so they are checked exactly as for built-in kinds.
"""

from __future__ import annotations

from typing import Any, Final

import yaml

from tests.chart.support import CHART

JsonSchema = dict[str, Any]
_DEFINITIONS: Final = "https://kubernetes.io/api/_definitions.json#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1."
OBJECT_META: Final = {"$ref": _DEFINITIONS + "ObjectMeta"}
LABEL_SELECTOR: Final = {"$ref": _DEFINITIONS + "LabelSelector"}
# monitoringv1.Duration
DURATION: Final = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
STRING: Final = {"type": "string"}
BOOLEAN: Final = {"type": "boolean"}
STRING_MAP: Final = {"type": "object", "additionalProperties": STRING}


def closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> JsonSchema:
    schema: JsonSchema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


def array(items: JsonSchema) -> JsonSchema:
    return {"type": "array", "items": items}


# RelabelConfig.action: each in lower case and in CamelCase, as the CRD's enum lists them.
RELABEL_ACTIONS: Final = [
    spelling
    for pair in (
        ("replace", "Replace"),
        ("keep", "Keep"),
        ("drop", "Drop"),
        ("hashmod", "HashMod"),
        ("labelmap", "LabelMap"),
        ("labeldrop", "LabelDrop"),
        ("labelkeep", "LabelKeep"),
        ("lowercase", "Lowercase"),
        ("uppercase", "Uppercase"),
        ("keepequal", "KeepEqual"),
        ("dropequal", "DropEqual"),
    )
    for spelling in pair
]
RELABEL_CONFIG: Final = closed(
    {
        "action": {"type": "string", "enum": RELABEL_ACTIONS},
        "modulus": {"type": "integer"},
        "regex": STRING,
        "replacement": STRING,
        "separator": STRING,
        "sourceLabels": array({"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}),
        "targetLabel": STRING,
    }
)
NAMESPACE_SELECTOR: Final = closed({"any": BOOLEAN, "matchNames": array(STRING)})
ENDPOINT: Final = closed(
    {
        "port": STRING,
        "path": STRING,
        "interval": DURATION,
        "honorLabels": BOOLEAN,
        "relabelings": array(RELABEL_CONFIG),
        "metricRelabelings": array(RELABEL_CONFIG),
    }
)
RULE: Final = closed(
    {
        "alert": STRING,
        "record": STRING,
        "expr": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "for": DURATION,
        "keep_firing_for": {**DURATION, "minLength": 1},
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
    },
    required=("expr",),
)
RULE_GROUP: Final = closed(
    {"name": {"type": "string", "minLength": 1}, "interval": DURATION, "rules": array(RULE)}, required=("name",)
)
SPECS: Final[dict[str, JsonSchema]] = {
    "PodMonitor": closed(
        {"namespaceSelector": NAMESPACE_SELECTOR, "selector": LABEL_SELECTOR, "podMetricsEndpoints": array(ENDPOINT)},
        required=("selector",),
    ),
    "ServiceMonitor": closed(
        {"namespaceSelector": NAMESPACE_SELECTOR, "selector": LABEL_SELECTOR, "endpoints": array(ENDPOINT)},
        required=("endpoints", "selector"),
    ),
    "PrometheusRule": closed({"groups": array(RULE_GROUP)}),
}


def _resource(api_version: str, kind: str, properties: dict[str, Any], required: tuple[str, ...]) -> JsonSchema:
    return closed(
        {"apiVersion": {"const": api_version}, "kind": {"const": kind}, "metadata": OBJECT_META, **properties},
        required=("apiVersion", "kind", "metadata", *required),
    )


def schemas() -> dict[tuple[str, str], JsonSchema]:
    """(apiVersion, kind) -> the schema its objects must satisfy."""
    found = {
        ("monitoring.coreos.com/v1", kind): _resource("monitoring.coreos.com/v1", kind, {"spec": spec}, ("spec",))
        for kind, spec in SPECS.items()
    }
    for crd in yaml.safe_load_all((CHART / "crds" / "kopfpeering.yaml").read_text()):
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            api_version = f"{group}/{version['name']}"
            own = version["schema"]["openAPIV3Schema"].get("properties", {})
            found[api_version, kind] = _resource(api_version, kind, own, ())
    return found
