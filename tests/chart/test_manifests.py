"""Every rendered manifest against the Kubernetes 1.30 schemas (kubernetes-validate, offline)."""

from __future__ import annotations

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from tests.chart.support import VALUE_SETS, render

KUBERNETES = "1.30.0"
# Objects of CRDs the Kubernetes schemas do not know, and why that is acceptable:
NOT_IN_KUBERNETES = {
    # prometheus-operator: the field names are checked by test_chart.py, and an unknown field
    # fails at install because the prometheus-operator CRDs are structural.
    "monitoring.coreos.com/v1": ("PodMonitor", "ServiceMonitor", "PrometheusRule"),
    # cert-manager, only with webhook.certificate.source=cert-manager.
    "cert-manager.io/v1": ("Issuer", "Certificate"),
    # kopf's peering objects: their CRD (in the chart) has no spec to check.
    "kopf.dev/v1": ("KopfPeering", "ClusterKopfPeering"),
}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_manifests_are_valid_kubernetes_1_30(name: str) -> None:
    checked, skipped = 0, 0
    for doc in render(VALUE_SETS[name]):
        if doc["kind"] in NOT_IN_KUBERNETES.get(doc["apiVersion"], ()):
            skipped += 1
            continue
        where = f"{doc['kind']} {doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{where}: {error.message} at {'.'.join(str(p) for p in error.path)}")
        except kubernetes_validate.SchemaNotFoundError:
            pytest.fail(f"{where}: no Kubernetes {KUBERNETES} schema for {doc['apiVersion']} {doc['kind']}")
        checked += 1
    assert checked >= 8
    if name != "default":
        assert skipped  # the non-default sets do render the CRD-typed objects


def test_validation_catches_a_broken_manifest() -> None:
    (deployment,) = [d for d in render() if d["kind"] == "Deployment"]
    deployment["spec"]["replicas"] = "many"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES, strict=True)
    deployment["spec"]["replicas"] = 1
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES, strict=True)
