"""Kueue and gang scheduling with the real operator against the emulator (issue 18).

Neither Kueue nor the gang schedulers run here: the test plays Kueue (it admits a Job by
unsuspending it, adding a flavor's nodeSelector as Kueue does) and checks what the operator
leaves for the schedulers (the PodGroups, the pods' scheduler names, labels and annotations).
"""

from __future__ import annotations

import functools
import time
from typing import Any

from tests.integration.conftest import Cluster, Operator
from tests.integration.test_operator import job_of, manifest, play_kubelet
from tests.support.waiting import eventually

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
RESYNC = 3  # seconds: past the operator's 2 s resync in these tests


def phase_of(cluster: Cluster, name: str) -> str | None:
    phase: str | None = ((cluster.trainingjob(name) or {}).get("status") or {}).get("phase")
    return phase


def test_a_queued_job_waits_for_kueue_and_gpuwise_keeps_its_hands_off(cluster: Cluster, operator: Operator) -> None:
    body = manifest()
    body["metadata"]["labels"] = {QUEUE_LABEL: "team-a"}
    cluster.create(body)
    job = eventually(lambda: job_of(cluster, "bert"), what="the Job")
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    eventually(lambda: phase_of(cluster, "bert") == "Queued", what="phase Queued")
    queued = cluster.condition("bert", "Queued")
    assert queued is not None and (queued["status"], queued["reason"]) == ("True", "WaitingForAdmission")
    time.sleep(RESYNC)
    assert (job_of(cluster, "bert") or {})["spec"]["suspend"] is True, "gpuwise never unsuspends a queued Job"

    # Kueue admits it: unsuspends the Job and adds its flavor's nodeSelector to the pod template.
    admitted = {"spec": {"suspend": False, "template": {"spec": {"nodeSelector": {"flavor": "h100"}}}}}
    cluster.patch("batch/v1", "Job", "bert", admitted)
    job = job_of(cluster, "bert") or {}
    for index in (0, 1):
        play_kubelet(cluster, job, index, "Running", f"node-{index}")
    eventually(lambda: phase_of(cluster, "bert") == "Running", what="phase Running")
    queued = cluster.condition("bert", "Queued")
    assert queued is not None and (queued["status"], queued["reason"]) == ("False", "Admitted")
    time.sleep(RESYNC)
    job = job_of(cluster, "bert") or {}
    assert job["spec"]["suspend"] is False, "nor suspends it again: Kueue preempts, not gpuwise"
    assert (cluster.condition("bert", "Accepted") or {})["status"] == "True", "Kueue's nodeSelector is no drift"

    # Kueue preempts it: back in the queue.
    cluster.patch("batch/v1", "Job", "bert", {"spec": {"suspend": True}})
    eventually(lambda: phase_of(cluster, "bert") == "Queued", what="phase Queued after preemption")


def test_a_queued_job_refuses_runpolicy_suspend(cluster: Cluster, operator: Operator) -> None:
    body = manifest("held", runPolicy={"suspend": True})
    body["metadata"]["labels"] = {QUEUE_LABEL: "team-a"}
    cluster.create(body)
    accepted = eventually(lambda: cluster.condition("held", "Accepted"), what="the Accepted condition")
    assert (accepted["status"], accepted["reason"]) == ("False", "InvalidSpec")
    assert accepted["message"].startswith("spec.runPolicy.suspend: Kueue decides")
    assert job_of(cluster, "held") is None


GANGS: dict[str, tuple[dict[str, Any], str, str, dict[str, str], dict[str, str]]] = {
    # TrainingJob name: (spec.pod.gang, PodGroup apiVersion, schedulerName, pod labels, pod annotations)
    "volcano": (
        {"scheduler": "Volcano", "queue": "research"},
        "scheduling.volcano.sh/v1beta1",
        "volcano",
        {},
        {"scheduling.k8s.io/group-name": "volcano"},
    ),
    "cosched": (
        {"scheduler": "Coscheduling"},
        "scheduling.x-k8s.io/v1alpha1",
        "scheduler-plugins-scheduler",
        {"scheduling.x-k8s.io/pod-group": "cosched"},
        {},
    ),
    "kai": (
        {"scheduler": "KAI", "queue": "research"},
        "scheduling.run.ai/v2alpha2",
        "kai-scheduler",
        {"kai.scheduler/queue": "research"},
        {"pod-group-name": "kai", "kai.scheduler/skip-podgrouper": "true"},
    ),
}


def test_each_gang_scheduler_gets_a_podgroup_of_every_worker(cluster: Cluster, operator: Operator) -> None:
    for name, (gang, *_) in GANGS.items():
        body = manifest(name, pod={"gang": gang})
        body["spec"]["trainer"]["numNodes"] = 3
        cluster.create(body)
    for name, (_, api_version, scheduler, pod_labels, pod_annotations) in GANGS.items():
        job = eventually(functools.partial(job_of, cluster, name), what=f"the {name} Job")
        group = cluster.get(api_version, "PodGroup", name)
        assert group is not None, f"the {name} PodGroup, made before its Job"
        assert group["spec"]["minMember"] == 3
        uid = (cluster.trainingjob(name) or {})["metadata"]["uid"]
        assert group["metadata"]["ownerReferences"][0]["uid"] == uid, "owned by the TrainingJob"
        template = job["spec"]["template"]
        assert template["spec"]["schedulerName"] == scheduler
        assert pod_labels.items() <= template["metadata"]["labels"].items()
        assert pod_annotations.items() <= (template["metadata"].get("annotations") or {}).items()
    cluster.delete("gpuwise.io/v1alpha1", "TrainingJob", "kai")
    eventually(lambda: cluster.get(GANGS["kai"][1], "PodGroup", "kai") is None, what="the PodGroup gone with its job")
