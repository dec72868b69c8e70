"""Suspend: give an idle job's GPUs back, from a checkpoint the job resumes from.

A job that stopped training but holds its GPUs (the `Idle` finding: no step and no GPU activity)
costs the cluster those GPUs for as long as nobody notices. Once it has been idle for
`spec.efficiency.idle.after`, and the job lists `Suspend` in Enforce mode, gpuwise:

1. asks it to checkpoint (the handshake every restart uses) and waits for worker 0's answer;
2. holds its Job suspended, replaced by one whose trainer gets GPUWISE_RESUME_FROM when the answer
   named the checkpoint's path (the Job's pod template cannot change afterwards);
3. sets `spec.runPolicy.suspend: true` on the TrainingJob (`prepare`): the pods go, the GPUs are
   free, the phase is `Suspended`, with the condition reason `IdleReclaimed`.

Setting `spec.runPolicy.suspend` back to false resumes it from that checkpoint. A job without the
handshake (`spec.checkpoint.enabled: false`) is suspended only with
`spec.efficiency.idle.allowWithoutCheckpoint` (its progress since its own last save is lost).
There is nothing to verify afterwards: the action is done once the job is suspended.
"""

from __future__ import annotations

from typing import Final

from gpuwise.act.action_settings import ActionSettings
from gpuwise.act.machine import READY, ActContext, Action, JobView, Plan, Progress, Refusal
from gpuwise.api.base import parse_duration
from gpuwise.api.kinds import IDLE_SECONDS_CHANGE, ActionKind
from gpuwise.api.trainingjob import KIND, ActionRecord, Instrumentation, Recommendation
from gpuwise.kube.resources import container_gpu_resources

SUSPEND_CHANGE: Final = "runPolicy.suspend"
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
IDLE_RECLAIMED: Final = "IdleReclaimed"
# The record's details: how long it had been idle, how many GPUs it held, and whether gpuwise set
# spec.runPolicy.suspend itself (only then does a rollback set it back).
IDLE_SECONDS: Final = "idleSeconds"
GPUS: Final = "gpus"
SUSPENDED_SPEC: Final = "suspendedSpec"


def gpus_of(job: JobView) -> int:
    """Whole GPUs the job holds: its workers times each trainer's `nvidia.com/gpu`-like requests."""
    resources = job.spec.trainer.resources_per_node.to_k8s()
    per_worker = sum(container_gpu_resources({"resources": resources}).values())
    return per_worker * job.spec.trainer.num_nodes


def checkpointed(job: JobView) -> bool:
    """Whether the job can answer the checkpoint handshake."""
    return job.spec.checkpoint.enabled and job.spec.telemetry.instrumentation is not Instrumentation.DISABLED


class Suspend(Action):
    kind = ActionKind.SUSPEND
    prepares_nodes = True  # `prepare` suspends the TrainingJob while its Job is held
    verifies = False

    def plan(self, job: JobView, recommendation: Recommendation, settings: ActionSettings) -> Plan | Refusal:
        reclaim = job.spec.efficiency.idle
        try:
            idle = float(recommendation.changes[IDLE_SECONDS_CHANGE])
        except (KeyError, ValueError):
            return Refusal("NotIdle", "the recommendation does not say how long the job has been idle")
        after = parse_duration(reclaim.after)
        if idle < after:
            left = (after - idle) / 60
            return Refusal(
                "NotIdleLongEnough",
                f"idle for {idle / 60:.0f} min; gpuwise suspends it after {reclaim.after} "
                f"(spec.efficiency.idle.after), in {left:.0f} min if it stays idle",
            )
        if job.spec.run_policy.suspend:
            return Refusal("AlreadySuspended", "spec.runPolicy.suspend is already true")
        if KUEUE_QUEUE_LABEL in job.body.get("metadata", {}).get("labels", {}):
            return Refusal(
                "QueuedByKueue",
                "Kueue decides when this job runs: set spec.active: false on its Kueue Workload to give its GPUs back",
            )
        restart = checkpointed(job) or not reclaim.allow_without_checkpoint  # without: the guardrails refuse it
        gpus = gpus_of(job)
        how = "after a checkpoint" if restart else "without a checkpoint (spec.efficiency.idle.allowWithoutCheckpoint)"
        return Plan(
            target=job.overrides,
            message=f"Suspend the job, idle for {idle / 60:.0f} min, {how}: its {gpus} GPU(s) go back to the cluster.",
            restart=restart,
            changes={SUSPEND_CHANGE: "true"},
            details={IDLE_SECONDS: f"{idle:.0f}", GPUS: str(gpus)},
        )

    async def prepare(self, job: JobView, record: ActionRecord, ctx: ActContext) -> Progress:
        """Suspend the TrainingJob itself: its Job is held suspended already, and stays so."""
        if not job.spec.run_policy.suspend:
            patch = {"spec": {"runPolicy": {"suspend": True}}}
            await ctx.kube.patch(job.body["apiVersion"], KIND, job.namespace, job.name, patch)
        return Progress(True, "spec.runPolicy.suspend set", {SUSPENDED_SPEC: "true"})

    async def undo(self, job: JobView, record: ActionRecord, ctx: ActContext) -> Progress:
        """Resume what gpuwise suspended (never a job the user suspended)."""
        if record.details.get(SUSPENDED_SPEC) == "true" and job.spec.run_policy.suspend:
            patch = {"spec": {"runPolicy": {"suspend": False}}}
            await ctx.kube.patch(job.body["apiVersion"], KIND, job.namespace, job.name, patch)
        return READY

    def done(self, record: ActionRecord) -> tuple[str, str]:
        """The reason and message of the Done transition: what was reclaimed, and how to resume."""
        idle = float(record.details.get(IDLE_SECONDS, "0"))
        gpus = int(record.details.get(GPUS, "0"))
        target = record.overrides_target
        source = f" from checkpoint {target.resume_from!r}" if target is not None and target.resume_from else ""
        return IDLE_RECLAIMED, (
            f"Suspended after {idle / 60:.0f} min idle ({gpus * idle / 3600:.1f} GPU-hours unused): {gpus} GPU(s) "
            f"freed. Set spec.runPolicy.suspend: false to resume{source}."
        )


SUSPEND = Suspend()
