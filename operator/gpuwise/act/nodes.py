"""Idling a node's GPUs the way `kubectl drain` would, but only the GPUs and only what gpuwise may.

Node-side actions (MigRepartition, Pack onto time-sliced GPUs) change what a node's GPUs offer,
and NVIDIA's MIG Manager and device plugin do not move user pods off first: gpuwise must. Three
steps, each idempotent so an operator restart can simply run it again:

- **cordon** the node, remembering in the annotation `gpuwise.io/cordoned-by` *which action*
  cordoned it. A node someone else cordoned stays cordoned, and gpuwise never uncordons it;
  a node another gpuwise action holds is left alone.
- **evict** the node's GPU pods through the Eviction API (policy/v1), never by deleting them,
  so PodDisruptionBudgets hold: a 429 means "not now", and the caller retries until its deadline.
  A pod annotated `gpuwise.io/do-not-disrupt: "true"` is never evicted.
- **wait** until no GPU pod is left on the node (terminating pods still hold their GPUs).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from gpuwise import wiring
from gpuwise.operator.kube import ApiError, Kube

JsonDict = dict[str, Any]

ANNOTATION_CORDONED_BY: Final = f"{wiring.API_GROUP}/cordoned-by"
GPU_RESOURCE: Final = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"
_FINISHED: Final = frozenset({"Succeeded", "Failed"})


# --- what counts as a GPU pod ---------------------------------------------------------------


def gpu_resources(pod: JsonDict) -> dict[str, int]:
    """Whole GPUs and MIG slices a pod asks for, by resource name (largest of requests and limits)."""
    found: dict[str, int] = {}
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for amounts in (resources.get("requests") or {}, resources.get("limits") or {}):
            for name, amount in amounts.items():
                if name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX):
                    found[name] = max(found.get(name, 0), int(amount))
    return {name: amount for name, amount in found.items() if amount > 0}


def holds_gpus(pod: JsonDict) -> bool:
    """A pod that asks for GPUs and has not finished (a terminating pod still holds them)."""
    return bool(gpu_resources(pod)) and (pod.get("status") or {}).get("phase") not in _FINISHED


def do_not_disrupt(obj: JsonDict) -> bool:
    return (obj.get("metadata", {}).get("annotations") or {}).get(wiring.ANNOTATION_DO_NOT_DISRUPT) == "true"


def pod_ref(pod: JsonDict) -> str:
    meta = pod.get("metadata", {})
    return f"{meta.get('namespace')}/{meta.get('name')}"


async def gpu_pods(kube: Kube, node: str) -> list[JsonDict]:
    """The pods holding GPUs on `node`, in every namespace."""
    pods = await kube.list("v1", "Pod", field_selector=f"spec.nodeName={node}")
    return [pod for pod in pods if holds_gpus(pod)]


# --- cordon ---------------------------------------------------------------------------------


class NodeError(Exception):
    """A node gpuwise cannot act on; the message says why."""


class Cordon(StrEnum):
    OURS = "Ours"  # gpuwise cordoned it for this holder, and will uncordon it
    SOMEONE_ELSES = "SomeoneElses"  # already unschedulable, not by gpuwise: left cordoned afterwards


async def get_node(kube: Kube, name: str) -> JsonDict:
    node = await kube.get("v1", "Node", "", name)
    if node is None:
        raise NodeError(f"node {name} does not exist")
    return node


def cordoned_by(node: JsonDict) -> str | None:
    return (node.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_CORDONED_BY)


async def cordon(kube: Kube, name: str, holder: str) -> Cordon:
    """Make `name` unschedulable on behalf of `holder` (an action's id); idempotent.

    Raises NodeError when another gpuwise action holds the node: two actions never share one.
    """
    node = await get_node(kube, name)
    held = cordoned_by(node)
    if held == holder:
        return Cordon.OURS
    if held is not None:
        raise NodeError(f"node {name} is cordoned by another gpuwise action ({held})")
    if (node.get("spec") or {}).get("unschedulable"):
        return Cordon.SOMEONE_ELSES
    patch = {"metadata": {"annotations": {ANNOTATION_CORDONED_BY: holder}}, "spec": {"unschedulable": True}}
    await kube.patch("v1", "Node", "", name, patch)
    return Cordon.OURS


async def uncordon(kube: Kube, name: str, holder: str) -> bool:
    """Make `name` schedulable again if, and only if, `holder` cordoned it; whether it did."""
    node = await kube.get("v1", "Node", "", name)
    if node is None or cordoned_by(node) != holder:
        return False
    await kube.patch(
        "v1",
        "Node",
        "",
        name,
        {"metadata": {"annotations": {ANNOTATION_CORDONED_BY: None}}, "spec": {"unschedulable": None}},
    )
    return True


# --- evict ----------------------------------------------------------------------------------


def refusal(error: ApiError) -> str:
    """The API server's own words for a refused eviction (the budget's cause when it names one)."""
    try:
        status = json.loads(error.message)
    except ValueError:
        return error.message
    causes = (status.get("details") or {}).get("causes") or []
    return "; ".join(c["message"] for c in causes if c.get("message")) or str(status.get("message") or error.message)


@dataclass(frozen=True)
class Drain:
    """Where idling a node's GPUs stands after one pass over its GPU pods."""

    node: str
    evicted: tuple[str, ...] = ()
    """Pods evicted in this pass."""
    blocked: dict[str, str] = field(default_factory=dict)
    """Pods a PodDisruptionBudget keeps for now, with the API server's reason."""
    protected: tuple[str, ...] = ()
    """Pods annotated do-not-disrupt: never evicted."""
    left: tuple[str, ...] = ()
    """Pods still holding GPUs on the node (terminating, blocked, protected or spared)."""

    @property
    def idle(self) -> bool:
        return not self.left

    def explain(self) -> str:
        """Why the node is not idle, for a condition or an Event."""
        parts = [f"{pod} is blocked: {why}" for pod, why in sorted(self.blocked.items())]
        parts += [f"{pod} is annotated {wiring.ANNOTATION_DO_NOT_DISRUPT}" for pod in self.protected]
        waiting = sorted(set(self.left) - set(self.blocked) - set(self.protected))
        if waiting:
            parts.append(f"still holding GPUs: {', '.join(waiting)}")
        return f"node {self.node}: " + ("; ".join(parts) if parts else "its GPUs are idle")


