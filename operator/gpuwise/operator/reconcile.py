"""Bring one TrainingJob's world in line with its spec, then report what is there.

Level-triggered and idempotent: whatever woke it (the TrainingJob changed, its Job or a pod
changed, the periodic resync, an operator restart), `reconcile()` looks at the current objects
and does only what is missing. Names are deterministic and creation treats "already exists" as
success, so a repeated event or a restarted operator never makes a second Job or Service.

"Only what is missing" has one exception: a Job this TrainingJob already ran is never created
again unless gpuwise's action runner deleted it to restart the job (`replacing()`). A Job that
went away on its own (its ttlSecondsAfterFinished removed it while the operator was down, or
someone deleted it) would otherwise run the training a second time; the job ends `Failed` with
reason `JobVanished` instead.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf

from gpuwise.api.overrides import JobOverrides
from gpuwise.api.trainingjob import KIND, TERMINAL_PHASES, ActionState, Phase, TrainingJobSpec
from gpuwise.kube import job_overrides
from gpuwise.kube.client import ApiError, Kube
from gpuwise.kube.trainingjob import SpecProblem, as_body, follow_mutable_fields, parse_spec
from gpuwise.operator import status as observed
from gpuwise.operator import workload
from gpuwise.operator.config import OperatorSettings
from gpuwise.operator.metrics import RECLAIMED

JsonDict = dict[str, Any]


@dataclass
class ReconcileContext:
    """What every reconcile needs, built once at start-up and kept in kopf's memo."""

    kube: Kube
    settings: OperatorSettings
    # A job's lock lives while someone holds it or waits for it: not one for every job ever seen.
    _locks: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = field(
        default_factory=weakref.WeakValueDictionary
    )

    def lock(self, namespace: str, name: str) -> asyncio.Lock:
        """The job's lock: the reconciler and the evaluation's actions change a job one at a time."""
        lock = self._locks.get((namespace, name))
        if lock is None:
            lock = self._locks[namespace, name] = asyncio.Lock()
        return lock


def changed_paths(old: Any, new: Any, prefix: str) -> list[str]:
    """Dotted paths where two JSON values differ (lists compared whole)."""
    if isinstance(old, dict) and isinstance(new, dict):
        paths: list[str] = []
        for key in sorted(set(old) | set(new)):
            paths += changed_paths(old.get(key), new.get(key), f"{prefix}.{key}")
        return paths
    return [] if old == new else [prefix]


def _owned_by(obj: JsonDict, owner: JsonDict) -> bool:
    uid = owner["metadata"].get("uid")
    return any(ref.get("uid") == uid for ref in obj.get("metadata", {}).get("ownerReferences") or [])


def check_running_job(job: JsonDict, owner: JsonDict, spec: TrainingJobSpec) -> SpecProblem | None:
    """Whether the existing Job is ours and runs the current spec."""
    if not _owned_by(job, owner):
        return SpecProblem(
            "OwnershipConflict",
            f"a Job named {job['metadata']['name']!r} already exists and does not belong to this "
            "TrainingJob; rename the TrainingJob or delete that Job",
        )
    applied_raw = (job["metadata"].get("annotations") or {}).get(workload.ANNOTATION_APPLIED_SPEC)
    if applied_raw is None:
        return None
    changed = changed_paths(json.loads(applied_raw), workload.immutable_part(spec), "spec")
    if not changed:
        return None
    return SpecProblem(
        "ImmutableFieldChanged",
        f"{', '.join(changed)} cannot change while the job exists; the job keeps running the "
        "previous spec. Revert the change, or delete and re-create the TrainingJob.",
    )


# --- making the objects ---------------------------------------------------------------------


def read_overrides(owner: JsonDict) -> tuple[JobOverrides, SpecProblem | None]:
    """What gpuwise's actions changed on this job; a hand-edited, unreadable annotation is a problem."""
    try:
        return job_overrides.wanted(owner), None
    except job_overrides.OverridesError as exc:
        return job_overrides.NONE, SpecProblem("InvalidOverrides", str(exc))


