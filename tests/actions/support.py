"""Objects the node-side action tests write into the emulator, as a cluster would hold them."""

from __future__ import annotations

from typing import Any

from gpuwise import wiring

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
