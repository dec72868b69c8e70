"""Objects the node-side action tests write into the emulator, as a cluster would hold them."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from kubernetes import config, dynamic

from gpuwise import wiring
from gpuwise.act.mig import known_configs
from gpuwise.decide.mig_profiles import gpu_model

READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


def node(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": dict(spec),
    }


def pod(
    name: str,
    on: str,
    *,
    gpus: dict[str, int] | None = None,
    labels: dict[str, str] | None = None,
    do_not_disrupt: bool = False,
    status: dict[str, Any] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """A pod bound to node `on`, asking for `gpus` (e.g. {"nvidia.com/gpu": 1}), running and ready."""
    annotations = {wiring.ANNOTATION_DO_NOT_DISRUPT: "true"} if do_not_disrupt else {}
    limits = {resource: str(count) for resource, count in (gpus or {}).items()}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}, "annotations": annotations},
        "spec": {"nodeName": on, "containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]},
        "status": status or READY,
    }


def budget(name: str, selector: dict[str, Any], namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": selector, **spec},
    }


def mig_node(
    name: str,
    *,
    config: str = "all-disabled",
    state: str | None = "success",
    gpus: int = 1,
    product: str = "NVIDIA-H100-80GB-HBM3",
    opted_in: bool = True,
    allocatable: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A GPU node as GPU Feature Discovery and MIG Manager label it."""
    labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus), "nvidia.com/mig.config": config}
    if state is not None:
        labels["nvidia.com/mig.config.state"] = state
    if opted_in:
        labels["gpuwise.io/gpu-partitioning"] = "mig"
    body = node(name, labels)
    body["status"] = {"allocatable": {"cpu": "64", "memory": "512Gi", **(allocatable or {})}}
    return body


class MigManager:
    """Plays NVIDIA's MIG Manager against the emulator: when a node's `nvidia.com/mig.config` label
    changes it reports `pending`, then `success` (publishing the slices the config gives in the
    node's allocatable, as the device plugin would) — or `failed` for configs in `fail`, or stays
    `pending` forever for configs in `wedge`. Like the real one, it moves no pods."""

    def __init__(self, kubeconfig: str, *, fail: set[str] | None = None, wedge: set[str] | None = None) -> None:
        self.client = dynamic.DynamicClient(config.new_client_from_config(config_file=kubeconfig))
        self.fail, self.wedge = fail or set(), wedge or set()
        self.applied: dict[str, str] = {}  # node -> the config last acted on
        self.seen: list[tuple[str, str]] = []  # (node, config) in the order they were asked for
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mig-manager", daemon=True)

    def __enter__(self) -> MigManager:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        nodes = self.client.resources.get(api_version="v1", kind="Node")
        while not self._stop.wait(0.05):
            for item in nodes.get().items:
                body = item.to_dict()
                name, labels = body["metadata"]["name"], body["metadata"].get("labels") or {}
                wanted = labels.get("nvidia.com/mig.config")
                if wanted is None or self.applied.get(name) == wanted:
                    continue
                if name not in self.applied and labels.get("nvidia.com/mig.config.state") == "success":
                    self.applied[name] = wanted  # what the node ran before the test began
                    continue
                self.applied[name] = wanted
                self.seen.append((name, wanted))
                self._label(nodes, name, "pending")
                if wanted in self.wedge:
                    continue
                if wanted in self.fail:
                    self._label(nodes, name, "failed")
                    continue
                model = gpu_model(labels["nvidia.com/gpu.product"])
                counts = Counter(i.profile for i in known_configs(model, {})[wanted])
                gpus = int(labels.get("nvidia.com/gpu.count", "1"))
                slices = {f"nvidia.com/mig-{p.name}": str(counts[p.name] * gpus) for p in model.profiles}
                nodes.status.patch(
                    name=name,
                    body={"status": {"allocatable": slices}},
                    content_type="application/merge-patch+json",
                )
                self._label(nodes, name, "success")

    @staticmethod
    def _label(nodes: Any, name: str, state: str) -> None:
        body = {"metadata": {"labels": {"nvidia.com/mig.config.state": state}}}
        nodes.patch(name=name, body=body, content_type="application/merge-patch+json")
