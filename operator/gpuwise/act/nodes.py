"""Idling a node's GPUs the way `kubectl drain` would, but only the GPUs and only what gpuwise may.

Node-side actions (MigRepartition, Pack onto time-sliced GPUs) change what a node's GPUs offer,
and NVIDIA's MIG Manager and device plugin do not move user pods off first: gpuwise must. Three
steps, each idempotent so an operator restart can simply run it again:

- **cordon** the node, remembering in the annotation `gpuwise.io/cordoned-by` *which action*
  cordoned it. A node someone else cordoned stays cordoned, and gpuwise never uncordons it;
  a node another gpuwise action holds is left alone.
- **evict** the node's GPU pods through the Eviction API (policy/v1), never by deleting them,
  so PodDisruptionBudgets hold: a 429 means "not now", and the caller retries until its deadline.
  A pod annotated `gpuwise.io/do-not-disrupt: "true"` is never evicted, nor is a worker of
  another TrainingJob: gpuwise restarts a TrainingJob only through its own checkpoint handshake.
- **wait** until no GPU pod is left on the node (terminating pods still hold their GPUs).

Then a node-side action changes a label that an NVIDIA component acts on and follows its answer
(:func:`apply_on_idle_node`), or takes the change back (:func:`restore_node`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

import kopf

from gpuwise import wiring
from gpuwise.act.machine import ActionFailed, Progress
from gpuwise.act.transitions import EVICTIONS
from gpuwise.api.base import parse_duration
from gpuwise.kube.client import ApiError, Kube
from gpuwise.kube.resources import gpu_resources
from gpuwise.kube.trainingjob import as_body

JsonDict = dict[str, Any]

ANNOTATION_CORDONED_BY: Final = f"{wiring.API_GROUP}/cordoned-by"
_FINISHED: Final = frozenset({"Succeeded", "Failed"})


# --- what counts as a GPU pod ---------------------------------------------------------------


def holds_gpus(pod: JsonDict) -> bool:
    """A pod that asks for GPUs and has not finished (a terminating pod still holds them)."""
    return bool(gpu_resources(pod)) and (pod.get("status") or {}).get("phase") not in _FINISHED


def do_not_disrupt(obj: JsonDict) -> bool:
    return (obj.get("metadata", {}).get("annotations") or {}).get(wiring.ANNOTATION_DO_NOT_DISRUPT) == "true"


def trainingjob_of(pod: JsonDict) -> str | None:
    """The TrainingJob ("namespace/name") whose worker `pod` is: the operator labels every pod it
    renders `gpuwise.io/trainingjob: <name>` (the label its own handlers select them by)."""
    meta = pod.get("metadata", {})
    name = (meta.get("labels") or {}).get(wiring.LABEL_TRAININGJOB)
    return f"{meta.get('namespace')}/{name}" if name else None


def never_evicted(pod: JsonDict, job: str, namespaces: Collection[str] = ()) -> str | None:
    """Why gpuwise must not evict `pod` to make room for TrainingJob `job` ("namespace/name"), if so.

    A pod annotated do-not-disrupt; or a worker of another TrainingJob: gpuwise restarts a
    TrainingJob only after its own checkpoint handshake and within the disruption budgets, never
    as a side effect of another job's action (it may not checkpoint at all); or, when the admin
    listed the namespaces gpuwise may evict from (`actions.nodes.evictNamespaces`, `namespaces`),
    a pod outside them. The job's own pods may go: it is stopped from a checkpoint anyway.
    """
    if do_not_disrupt(pod):
        return f"annotated {wiring.ANNOTATION_DO_NOT_DISRUPT}"
    owner = trainingjob_of(pod)
    if owner == job:
        return None
    if owner is not None:
        return f"a worker of TrainingJob {owner}, which gpuwise restarts only through its own checkpoint handshake"
    namespace = pod.get("metadata", {}).get("namespace")
    if namespaces and namespace not in namespaces:
        return f"in namespace {namespace}, which actions.nodes.evictNamespaces does not list"
    return None


def pod_ref(pod: JsonDict) -> str:
    meta = pod.get("metadata", {})
    return f"{meta.get('namespace')}/{meta.get('name')}"


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether labels satisfy a LabelSelector (matchLabels and matchExpressions)."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for term in selector.get("matchExpressions") or []:
        present, value, values = term["key"] in labels, labels.get(term["key"]), term.get("values") or []
        operator = term["operator"]
        if (
            (operator == "In" and value not in values)
            or (operator == "NotIn" and present and value in values)
            or (operator == "Exists" and not present)
            or (operator == "DoesNotExist" and present)
        ):
            return False
    return True


def held_by_budgets(pods: Iterable[JsonDict], budgets: Iterable[JsonDict]) -> dict[str, str]:
    """Pods ("namespace/name") whose eviction a PodDisruptionBudget would refuse now, and why.

    Read from the budgets' status, which the disruption controller keeps: a budget allowing `n`
    disruptions lets `n` of the pods go; an unknown allowance is not presumed either way. The
    Eviction API stays the judge — this only keeps gpuwise from choosing a node it cannot idle.
    """
    held: dict[str, str] = {}
    pods = list(pods)
    for budget in budgets:
        meta, allowed = budget.get("metadata", {}), (budget.get("status") or {}).get("disruptionsAllowed")
        if allowed is None:
            continue
        selector = (budget.get("spec") or {}).get("selector") or {}
        covered = sorted(
            pod_ref(pod)
            for pod in pods
            if pod.get("metadata", {}).get("namespace") == meta.get("namespace")
            and selector_matches(selector, pod.get("metadata", {}).get("labels") or {})
        )
        for ref in covered[int(allowed) :]:
            held[ref] = (
                f"PodDisruptionBudget {meta.get('namespace')}/{meta.get('name')} allows {allowed} disruption(s) now"
            )
    return held


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
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    if held == holder:
        return Cordon.OURS
    if held is not None and unschedulable:
        raise NodeError(f"node {name} is cordoned by another gpuwise action ({held})")
    if unschedulable:
        return Cordon.SOMEONE_ELSES
    # Not cordoned (an administrator's `kubectl uncordon` leaves a stale annotation): ours now.
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
    protected: dict[str, str] = field(default_factory=dict)
    """Pods never evicted (see :func:`never_evicted`), with why."""
    left: tuple[str, ...] = ()
    """Pods still holding GPUs on the node (terminating, blocked or protected)."""

    @property
    def idle(self) -> bool:
        return not self.left

    def explain(self) -> str:
        """Why the node is not idle, for a condition or an Event."""
        parts = [f"{pod} is blocked: {why}" for pod, why in sorted(self.blocked.items())]
        parts += [f"{pod} must not be evicted: {why}" for pod, why in sorted(self.protected.items())]
        waiting = sorted(set(self.left) - set(self.blocked) - set(self.protected))
        if waiting:
            parts.append(f"still holding GPUs: {', '.join(waiting)}")
        return f"node {self.node}: " + ("; ".join(parts) if parts else "its GPUs are idle")


async def evict_gpu_pods(kube: Kube, node: str, *, job: str, namespaces: Collection[str] = (), why: str = "") -> Drain:
    """One pass: ask the API server to evict every GPU pod on `node`, for TrainingJob `job`
    ("namespace/name"). Call it again (the next cycle) while pods are left: a refusal may be
    lifted by then. A node holding a pod that must never be evicted (:func:`never_evicted`, with
    the admin's `namespaces`) cannot be idled: nobody is evicted from it.

    Each evicted pod gets a Warning Event that says who evicted it and why (`why`, e.g. "MIG config
    all-3g.40gb"), and is counted in `gpuwise_action_evictions_total`: its owner sees what happened
    in `kubectl describe`, and the platform team sees how much disruption node actions cost.
    """
    pods = await gpu_pods(kube, node)
    protected = {pod_ref(pod): reason for pod in pods if (reason := never_evicted(pod, job, namespaces)) is not None}
    if protected:
        return Drain(node, protected=protected, left=tuple(sorted(pod_ref(pod) for pod in pods)))
    evicted: list[str] = []
    blocked: dict[str, str] = {}
    left: list[str] = []
    for pod in pods:
        ref = pod_ref(pod)
        if not pod["metadata"].get("deletionTimestamp"):
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
                _evicted(pod, node, job, why)
                continue
        left.append(ref)
    still = {pod_ref(pod) for pod in await gpu_pods(kube, node)} if evicted else set(left)
    return Drain(node, tuple(evicted), blocked, left=tuple(sorted(still)))


def _evicted(pod: JsonDict, node: str, job: str, why: str) -> None:
    """Leave a trace of an eviction on the evicted pod (an Event) and in the operator's metrics."""
    namespace, name = job.split("/", 1)
    EVICTIONS.labels(namespace, name, pod["metadata"]["namespace"]).inc()
    purpose = f" ({why})" if why else ""
    kopf.warn(
        as_body({**pod, "apiVersion": "v1", "kind": "Pod"}),  # list items come without their kind
        reason="EvictedByGpuwise",
        message=f"Evicted by gpuwise to idle the GPUs of node {node} for an action on TrainingJob {job}{purpose}; "
        f'annotate pods {wiring.ANNOTATION_DO_NOT_DISRUPT}: "true" to keep them.',
    )


# --- changing what a node's GPUs offer ------------------------------------------------------


class Outcome(StrEnum):
    DONE = "Done"
    WAITING = "Waiting"
    FAILED = "Failed"


@dataclass(frozen=True)
class LabelChange:
    """Node labels a node-side NVIDIA component acts on (MIG Manager, the device plugin), and how
    to read its answer from the node: `answer(node)` is an outcome and words for the record."""

    labels: dict[str, str | None]  # a merge patch: None removes the label
    describe: str  # e.g. "MIG config all-3g.40gb"
    answer: Callable[[JsonDict], tuple[Outcome, str]]
    timeout: str  # a Duration: how long WAITING may last
    failed_reason: str  # CamelCase, for FAILED
    timeout_reason: str  # CamelCase, for a WAITING that outlasts `timeout`
    ready: Callable[[], Awaitable[str | None]] | None = None
    """What must exist before the labels name it (MIG Manager's config), made so once the node is
    idle: None when it is, or why not yet (tried again the next cycle). It may raise ActionFailed."""


def _since(details: Mapping[str, str], key: str, now: datetime) -> float:
    started = details.get(key)
    return (now - datetime.fromisoformat(started)).total_seconds() if started else 0.0


async def apply_on_idle_node(
    kube: Kube,
    node: str,
    holder: str,
    *,
    job: str,
    change: LabelChange,
    details: Mapping[str, str],
    now: datetime,
    drain_timeout: str,
    evict_namespaces: Collection[str] = (),
) -> Progress:
    """One step of: cordon, evict the GPU pods (for at most `drain_timeout`; for TrainingJob `job`,
    "namespace/name", see :func:`evict_gpu_pods`), make the change `ready`, set the labels, wait for
    the component's answer, uncordon. Call it once per cycle with the details it returned so far (the action record's);
    every step runs once, so a restarted operator resumes it. `evicted` in the details names the
    pods it evicted.

    Raises ActionFailed: NodeBusy, DoNotDisrupt, EvictionBlocked, or the change's own reasons.
    """
    progress: dict[str, str] = {}
    if "cordon" not in details:
        try:
            progress["cordon"] = (await cordon(kube, node, holder)).value
        except NodeError as exc:
            raise ActionFailed("NodeBusy", str(exc)) from exc
    if "labelledAt" not in details:
        progress["drainStartedAt"] = details.get("drainStartedAt") or now.isoformat()
        drain = await evict_gpu_pods(kube, node, job=job, namespaces=evict_namespaces, why=change.describe)
        if drain.evicted:
            progress["evicted"] = ",".join(sorted({*details.get("evicted", "").split(","), *drain.evicted} - {""}))
        if drain.protected:
            raise ActionFailed("DoNotDisrupt", drain.explain())
        if not drain.idle:
            if _since(progress, "drainStartedAt", now) > parse_duration(drain_timeout):
                raise ActionFailed("EvictionBlocked", f"{drain.explain()} (gave up after {drain_timeout})")
            return Progress(False, f"idling the GPUs: {drain.explain()}", progress)
        waiting = await change.ready() if change.ready is not None else None
        if waiting is not None:
            return Progress(False, f"node {node}: {waiting}", progress)
        await kube.patch("v1", "Node", "", node, {"metadata": {"labels": change.labels}})
        progress["labelledAt"] = now.isoformat()
        return Progress(False, f"node {node}: asked for {change.describe}", progress)
    outcome, words = change.answer(await get_node(kube, node))
    if outcome is Outcome.FAILED:
        raise ActionFailed(change.failed_reason, f"node {node}: {words}")
    if outcome is Outcome.WAITING:
        if _since(details, "labelledAt", now) > parse_duration(change.timeout):
            raise ActionFailed(change.timeout_reason, f"node {node}: {words} after {change.timeout}")
        return Progress(False, f"node {node}: {words}")
    await uncordon(kube, node, holder)
    return Progress(True, f"node {node}: {words}", {"applied": "true"})


async def restore_node(
    kube: Kube,
    node: str,
    holder: str,
    *,
    back: LabelChange,
    ours: Callable[[JsonDict], bool],
    details: Mapping[str, str],
    now: datetime,
) -> Progress:
    """Undo an unfinished :func:`apply_on_idle_node` one step at a time: set the labels `back` if
    gpuwise had changed them and they are still its own (`ours(node)`), wait for the answer,
    uncordon. A change that completed is kept (see below).

    A failed or timed-out restore leaves the node cordoned, and says so: its GPUs are in a state
    nobody asked for, and new pods must not land on them.
    """
    found = await kube.get("v1", "Node", "", node)
    if found is None:
        return Progress(True, f"node {node} is gone")
    if details.get("applied") == "true":
        # A change that completed stays: other pods may already use what it made. Only the job goes back.
        return Progress(True, f"node {node} keeps its new configuration; the job goes back")
    if "labelledAt" in details:
        if "restoredAt" not in details:
            if not ours(found):
                return await _release(kube, node, holder, "its labels were changed by someone else since")
            await kube.patch("v1", "Node", "", node, {"metadata": {"labels": back.labels}})
            return Progress(False, f"node {node}: going back to {back.describe}", {"restoredAt": now.isoformat()})
        outcome, words = back.answer(found)
        timed_out = outcome is Outcome.WAITING and _since(details, "restoredAt", now) > parse_duration(back.timeout)
        if outcome is Outcome.FAILED or timed_out:
            return Progress(
                True, f"node {node}: going back to {back.describe} did not succeed ({words}); it stays cordoned"
            )
        if outcome is Outcome.WAITING:
            return Progress(False, f"node {node}: {words}")
    return await _release(kube, node, holder, "")


async def _release(kube: Kube, node: str, holder: str, note: str) -> Progress:
    done = f"node {node} uncordoned" if await uncordon(kube, node, holder) else f"node {node} left as it was"
    return Progress(True, f"{note}; {done}" if note else done)
