"""Render the chart with the real Helm engine (helm-python-sdk: Helm's Go SDK, offline)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpuwise"
RELEASE = "gw"
NAMESPACE = "gpuwise"
Manifest = dict[str, Any]

# Values that switch on everything the default leaves off, in namespaced mode.
EVERYTHING: dict[str, Any] = {
    "operator": {"replicas": 2, "watchNamespaces": ["team-a", "team-b"], "verbose": True},
    "actions": {
        "enforce": True,
        "migRepartition": True,
        "pack": True,
        "nodes": {
            "drainTimeout": "5m",
            "mig": {"configMap": {"namespace": "nvidia-gpu-operator", "name": "mig-parted-config"}},
            "timeSlicing": {"config": "shared-4"},
        },
        "budgets": [{"jobs": "10%"}, {"jobs": "0", "namespace": "*", "schedule": "0 9 * * 1-5", "duration": "8h"}],
        "gpuClasses": [
            {"name": "l4", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}},
            {"name": "a10", "nodeSelector": {"pool": "a10"}, "gpuModel": "NVIDIA A10"},
        ],
    },
    "gangScheduling": {"volcano": True, "coscheduling": True, "kai": True},
    "webhook": {"enabled": True, "namespaceSelector": {"matchLabels": {"gpu": "yes"}}},
    "monitoring": {
        "podMonitor": {"enabled": True, "labels": {"release": "kps"}},
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {
            "enabled": True,
            "disabledAlerts": ["GpuwiseStepEventsDropped"],
            "ruleLabels": {"team": "ml"},
        },
    },
    "grafana": {"dashboards": {"namespace": "monitoring", "annotations": {"grafana_folder": "GPUs"}}},
}
# Cluster-wide with several replicas and cert-manager certificates.
CLUSTERWIDE_HA: dict[str, Any] = {
    "operator": {"replicas": 3},
    "webhook": {"enabled": True, "certificate": {"source": "cert-manager"}},
    "monitoring": {"podMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
}
# The value sets every whole-chart check runs on.
VALUE_SETS: dict[str, dict[str, Any]] = {"default": {}, "everything": EVERYTHING, "clusterwide-ha": CLUSTERWIDE_HA}


@functools.cache
def chart() -> helm.Chart:
    return helm.Chart.load(CHART)


def render_files(values: dict[str, Any] | None = None) -> dict[str, str]:
    """Template path -> rendered text, as `helm template` renders it (NOTES.txt included)."""
    return chart().render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)


def render(values: dict[str, Any] | None = None) -> list[Manifest]:
    """Every object the chart would install: its CRDs, then its templates."""
    docs: list[Manifest] = []
    for crd in chart().crds:
        docs += [doc for doc in yaml.safe_load_all(crd["data"]) if doc]
    for path, text in sorted(render_files(values).items()):
        if path.endswith(".txt"):
            continue
        docs += [doc for doc in yaml.safe_load_all(text) if doc]
    return docs


def find(docs: list[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = find(docs, kind, name)
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def operator_container(docs: list[Manifest]) -> Manifest:
    deployment = one(docs, "Deployment")
    containers: list[Manifest] = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "operator")


# prometheus-operator's RelabelConfig fields, as it writes them into Prometheus's configuration.
_RELABEL_FIELDS = {
    "sourceLabels": "source_labels",
    "separator": "separator",
    "targetLabel": "target_label",
    "regex": "regex",
    "modulus": "modulus",
    "replacement": "replacement",
    "action": "action",
}


def prometheus_relabel_configs(relabelings: list[Manifest]) -> list[Manifest]:
    """A PodMonitor's relabelings as the Prometheus Operator hands them to Prometheus."""
    return [
        {_RELABEL_FIELDS[key]: value.lower() if key == "action" else value for key, value in rule.items()}
        for rule in relabelings
    ]


def sidecar_scrape_endpoint(values: dict[str, Any] | None = None) -> Manifest:
    """The sidecars' PodMonitor endpoint the chart renders (monitoring.podMonitor enabled)."""
    values = values or {}
    monitoring = values.get("monitoring", {})
    enabled = {**monitoring, "podMonitor": {**monitoring.get("podMonitor", {}), "enabled": True}}
    monitor = one(render({**values, "monitoring": enabled}), "PodMonitor", f"{RELEASE}-gpuwise-sidecars")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    result: Manifest = endpoint
    return result