async def ensure_workload(
    owner: JsonDict, spec: TrainingJobSpec, overrides: JobOverrides, ctx: ReconcileContext
) -> tuple[JsonDict | None, SpecProblem | None]:
    """Create the Service and the Job if missing; return the Job that exists now.

    A missing Job is rendered with the current overrides: after an action deleted the Job to
    restart it (gpuwise.act), this is what starts the new one.
    """
    namespace, name = owner["metadata"]["namespace"], owner["metadata"]["name"]
    job = workload.render_job(owner, spec, ctx.settings.sidecar, overrides)
    if (too_large := workload.annotations_too_large(job)) is not None:
        return None, SpecProblem("SpecTooLarge", too_large)  # refused for certain: create nothing
    if (refused := workload.pod_security_refusal(job, ctx.settings.pod_security)) is not None:
        return None, SpecProblem("PodSecurityViolation", refused)  # the operator's setting forbids it
    if (group_refused := await ensure_pod_group(owner, spec, ctx)) is not None:
        return None, group_refused
    try:
        await ctx.kube.create(workload.render_service(owner))
        created = await ctx.kube.create(job)
        if created is not None:
            kopf.info(
                as_body(owner),
                reason="JobCreated",
                message=f"Created Job {name} and headless Service {name}.",
            )
            return created, None
        existing = await ctx.kube.get("batch/v1", "Job", namespace, name)
    except ApiError as exc:
        if exc.status in {400, 403, 422}:  # the server will refuse it again: say why, don't retry
            return None, SpecProblem("JobRejected", f"the API server refused the Job: {exc.message}")
        raise kopf.TemporaryError(f"creating the workload failed: {exc}", delay=10) from exc
    if existing is None:  # deleted between our create and get: the next event creates it again
        return None, None
    return existing, check_running_job(existing, owner, spec)


async def ensure_pod_group(owner: JsonDict, spec: TrainingJobSpec, ctx: ReconcileContext) -> SpecProblem | None:
    """Create the gang scheduler's PodGroup if the job has one and it is missing, before the Job:
    the scheduler must know the group before the first pod asks to be placed. An existing one is
    kept (an action's new Job joins it). A refusal that will not go away by itself is the answer."""
    group = workload.render_pod_group(owner, spec)
    if group is None:
        return None
    try:
        await ctx.kube.create(group)
    except ApiError as exc:
        what = f"{group['apiVersion']} {group['kind']}"
        if exc.status == 404:
            return SpecProblem(
                "PodGroupRejected",
                f"the cluster serves no {what}: is the gang scheduler spec.pod.gang names installed? {exc.message}",
            )
        if exc.status in {400, 403, 422}:
            return SpecProblem(
                "PodGroupRejected",
                f"the API server refused the {what}: {exc.message} (a 403: turn the scheduler on in the chart's "
                "gangScheduling values, which grant the operator its PodGroups)",
            )
        raise kopf.TemporaryError(f"creating the PodGroup failed: {exc}", delay=10) from exc
    return None


# --- the loop -------------------------------------------------------------------------------


async def reconcile(
    owner: JsonDict, job: JsonDict | None, pods: Sequence[JsonDict], ctx: ReconcileContext, logger: kopf.Logger
) -> None:
    namespace, name = owner["metadata"]["namespace"], owner["metadata"]["name"]
    if owner["metadata"].get("deletionTimestamp"):
        return  # going away: its children follow through ownerReferences; make nothing new
    async with ctx.lock(namespace, name):
        vanished = None
        if job is None and not _finished(owner) and observed.created(owner.get("status") or {}):
            fresh = await look_again(owner, ctx)
            if fresh is None:
                return  # the TrainingJob is gone too
            owner, job, vanished = fresh
        spec, problem = parse_spec(owner)
        finished = _finished(owner)
        overrides, overrides_problem = read_overrides(owner)
        if spec is not None:
            if job is None and not finished and vanished is None and overrides_problem is None:
                job, problem = await ensure_workload(owner, spec, overrides, ctx)
            elif job is not None:
                problem = check_running_job(job, owner, spec)
                if problem is None and not finished:
                    await follow_mutable_fields(job, spec, overrides, ctx.kube)
            problem = problem or overrides_problem
        if job is None and finished:
            return  # the Job went away after the end (ttlSecondsAfterFinished): keep the final status
        await publish(
            owner=owner, job=job, pods=pods, spec=spec, problem=problem, ctx=ctx, logger=logger, vanished=vanished
        )