async def evict_gpu_pods(kube: Kube, node: str, *, spare: frozenset[str] = frozenset()) -> Drain:
    """One pass: ask the API server to evict every GPU pod on `node` except do-not-disrupt ones and
    `spare` ("namespace/name": pods the caller stops itself, e.g. the job being restarted)."""
    evicted: list[str] = []
    blocked: dict[str, str] = {}
    protected: list[str] = []
    left: list[str] = []
    for pod in await gpu_pods(kube, node):
        ref = pod_ref(pod)
        if do_not_disrupt(pod):
            protected.append(ref)
        elif ref not in spare and not pod["metadata"].get("deletionTimestamp"):
            try:
                await kube.evict(pod["metadata"]["namespace"], pod["metadata"]["name"])
            except ApiError as error:
                if error.status == 404:
                    continue  # gone already
                if error.status != 429:
                    raise
                blocked[ref] = refusal(error)
            else:
                evicted.append(ref)
                continue
        left.append(ref)
    still = {pod_ref(pod) for pod in await gpu_pods(kube, node)} if evicted else set(left)
    return Drain(node, tuple(evicted), blocked, tuple(protected), tuple(sorted(still)))


async def drain_gpus(
    kube: Kube, node: str, *, timeout: float, interval: float = 5.0, spare: frozenset[str] = frozenset()
) -> Drain:
    """Evict until the node's GPUs are idle, retrying refused evictions every `interval` seconds
    until `timeout`; returns the last pass (check `.idle`). A protected pod ends it at once."""
    deadline = time.monotonic() + timeout
    while True:
        drain = await evict_gpu_pods(kube, node, spare=spare)
        if drain.idle or drain.protected or time.monotonic() >= deadline:
            return drain
        await asyncio.sleep(min(interval, max(0.0, deadline - time.monotonic())))
