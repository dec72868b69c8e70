"""Status as a pure function of the Job and its pods."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from gpuwise.api.trainingjob import TrainingJobSpec
from gpuwise.kube.trainingjob import SpecProblem, parse_spec
from gpuwise.operator import status
from gpuwise.operator.config import SidecarSettings
from gpuwise.operator.reconcile import ReconcileContext, changed_paths, check_running_job
from gpuwise.operator.workload import render_job


def pod(index: int, phase: str, created: str, node: str | None = "n1", name: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name or f"j-{index}-{created[-2:]}",
            "creationTimestamp": created,
            "labels": {"batch.kubernetes.io/job-completion-index": str(index)},
        },
        "spec": {"nodeName": node} if node else {},
        # restartPolicy Never: the trainer container itself never restarts.
        "status": {"phase": phase, "containerStatuses": [{"restartCount": 0}]},
    }


def job(**status_: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j"}, "spec": {}, "status": status_}


def observe(**kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "job": None,
        "pods": [],
        "num_nodes": 2,
        "suspend_requested": False,
        "problem": None,
        "generation": 3,
    }
    args.update(kw)
    return status.observe(**args)


def kinds(observed: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in observed["conditions"]}


def test_newest_pod_per_index_is_the_worker_and_its_failed_predecessors_are_restarts() -> None:
    pods = [
        pod(0, "Failed", "2026-01-01T00:00:01"),
        pod(0, "Running", "2026-01-01T00:00:09"),
        pod(0, "Failed", "2026-01-01T00:00:05"),
        pod(1, "Pending", "2026-01-01T00:00:02", node=None),
        {"metadata": {"name": "stray"}},
    ]
    assert status.workers(pods) == [
        {"index": 0, "pod": "j-0-09", "phase": "Running", "restarts": 2, "node": "n1"},
        {"index": 1, "pod": "j-1-02", "phase": "Pending", "restarts": 0},
    ]


def test_a_retry_created_in_the_same_second_is_the_newer_pod() -> None:
    retry = pod(0, "Pending", "2026-01-01T00:00:03", name="j-0-retry")
    first = pod(0, "Failed", "2026-01-01T00:00:03", name="j-0-first")
    for pods in ([retry, first], [first, retry]):
        assert status.workers(pods) == [
            {"index": 0, "pod": "j-0-retry", "phase": "Pending", "restarts": 1, "node": "n1"}
        ]


def test_a_worker_whose_last_pod_failed_counts_only_the_retries_before_it() -> None:
    pods = [pod(0, "Failed", "2026-01-01T00:00:01"), pod(0, "Failed", "2026-01-01T00:00:07")]
    assert status.workers(pods)[0] == {"index": 0, "pod": "j-0-07", "phase": "Failed", "restarts": 1, "node": "n1"}


def test_a_vanished_job_is_failed_and_keeps_its_last_restarts() -> None:
    gone = observe(vanished="j")
    assert gone["phase"] == "Failed"
    assert kinds(gone) == {
        "Accepted": ("True", "SpecAccepted"),
        "Created": ("True", "JobCreated"),
        "Running": ("False", "JobVanished"),
        "Failed": ("True", "JobVanished"),
    }
    failed = next(c for c in gone["conditions"] if c["type"] == "Failed")
    assert failed["message"].startswith("Job j was deleted before gpuwise saw it end")
    assert "restarts" not in gone and "completionTime" not in gone, "unknown: the last written values stay"
    assert status.created(gone) and not status.created(observe())


def test_phases() -> None:
    assert observe()["phase"] == "Pending"
    assert observe(problem=SpecProblem("InvalidSpec", "x"))["phase"] == "Invalid"
    running = observe(job=job(), pods=[pod(0, "Running", "t")])
    assert running["phase"] == "Running"
    assert kinds(running)["Running"] == ("True", "PodsRunning")
    done = observe(job=job(completionTime="t2", conditions=[{"type": "Complete", "status": "True"}]))
    assert (done["phase"], done["completionTime"]) == ("Succeeded", "t2")
    assert kinds(done)["Succeeded"] == ("True", "JobSucceeded")
    failed = observe(job=job(failed=3, conditions=[{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]))
    assert (failed["phase"], failed["restarts"]) == ("Failed", 3)
    assert kinds(failed)["Failed"] == ("True", "DeadlineExceeded")
    suspended = observe(job={"metadata": {"name": "j"}, "spec": {"suspend": True}}, suspend_requested=True)
    assert suspended["phase"] == "Suspended"
    assert kinds(suspended)["Suspended"] == ("True", "JobSuspended")


def test_a_job_gpuwise_suspended_for_idleness_says_so_until_it_resumes() -> None:
    said = "Suspended after 60 min idle (8.0 GPU-hours unused): 8 GPU(s) freed. Set spec.runPolicy.suspend: false."
    record = {"id": "suspend-1", "action": "Suspend", "state": "Done", "reason": "IdleReclaimed", "message": said}
    found = status.idle_reclaim({"actions": [{"action": "AdjustConfig", "state": "Done"}, record]})
    assert found == record
    reclaimed = found["message"]
    held = {"metadata": {"name": "j"}, "spec": {"suspend": True}}
    suspended = observe(job=held, suspend_requested=True, reclaimed=reclaimed)
    assert (suspended["phase"], kinds(suspended)["Suspended"]) == ("Suspended", ("True", "IdleReclaimed"))
    assert next(c for c in suspended["conditions"] if c["type"] == "Suspended")["message"] == said
    resuming = observe(job=held, suspend_requested=False, reclaimed=reclaimed)
    assert kinds(resuming)["Suspended"] == ("True", "JobSuspended"), "the user set suspend: false: resuming"
    assert status.idle_reclaim({"actions": [{**record, "state": "Verifying"}]}) is None
    assert status.idle_reclaim({}) is None


def test_an_immutable_change_keeps_the_running_phase() -> None:
    observed = observe(
        job=job(),
        pods=[pod(0, "Running", "t")],
        problem=SpecProblem("ImmutableFieldChanged", "spec.trainer.image ..."),
    )
    assert observed["phase"] == "Running"
    assert kinds(observed)["Accepted"] == ("False", "ImmutableFieldChanged")


def test_transition_time_moves_only_with_the_status() -> None:
    earlier = [{"type": "Running", "status": "False", "reason": "PodsPending", "lastTransitionTime": "T0"}]
    at = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    same = status.with_transition_times([{"type": "Running", "status": "False", "reason": "Other"}], earlier, at)
    assert same[0]["lastTransitionTime"] == "T0"
    moved = status.with_transition_times([{"type": "Running", "status": "True", "reason": "PodsRunning"}], earlier, at)
    assert moved[0]["lastTransitionTime"] == "2026-11-22T12:00:00Z"
    assert status.transitions(same, earlier) == same  # the reason changed: worth an Event
    assert status.transitions(earlier, earlier) == []


def test_parse_spec_names_bad_names_and_fields() -> None:
    _, problem = parse_spec({"metadata": {"name": "My_Job"}, "spec": {"trainer": {"image": "x"}}})
    assert problem is not None and problem.message.startswith("metadata.name 'My_Job' must be a DNS label")
    _, problem = parse_spec({"metadata": {"name": "ok"}, "spec": {"trainer": {"image": "x", "numNodes": -1}}})
    assert problem is not None and problem.message.startswith("spec.trainer.numNodes:")
    spec, problem = parse_spec({"metadata": {"name": "ok"}, "spec": {"trainer": {"image": "x"}}})
    assert problem is None and spec is not None


def test_changed_paths() -> None:
    assert changed_paths({"a": {"b": 1, "c": [1]}}, {"a": {"b": 2, "c": [1], "d": 0}}, "spec") == [
        "spec.a.b",
        "spec.a.d",
    ]


def test_a_job_owned_by_someone_else_is_a_conflict() -> None:
    owner = {
        "apiVersion": "gpuwise.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": "mine"},
    }
    spec = TrainingJobSpec.model_validate({"trainer": {"image": "x"}})
    ours = render_job(owner, spec, SidecarSettings())
    assert check_running_job(ours, owner, spec) is None
    theirs = {**ours, "metadata": {**ours["metadata"], "ownerReferences": [{"uid": "other"}]}}
    conflict = check_running_job(theirs, owner, spec)
    assert conflict is not None and conflict.reason == "OwnershipConflict"


def test_a_jobs_lock_is_one_while_in_use_and_not_kept_after() -> None:
    context = ReconcileContext(kube=None, settings=None)  # type: ignore[arg-type]  # only its locks are used

    async def second_waits_for_first() -> bool:
        async with context.lock("ml", "train"):
            second = asyncio.ensure_future(_take(context))
            await asyncio.sleep(0)
            waited = not second.done()
        await second
        return waited

    assert asyncio.run(second_waits_for_first()), "a second user of the job waits for the first"
    assert len(context._locks) == 0, "released by everyone: not kept for a job that may be gone"


async def _take(context: ReconcileContext) -> None:
    async with context.lock("ml", "train"):
        pass
