"""Every rendered manifest against the Kubernetes 1.30 schemas (kubernetes-validate, offline), and
the custom resources against strict schemas of their CRDs (tests/chart/crd_schemas.py)."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import referencing

from tests.chart.crd_schemas import schemas
from tests.chart.support import VALUE_SETS, Manifest, render

KUBERNETES = "1.30.0"
# Objects of CRDs that neither the Kubernetes schemas nor crd_schemas.py describe, and why:
NOT_CHECKED = {
    # cert-manager, only with webhook.certificate.source=cert-manager: the chart renders a
    # self-signed Issuer and a Certificate; test_chart.py checks the fields it relies on.
    "cert-manager.io/v1": ("Issuer", "Certificate"),
}


@functools.cache
def _registry() -> referencing.Registry[Any]:
    """Kubernetes' own definitions (ObjectMeta, LabelSelector), strict, for the CRD schemas' $refs."""
    path = f"kubernetes-json-schema/v{KUBERNETES}-local-strict/_definitions.json"
    definitions = json.loads(resources.files("kubernetes_validate").joinpath(path).read_text())
    return referencing.Resource.from_contents(definitions) @ referencing.Registry()


def validate_custom(doc: Manifest) -> bool:
    """Validate an object of a CRD the chart uses; False when there is no schema for its kind."""
    schema = schemas().get((doc["apiVersion"], doc["kind"]))
    if schema is None:
        return False
    jsonschema.Draft202012Validator(schema, registry=_registry()).validate(doc)
    return True


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_manifests_are_valid_kubernetes_1_30(name: str) -> None:
    checked, custom = 0, 0
    for doc in render(VALUE_SETS[name]):
        if doc["kind"] in NOT_CHECKED.get(doc["apiVersion"], ()):
            continue
        where = f"{doc['kind']} {doc['metadata']['name']}"
        try:
            if validate_custom(doc):
                custom += 1
                continue
            kubernetes_validate.validate(doc, KUBERNETES, strict=True)
        except jsonschema.ValidationError as error:  # kubernetes_validate's is one too
            pytest.fail(f"{where}: {error.message} at {'.'.join(str(p) for p in error.path)}")
        except kubernetes_validate.SchemaNotFoundError:
            pytest.fail(f"{where}: no Kubernetes {KUBERNETES} schema for {doc['apiVersion']} {doc['kind']}")
        checked += 1
    assert checked >= 8
    if name != "default":
        assert custom >= 3  # the non-default sets render the monitoring (and peering) objects


def test_custom_resource_schemas_catch_what_the_api_server_would_prune_or_refuse() -> None:
    docs = render(VALUE_SETS["everything"])
    kinds = {(d["apiVersion"], d["kind"]) for d in docs if validate_custom(d)}
    assert kinds == {
        ("monitoring.coreos.com/v1", "PodMonitor"),
        ("monitoring.coreos.com/v1", "ServiceMonitor"),
        ("monitoring.coreos.com/v1", "PrometheusRule"),
        ("kopf.dev/v1", "KopfPeering"),
    }
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    (peering, *_) = [d for d in docs if d["kind"] == "KopfPeering"]
    broken: list[tuple[Manifest, str]] = []
    misspelt = json.loads(json.dumps(monitor))
    misspelt["spec"]["endpoints"][0]["honourLabels"] = True
    broken.append((misspelt, "honourLabels"))
    interval = json.loads(json.dumps(monitor))
    interval["spec"]["endpoints"][0]["interval"] = "30 seconds"
    broken.append((interval, "30 seconds"))
    action = json.loads(json.dumps(monitor))
    action["spec"]["endpoints"][0]["relabelings"][0]["action"] = "rename"
    broken.append((action, "rename"))
    unnamed = json.loads(json.dumps(rule))
    del unnamed["spec"]["groups"][0]["name"]
    broken.append((unnamed, "'name' is a required property"))
    labels = json.loads(json.dumps(peering))
    labels["metadata"]["labels"]["replicas"] = 2
    broken.append((labels, "2 is not of type"))
    for doc, message in broken:
        with pytest.raises(jsonschema.ValidationError, match=message):
            validate_custom(doc)


def test_validation_catches_a_broken_manifest() -> None:
    (deployment,) = [d for d in render() if d["kind"] == "Deployment"]
    deployment["spec"]["replicas"] = "many"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES, strict=True)
    deployment["spec"]["replicas"] = 1
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES, strict=True)
