"""Observed state of a TrainingJob, derived from its Job and pods — a pure function.

Status is recomputed from scratch on every change instead of being patched incrementally, so it
can never drift from what the cluster shows, and an operator restart recomputes the same answer.
Only `lastTransitionTime` carries over: it moves when a condition's status changes, not when the
operator looks again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from gpuwise import wiring
from gpuwise.api.trainingjob import Phase
from gpuwise.kube import queues
from gpuwise.kube.trainingjob import SpecProblem

JsonDict = dict[str, Any]

# Condition types, as Kubeflow's training jobs name them, plus Accepted for the spec itself and
# Queued for a job Kueue holds (gpuwise.kube.queues).
ACCEPTED = "Accepted"
CREATED = "Created"
QUEUED = "Queued"
RUNNING = "Running"
SUSPENDED = "Suspended"
SUCCEEDED = "Succeeded"
FAILED = "Failed"


def now() -> datetime:
    return datetime.now(tz=UTC).replace(microsecond=0)


def _time(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(type_: str, ok: bool, reason: str, message: str) -> JsonDict:
    return {"type": type_, "status": "True" if ok else "False", "reason": reason, "message": message}


def _created_condition(job_name: str) -> JsonDict:
    return _condition(CREATED, True, "JobCreated", f"Job {job_name} created.")


def created(status: JsonDict) -> bool:
    """Whether a status says the Job was created (and so must not be created again on its own)."""
    return any(c.get("type") == CREATED and c.get("status") == "True" for c in status.get("conditions") or [])


def _job_condition(job: JsonDict | None, type_: str) -> JsonDict | None:
    for cond in (job or {}).get("status", {}).get("conditions", []):
        if cond.get("type") == type_ and cond.get("status") == "True":
            return dict(cond)
    return None


def _pod_index(pod: JsonDict) -> int | None:
    meta = pod.get("metadata", {})
    raw = (meta.get("labels") or {}).get(wiring.JOB_COMPLETION_INDEX_ANNOTATION) or (meta.get("annotations") or {}).get(
        wiring.JOB_COMPLETION_INDEX_ANNOTATION
    )
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _age_order(pod: JsonDict) -> tuple[str, bool]:
    # Seconds are all a creationTimestamp has: of two pods created in the same second, the failed
    # one is the older (the Job controller made the other to replace it).
    return pod.get("metadata", {}).get("creationTimestamp") or "", _phase(pod) != "Failed"


def _phase(pod: JsonDict) -> str:
    return str(pod.get("status", {}).get("phase") or "Pending")


def workers(pods: Iterable[JsonDict]) -> list[JsonDict]:
    """One entry per worker index: its newest pod, and how often that index was retried.

    The trainer runs with `restartPolicy: Never`, so its container never restarts in place (its
    restartCount stays 0): the Job controller retries a failed worker with a new pod of the same
    completion index. A worker's restarts are therefore its index's older pods that failed.
    """
    by_index: dict[int, list[JsonDict]] = {}
    for pod in pods:
        index = _pod_index(pod)
        if index is not None:
            by_index.setdefault(index, []).append(pod)
    result = []
    for index in sorted(by_index):
        *older, pod = sorted(by_index[index], key=_age_order)
        entry: JsonDict = {
            "index": index,
            "pod": pod["metadata"]["name"],
            "phase": _phase(pod),
            "restarts": sum(1 for retried in older if _phase(retried) == "Failed"),
        }
        if node := pod.get("spec", {}).get("nodeName"):
            entry["node"] = node
        result.append(entry)
    return result


def observe(
    *,
    job: JsonDict | None,
    pods: Sequence[JsonDict],
    num_nodes: int,
    suspend_requested: bool,
    problem: SpecProblem | None,
    generation: int | None,
    vanished: str | None = None,
    reclaimed: str | None = None,
) -> JsonDict:
    """The status fields this module owns (phase, conditions, workers, times), without timestamps.

    `vanished` names the Job this TrainingJob ran and that went away without gpuwise asking: the
    job ends `Failed` with reason `JobVanished`, and the last known restarts and start time stay.
    `reclaimed` is what gpuwise's Suspend said when it suspended the idle job (`idle_reclaim`):
    the Suspended condition then has the reason `IdleReclaimed` and says it, until it resumes.
    """
    conditions: list[JsonDict] = []
    if problem is None:
        conditions.append(_condition(ACCEPTED, True, "SpecAccepted", "The spec is valid and applied."))
    else:
        conditions.append(_condition(ACCEPTED, False, problem.reason, problem.message))

    worker_list = workers(pods)
    status: JsonDict = {
        "workers": worker_list,
        "restarts": int((job or {}).get("status", {}).get("failed", 0)),
    }
    if generation is not None:
        status["observedGeneration"] = generation

    if job is None and vanished is not None:
        del status["restarts"]  # the Job's count went with it: keep the last one written
        message = (
            f"Job {vanished} was deleted before gpuwise saw it end (by its ttlSecondsAfterFinished while "
            "the operator was not running, or by hand). gpuwise does not start it again on its own: the "
            "trainer's logs or checkpoints tell how far it got; to run it again, delete and re-create the "
            "TrainingJob."
        )
        conditions.append(_created_condition(vanished))
        conditions.append(_condition(RUNNING, False, "JobVanished", "The Job is gone."))
        conditions.append(_condition(FAILED, True, "JobVanished", message))
        status["phase"] = Phase.FAILED.value
        status["conditions"] = conditions
        return status
    if job is None:
        status["phase"] = (Phase.INVALID if problem else Phase.PENDING).value
        status["conditions"] = conditions
        return status

    job_status = job.get("status", {})
    conditions.append(_created_condition(job["metadata"]["name"]))
    if start := job_status.get("startTime"):
        status["startTime"] = start

    complete = _job_condition(job, "Complete")
    failed = _job_condition(job, "Failed")
    suspended = bool(job.get("spec", {}).get("suspend")) or _job_condition(job, "Suspended") is not None
    running = sum(1 for w in worker_list if w["phase"] == "Running")
    queue = queues.queue_of(job)  # a suspended Job in a queue waits for Kueue, not for the user

    if complete is not None:
        phase = Phase.SUCCEEDED
        conditions.append(
            _condition(SUCCEEDED, True, "JobSucceeded", complete.get("message") or "All workers succeeded.")
        )
        conditions.append(_condition(RUNNING, False, "JobFinished", "The job has finished."))
        status["completionTime"] = job_status.get("completionTime") or complete.get("lastTransitionTime")
    elif failed is not None:
        phase = Phase.FAILED
        reason = failed.get("reason") or "JobFailed"
        conditions.append(_condition(FAILED, True, reason, failed.get("message") or "The job failed."))
        conditions.append(_condition(RUNNING, False, "JobFinished", "The job has finished."))
        status["completionTime"] = failed.get("lastTransitionTime")
    elif suspended and queue is not None:
        phase = Phase.QUEUED
        waiting = f"Waiting for Kueue to admit the job from LocalQueue {queue}."
        conditions.append(_condition(RUNNING, False, "JobQueued", waiting))
    elif suspended:
        phase = Phase.SUSPENDED
        conditions.append(_condition(RUNNING, False, "JobSuspended", "The job is suspended."))
    elif running:
        phase = Phase.RUNNING
        conditions.append(_condition(RUNNING, True, "PodsRunning", f"{running} of {num_nodes} workers running."))
    else:
        phase = Phase.PENDING
        conditions.append(_condition(RUNNING, False, "PodsPending", f"0 of {num_nodes} workers running."))

    if queue is not None:
        queued = phase is Phase.QUEUED
        conditions.append(
            _condition(
                QUEUED,
                queued,
                "WaitingForAdmission" if queued else "Admitted",
                f"In Kueue's LocalQueue {queue}, waiting for admission."
                if queued
                else f"Kueue admitted the job from LocalQueue {queue}.",
            )
        )
    elif suspended and suspend_requested and reclaimed is not None:
        conditions.append(_condition(SUSPENDED, True, "IdleReclaimed", reclaimed))
    elif suspend_requested or suspended:
        conditions.append(
            _condition(
                SUSPENDED,
                suspended,
                "JobSuspended" if suspended else "JobResuming",
                "spec.runPolicy.suspend is true." if suspend_requested else "Resuming.",
            )
        )
    status["phase"] = phase.value
    status["conditions"] = conditions
    return status


def idle_reclaim(status: JsonDict) -> JsonDict | None:
    """The record of the Suspend that suspended this job for idleness, if it is its latest action."""
    actions = status.get("actions") or []
    last: JsonDict = actions[-1] if actions else {}
    if (last.get("action"), last.get("state"), last.get("reason")) == ("Suspend", "Done", "IdleReclaimed"):
        return last
    return None


def with_transition_times(new: list[JsonDict], old: Sequence[JsonDict], at: datetime) -> list[JsonDict]:
    """Stamp lastTransitionTime: kept from `old` while a condition's status is unchanged."""
    previous = {c.get("type"): c for c in old}
    stamped = []
    for cond in new:
        before = previous.get(cond["type"])
        keep = before is not None and before.get("status") == cond["status"] and before.get("lastTransitionTime")
        stamped.append({**cond, "lastTransitionTime": before["lastTransitionTime"] if keep else _time(at)})  # type: ignore[index]
    return stamped


def transitions(new: Sequence[JsonDict], old: Sequence[JsonDict]) -> list[JsonDict]:
    """Conditions whose status or reason changed: each is worth an Event."""
    previous = {c.get("type"): (c.get("status"), c.get("reason")) for c in old}
    return [c for c in new if previous.get(c["type"]) != (c["status"], c["reason"])]
