"""Reschedule: run the job elsewhere — away from a straggler's node, or on a smaller GPU class.

A Job's pod template is immutable, so moving a pod means a checkpointed restart with new
overrides, never deleting the slow pod alone (the Job controller would recreate it from the same
template, possibly on the same node, and the other workers would lose their rendezvous anyway).

- **Straggler** (the finding names the worker): every worker must avoid the slow worker's node
  (required node anti-affinity on `kubernetes.io/hostname`). Nodes avoided before stay avoided,
  up to `MAX_AVOIDED` (the oldest is forgiven first), so a job does not run out of nodes.
- **Smaller GPU class** (a recommendation with `changes: {gpuClass: <name>}`, which `OversizedGPU`
  makes for a job that lists Reschedule and neither MigRepartition nor Pack): the job gets that
  class's node selector from the operator's `actions.gpuClasses`, replacing another class's (and
  a value the spec's own nodeSelector gives the same label). A spec that selects by a class label
  the chosen class does not set is refused (`PinnedBySpec`): overrides only add to it.

The change is kept whatever the throughput after it: the slow node or the larger GPU is not
something to go back to. The record still shows before and after.
"""

from __future__ import annotations

from typing import Final

from gpuwise.act.action_settings import ActionSettings
from gpuwise.act.machine import Action, JobView, Plan, Refusal, Verdict, compare
from gpuwise.api.kinds import GPU_CLASS_CHANGE, ActionKind
from gpuwise.api.trainingjob import ActionRecord, Recommendation

MAX_AVOIDED: Final = 4


def _finding_worker(job: JobView, kind: str) -> int | None:
    for finding in job.status.get("findings") or []:
        if finding.get("kind") == kind and finding.get("worker") is not None:
            return int(finding["worker"])
    return None


def _to_class(job: JobView, name: str, settings: ActionSettings) -> Plan | Refusal:
    chosen = next((c for c in settings.gpu_classes if c.name == name), None)
    if chosen is None:
        known = ", ".join(c.name for c in settings.gpu_classes) or "none"
        return Refusal("UnknownGpuClass", f"GPU class {name!r} is not in the operator's actions.gpuClasses ({known})")
    class_keys = {key for c in settings.gpu_classes for key in c.node_selector}
    # Overrides add to the spec's nodeSelector and replace its values: a class label the spec sets
    # and the chosen class does not would stay, and pin the pods where no such node is.
    pinned = sorted((class_keys & set(job.spec.pod.node_selector)) - set(chosen.node_selector))
    if pinned:
        return Refusal(
            "PinnedBySpec",
            f"spec.pod.nodeSelector sets {', '.join(pinned)}, which GPU class {name} does not: "
            "its nodes would not match",
        )
    selector = {k: v for k, v in job.overrides.node_selector.items() if k not in class_keys}
    selector.update(chosen.node_selector)
    if selector == job.overrides.node_selector:
        return Refusal("NothingToChange", f"the job already runs on GPU class {name}")
    target = job.overrides.model_copy(update={"node_selector": selector})
    return Plan(
        target=target,
        message=f"Move the job to GPU class {name} and restart from a checkpoint.",
        changes={GPU_CLASS_CHANGE: name},
    )


def _away_from_straggler(job: JobView, recommendation: Recommendation) -> Plan | Refusal:
    worker = _finding_worker(job, recommendation.finding)
    if worker is None:
        return Refusal("WorkerUnknown", f"the {recommendation.finding} finding names no worker")
    node = job.node_of_worker(worker)
    if node is None:
        return Refusal("WorkerNodeUnknown", f"worker {worker} has no node in status.workers")
    if node in job.overrides.avoid_nodes:
        return Refusal("NothingToChange", f"the job already avoids node {node}")
    avoided = [*job.overrides.avoid_nodes, node][-MAX_AVOIDED:]
    return Plan(
        target=job.overrides.model_copy(update={"avoid_nodes": avoided}),
        message=f"Restart the job from a checkpoint away from node {node}, where worker {worker} straggles.",
        changes={"avoidNode": node},
        details={"worker": str(worker), "node": node},
    )


class Reschedule(Action):
    kind = ActionKind.RESCHEDULE

    def plan(self, job: JobView, recommendation: Recommendation, settings: ActionSettings) -> Plan | Refusal:
        gpu_class = recommendation.changes.get(GPU_CLASS_CHANGE)
        if gpu_class is not None:
            return _to_class(job, gpu_class, settings)
        return _away_from_straggler(job, recommendation)

    def verify(self, record: ActionRecord, settings: ActionSettings) -> Verdict:
        judged = compare(record.baseline, record.result, settings.worse_tolerance)
        return Verdict(True, judged.reason if judged.keep else "Kept", judged.message)


RESCHEDULE = Reschedule()