def _finished(owner: JsonDict) -> bool:
    return (owner.get("status") or {}).get("phase") in TERMINAL_PHASES


def replacing(owner: JsonDict) -> bool:
    """Whether gpuwise's action runner is replacing the Job: the job's newest action is `Applying`.

    The runner (gpuwise.act.runner) saves that state before it deletes the Job, and leaves it
    only once the Job rendered with the new overrides runs, so a Job missing meanwhile is one it
    deleted on purpose, for the reconciler to render again.
    """
    actions = (owner.get("status") or {}).get("actions") or []
    return bool(actions) and actions[-1].get("state") == ActionState.APPLYING.value


async def look_again(owner: JsonDict, ctx: ReconcileContext) -> tuple[JsonDict, JsonDict | None, str | None] | None:
    """The TrainingJob, its Job and whether the Job vanished, read from the API server itself.

    Called when the indexes show no Job for a TrainingJob whose status says it was created. The
    indexes come from separate watches and may lag: a Job just created may not be in them yet,
    and the runner's `Applying` record may arrive after the deletion it preceded. The API server
    knows both. A Job that is gone while nothing in gpuwise replaces it vanished on its own
    (its ttlSecondsAfterFinished while the operator was down, or someone deleted it): creating it
    again would run the training a second time. None: the TrainingJob is gone too.
    """
    meta = owner["metadata"]
    fresh = await ctx.kube.get(owner["apiVersion"], KIND, meta["namespace"], meta["name"])
    if fresh is None or fresh["metadata"].get("uid") != meta.get("uid") or fresh["metadata"].get("deletionTimestamp"):
        return None
    job = await ctx.kube.get("batch/v1", "Job", meta["namespace"], meta["name"])
    gone = job is None and not replacing(fresh) and observed.created(fresh.get("status") or {})
    return fresh, job, meta["name"] if gone else None


def _count_reclaimed(meta: JsonDict, reclaim: JsonDict | None, status: JsonDict) -> None:
    """Count the GPUs of a job gpuwise suspended for idleness while it stays so (RECLAIMED)."""
    namespace, name = meta["namespace"], meta["name"]
    if reclaim is not None and status.get("phase") == Phase.SUSPENDED.value:
        RECLAIMED.holding(namespace, name, int((reclaim.get("details") or {}).get("gpus", "0")))
    else:
        RECLAIMED.released(namespace, name)


async def publish(
    *,
    owner: JsonDict,
    job: JsonDict | None,
    pods: Sequence[JsonDict],
    spec: TrainingJobSpec | None,
    problem: SpecProblem | None,
    ctx: ReconcileContext,
    logger: kopf.Logger,
    vanished: str | None = None,
) -> None:
    """Write the observed status if it changed, with an Event for every condition transition."""
    old: JsonDict = owner.get("status") or {}
    reclaim = observed.idle_reclaim(old)
    new = observed.observe(
        job=job,
        pods=pods,
        num_nodes=spec.trainer.num_nodes if spec else 0,
        suspend_requested=spec.run_policy.suspend if spec else False,
        problem=problem,
        generation=owner["metadata"].get("generation"),
        vanished=vanished,
        reclaimed=reclaim.get("message", "") if reclaim else None,
    )
    _count_reclaimed(owner["metadata"], reclaim, new)
    old_conditions: list[JsonDict] = old.get("conditions") or []
    new["conditions"] = observed.with_transition_times(new["conditions"], old_conditions, observed.now())
    if all(old.get(key) == value for key, value in new.items()):
        return
    meta = owner["metadata"]
    await ctx.kube.patch(owner["apiVersion"], KIND, meta["namespace"], meta["name"], {"status": new}, status=True)
    for cond in observed.transitions(new["conditions"], old_conditions):
        bad = (cond["type"] == observed.ACCEPTED and cond["status"] == "False") or (
            cond["type"] == observed.FAILED and cond["status"] == "True"
        )
        post = kopf.warn if bad else kopf.info
        post(as_body(owner), reason=cond["reason"], message=cond["message"] or cond["type"])
    logger.debug("status of %s/%s: phase %s", meta["namespace"], meta["name"], new["phase"])
