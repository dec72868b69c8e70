"""Kueue and gang scheduling, rendered: the contract each expects of a TrainingJob's Job (issue 18).

The schedulers cannot run here; these check what gpuwise writes for them (labels, annotations, the
suspend flag, the PodGroup) and what it reads back (a queued Job's status, its suspend left alone).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from gpuwise.api.overrides import JobOverrides
from gpuwise.api.trainingjob import TrainingJobSpec
from gpuwise.kube import queues
from gpuwise.kube.trainingjob import mutable_job_fields, parse_spec
from gpuwise.operator import status, workload
from gpuwise.operator.config import SidecarSettings

OWNER: dict[str, Any] = {
    "apiVersion": "gpuwise.io/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "llama", "namespace": "research", "uid": "u-1"},
}
QUEUED = {
    **OWNER,
    "metadata": {
        **OWNER["metadata"],
        "labels": {queues.QUEUE_LABEL: "team-a", queues.PRIORITY_CLASS_LABEL: "high", "other": "x"},
    },
}


def spec(pod: dict[str, Any] | None = None, **run_policy: Any) -> TrainingJobSpec:
    return TrainingJobSpec.model_validate(
        {"trainer": {"image": "img", "numNodes": 4}, "pod": pod or {}, "runPolicy": run_policy}
    )


# --- Kueue ------------------------------------------------------------------------------------


def test_a_queued_trainingjob_renders_a_suspended_job_with_its_kueue_labels() -> None:
    job = workload.render_job(QUEUED, spec(), SidecarSettings())
    assert job["spec"]["suspend"] is True, "created suspended: Kueue starts it on admission"
    labels = job["metadata"]["labels"]
    assert labels[queues.QUEUE_LABEL] == "team-a" and labels[queues.PRIORITY_CLASS_LABEL] == "high"
    assert "other" not in labels, "only Kueue's labels pass"
    plain = workload.render_job(OWNER, spec(), SidecarSettings())
    assert plain["spec"]["suspend"] is False and queues.QUEUE_LABEL not in plain["metadata"]["labels"]


def test_a_queued_jobs_suspend_never_follows_the_spec_or_an_action() -> None:
    """Neither to start it (around the queue) nor to hold it (Kueue would start it again)."""
    held = JobOverrides(suspend=True)
    assert "suspend" not in mutable_job_fields(spec(), held, queued=True)
    assert mutable_job_fields(spec(activeDeadlineSeconds=60), queued=True) == {"activeDeadlineSeconds": 60}
    assert mutable_job_fields(spec(), held)["suspend"] is True, "a Job without a queue is held as before"


def test_a_queued_trainingjob_cannot_ask_to_be_suspended() -> None:
    body = copy.deepcopy(QUEUED) | {"spec": {"trainer": {"image": "img"}, "runPolicy": {"suspend": True}}}
    parsed, problem = parse_spec(body)
    assert parsed is None and problem is not None and problem.reason == "InvalidSpec"
    assert problem.message.startswith("spec.runPolicy.suspend: Kueue decides when a TrainingJob in a queue runs")
    assert "spec.active" in problem.message, "says how to hold it instead"
    body["spec"]["runPolicy"]["suspend"] = False
    parsed, problem = parse_spec(body)
    assert parsed is not None and problem is None


def observe(job: dict[str, Any], pods: list[dict[str, Any]] | None = None) -> dict[str, tuple[str, str]]:
    observed = status.observe(
        job=job, pods=pods or [], num_nodes=1, suspend_requested=False, problem=None, generation=1
    )
    return {"phase": (observed["phase"], ""), **{c["type"]: (c["status"], c["reason"]) for c in observed["conditions"]}}


def test_a_suspended_queued_job_is_queued_then_running_once_admitted() -> None:
    job: dict[str, Any] = {
        "metadata": {"name": "llama", "labels": {queues.QUEUE_LABEL: "team-a"}},
        "spec": {"suspend": True},
    }
    waiting = observe(job)
    assert waiting["phase"] == ("Queued", "")
    assert waiting["Queued"] == ("True", "WaitingForAdmission")
    assert waiting["Running"] == ("False", "JobQueued")
    assert "Suspended" not in waiting, "waiting in a queue is not a suspension anyone asked for"
    admitted = copy.deepcopy(job)
    admitted["spec"]["suspend"] = False
    running_pod = {"metadata": {"name": "p", "labels": {"batch.kubernetes.io/job-completion-index": "0"}}}
    running = observe(admitted, [running_pod | {"status": {"phase": "Running"}}])
    assert running["phase"] == ("Running", "")
    assert running["Queued"] == ("False", "Admitted")
    preempted = observe(job | {"status": {"conditions": [{"type": "Suspended", "status": "True"}]}})
    assert preempted["phase"] == ("Queued", ""), "preempted by Kueue: back in the queue"


# --- gang scheduling --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gang", "api_version", "scheduler", "pod_labels", "pod_annotations", "group_spec"),
    [
        (
            {"scheduler": "Volcano", "queue": "research"},
            "scheduling.volcano.sh/v1beta1",
            "volcano",
            {},
            {"scheduling.k8s.io/group-name": "llama"},
            {"minMember": 4, "queue": "research", "priorityClassName": "train"},
        ),
        (
            {"scheduler": "Coscheduling"},
            "scheduling.x-k8s.io/v1alpha1",
            "scheduler-plugins-scheduler",
            {"scheduling.x-k8s.io/pod-group": "llama"},
            {},
            {"minMember": 4},
        ),
        (
            {"scheduler": "KAI", "queue": "research"},
            "scheduling.run.ai/v2alpha2",
            "kai-scheduler",
            {"kai.scheduler/queue": "research"},
            {"pod-group-name": "llama", "kai.scheduler/skip-podgrouper": "true"},
            {"minMember": 4, "queue": "research", "priorityClassName": "train"},
        ),
    ],
)
def test_each_gang_scheduler_gets_its_podgroup_and_pod_metadata(
    *,
    gang: dict[str, Any],
    api_version: str,
    scheduler: str,
    pod_labels: dict[str, str],
    pod_annotations: dict[str, str],
    group_spec: dict[str, Any],
) -> None:
    settings = spec({"gang": gang, "priorityClassName": "train", "labels": {"team": "nlp"}, "annotations": {"a": "b"}})
    group = workload.render_pod_group(OWNER, settings)
    assert group is not None
    assert (group["apiVersion"], group["kind"], group["metadata"]["name"]) == (api_version, "PodGroup", "llama")
    assert (
        group["metadata"]["ownerReferences"]
        == workload.render_job(OWNER, settings, SidecarSettings())["metadata"]["ownerReferences"]
    ), "owned by the TrainingJob, like the Job: it goes with it, not with a replaced Job"
    assert group["spec"] == group_spec, "minMember is numNodes: the rendezvous needs every worker"
    template = workload.render_job(OWNER, settings, SidecarSettings())["spec"]["template"]
    assert template["spec"]["schedulerName"] == scheduler
    assert pod_labels.items() <= template["metadata"]["labels"].items()
    assert template["metadata"]["labels"]["team"] == "nlp"
    assert template["metadata"]["annotations"] == {"a": "b", **pod_annotations}


def test_no_gang_no_podgroup_and_the_scheduler_name_passes_through() -> None:
    assert workload.render_pod_group(OWNER, spec()) is None
    template = workload.render_job(OWNER, spec({"schedulerName": "mine"}), SidecarSettings())["spec"]["template"]
    assert template["spec"]["schedulerName"] == "mine"
    named = spec({"gang": {"scheduler": "Coscheduling"}, "schedulerName": "coscheduler"})
    assert workload.render_job(OWNER, named, SidecarSettings())["spec"]["template"]["spec"]["schedulerName"] == (
        "coscheduler"
    ), "coscheduling runs under the name its deployment was given"


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        ({"gang": {"scheduler": "Volcano"}, "schedulerName": "default-scheduler"}, "schedulerName conflicts"),
        ({"gang": {"scheduler": "KAI"}}, "KAI Scheduler places a job only in a queue"),
        ({"gang": {"scheduler": "Coscheduling", "queue": "q"}}, "coscheduling has none"),
        ({"gang": {"scheduler": "Slurm"}}, "'Volcano', 'Coscheduling' or 'KAI'"),
    ],
)
def test_a_gang_that_cannot_work_is_refused_with_a_reason(pod: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        spec(pod)
    assert spec({"gang": {"scheduler": "Volcano"}, "schedulerName": "volcano"}).pod.scheduler() == "volcano"
