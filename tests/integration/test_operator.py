"""The real operator process against the Kubernetes emulator over HTTP.

The emulator runs no controllers, so the tests play the Job controller and the kubelet: they
write pods and Job status the way those would, and check what the operator makes of them.
"""

from __future__ import annotations

import pathlib
import subprocess
import time
from datetime import UTC, datetime
from typing import Any

import yaml

from gpuwise.api.kinds import ActionKind
from gpuwise.api.trainingjob import ActionRecord, ActionState
from tests.integration.conftest import Cluster, Operator
from tests.support import kubelet
from tests.support.waiting import eventually

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "trainingjob.yaml"
TJ_API = "gpuwise.io/v1alpha1"
RELEASE = '{"metadata":{"finalizers":null}}'


def manifest(name: str = "bert", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": TJ_API,
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"trainer": {"image": "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime", "numNodes": 2}},
    }
    body["spec"].update(spec)
    return body


def job_of(cluster: Cluster, name: str) -> dict[str, Any] | None:
    return cluster.get("batch/v1", "Job", name)


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def play_kubelet(cluster: Cluster, job: dict[str, Any], index: int, phase: str, node: str) -> None:
    """Create (or update) the pod the Job controller would make for one completion index."""
    pod = kubelet.indexed_pod(job, index, node)
    name = pod["metadata"]["name"]
    if cluster.get("v1", "Pod", name) is None:
        cluster.create(pod)
    cluster.patch("v1", "Pod", name, {"status": {"phase": phase}}, status=True)


def test_create_renders_job_service_and_status(cluster: Cluster, operator: Operator) -> None:
    cluster.create(manifest())
    job = eventually(lambda: job_of(cluster, "bert"), what="the Job")
    service = eventually(lambda: cluster.get("v1", "Service", "bert"), what="the Service")
    tj = cluster.trainingjob("bert")
    assert tj is not None
    owner = {"kind": "TrainingJob", "name": "bert", "uid": tj["metadata"]["uid"], "controller": True}
    for child in (job, service):
        assert owner.items() <= child["metadata"]["ownerReferences"][0].items()
        assert child["metadata"]["labels"]["gpuwise.io/trainingjob"] == "bert"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {
        "gpuwise.io/trainingjob": "bert",
        "app.kubernetes.io/managed-by": "gpuwise",
    }

    status = eventually(lambda: (cluster.trainingjob("bert") or {}).get("status"), what="a status")
    assert status["phase"] == "Pending"
    assert status["observedGeneration"] == 1
    by_type = {c["type"]: c for c in status["conditions"]}
    assert by_type["Accepted"]["status"] == "True"
    assert by_type["Created"]["reason"] == "JobCreated"
    assert by_type["Running"]["reason"] == "PodsPending"
    events = eventually(
        lambda: [e for e in cluster.list("v1", "Event") if e.get("reason") == "JobCreated"], what="an Event"
    )
    assert events[0]["involvedObject"]["name"] == "bert"


def test_multi_node_job_has_torchrun_env_and_native_sidecar(cluster: Cluster, operator: Operator) -> None:
    body = manifest()
    body["spec"]["trainer"].update(numNodes=4, numProcPerNode=8, env=[{"name": "MASTER_PORT", "value": "23456"}])
    cluster.create(body)
    job = eventually(lambda: job_of(cluster, "bert"), what="the Job")
    spec = job["spec"]
    assert (spec["completions"], spec["parallelism"], spec["completionMode"]) == (4, 4, "Indexed")
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == "bert"
    trainer = pod["containers"][0]
    env = env_of(trainer)
    index_ref = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert env["PET_NNODES"] == "4"
    assert env["PET_NPROC_PER_NODE"] == "8"
    assert env["WORLD_SIZE"] == "32"
    assert env["PET_NODE_RANK"] == index_ref
    assert env["RANK"] == index_ref
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "bert-0.bert.default.svc"
    assert env["PET_MASTER_PORT"] == "29500"
    assert env["MASTER_PORT"] == "23456", "the user's own value must win"
    assert env["GPUWISE_INSTRUMENT"] == "auto"
    assert env["PYTHONPATH"] == "/var/run/gpuwise/python"
    sidecar = pod["initContainers"][0]
    assert sidecar["name"] == "gpuwise-sidecar"
    assert sidecar["restartPolicy"] == "Always"
    assert {"name": "gpuwise-runtime", "emptyDir": {}} in pod["volumes"]


def test_invalid_spec_gets_a_condition_and_no_job(cluster: Cluster, operator: Operator) -> None:
    body = manifest("broken")
    body["spec"]["trainer"]["numNodes"] = 0
    body["spec"]["telemetry"] = {"instrumentation": "Off"}
    cluster.create(body)
    accepted = eventually(lambda: cluster.condition("broken", "Accepted"), what="the Accepted condition")
    assert accepted["status"] == "False"
    assert accepted["reason"] == "InvalidSpec"
    assert "spec.trainer.numNodes: Input should be greater than or equal to 1" in accepted["message"]
    assert "spec.telemetry.instrumentation" in accepted["message"]
    assert (cluster.trainingjob("broken") or {})["status"]["phase"] == "Invalid"
    warnings = eventually(
        lambda: [e for e in cluster.list("v1", "Event") if e.get("reason") == "InvalidSpec"], what="a Warning"
    )
    assert warnings[0]["type"] == "Warning"
    time.sleep(3)  # past a resync: still nothing created
    assert job_of(cluster, "broken") is None
    assert cluster.get("v1", "Service", "broken") is None


def test_a_spec_too_large_to_keep_on_its_job_gets_a_condition_and_no_job(cluster: Cluster, operator: Operator) -> None:
    """The CRD takes it (a TrainingJob may be up to 1.5 MiB), but the Job's applied-spec annotation
    would pass the API server's 256 KiB: say so instead of a Job refused on every resync."""
    body = manifest("huge")
    body["spec"]["trainer"]["env"] = [{"name": f"BLOB_{n}", "value": "x" * 65_536} for n in range(5)]
    cluster.create(body)
    accepted = eventually(lambda: cluster.condition("huge", "Accepted"), what="the Accepted condition")
    assert (accepted["status"], accepted["reason"]) == ("False", "SpecTooLarge")
    assert "over the API server's 256 KiB" in accepted["message"] and "ConfigMap" in accepted["message"]
    assert job_of(cluster, "huge") is None
    assert cluster.get("v1", "Service", "huge") is None


def test_a_spec_past_the_pod_security_level_gets_a_condition_and_no_job(cluster: Cluster, operator: Operator) -> None:
    """The default level is restricted: a hostPath volume and a root trainer are refused by name."""
    body = manifest("rooted", pod={"volumes": [{"name": "host", "hostPath": {"path": "/"}}]})
    body["spec"]["trainer"]["securityContext"] = {"runAsUser": 0}
    cluster.create(body)
    accepted = eventually(lambda: cluster.condition("rooted", "Accepted"), what="the Accepted condition")
    assert (accepted["status"], accepted["reason"]) == ("False", "PodSecurityViolation")
    assert "spec.pod.volumes[host].hostPath" in accepted["message"]
    assert "spec.trainer.securityContext.runAsUser" in accepted["message"]
    assert "set the operator's podSecurity to privileged first" in accepted["message"]
    assert (cluster.trainingjob("rooted") or {})["status"]["phase"] == "Invalid"
    assert job_of(cluster, "rooted") is None
    assert cluster.get("v1", "Service", "rooted") is None


def test_operator_restart_creates_nothing_twice(cluster: Cluster, operator: Operator) -> None:
    cluster.create(manifest())
    job = eventually(lambda: job_of(cluster, "bert"), what="the Job")
    operator.restart()
    time.sleep(5)  # start-up, resume handlers and at least one resync
    assert operator.process is not None and operator.process.poll() is None
    attempts = cluster.emulator.emulator.create_attempts  # type: ignore[union-attr]
    assert attempts["batch/v1/jobs default/bert"] == 1
    assert attempts["v1/services default/bert"] == 1
    again = job_of(cluster, "bert")
    assert again is not None and again["metadata"]["uid"] == job["metadata"]["uid"]
    assert len(cluster.list("batch/v1", "Job")) == 1


def test_status_follows_pods_and_job(cluster: Cluster, operator: Operator) -> None:
    cluster.create(manifest())
    job = eventually(lambda: job_of(cluster, "bert"), what="the Job")
    play_kubelet(cluster, job, 0, "Running", "gpu-node-a")
    play_kubelet(cluster, job, 1, "Pending", "gpu-node-b")
    # Running as soon as worker 0 runs; worker 1's pod may reach status a reconcile later.
    status = eventually(
        lambda: (
            (s := (cluster.trainingjob("bert") or {}).get("status", {})).get("phase") == "Running"
            and len(s.get("workers") or []) == 2
            and s
        ),
        what="phase Running with both workers",
    )
    assert status["workers"] == [
        {"index": 0, "pod": "bert-0-abcde", "node": "gpu-node-a", "phase": "Running", "restarts": 0},
        {"index": 1, "pod": "bert-1-abcde", "node": "gpu-node-b", "phase": "Pending", "restarts": 0},
    ]
    running = next(c for c in status["conditions"] if c["type"] == "Running")
    assert running["message"] == "1 of 2 workers running."

    cluster.patch(
        "batch/v1",
        "Job",
        "bert",
        {
            "status": {
                "startTime": "2026-11-22T10:00:00Z",
                "completionTime": "2026-11-22T12:00:00Z",
                "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-22T12:00:00Z"}],
            }
        },
        status=True,
    )
    status = eventually(
        lambda: (s := (cluster.trainingjob("bert") or {}).get("status", {})).get("phase") == "Succeeded" and s,
        what="phase Succeeded",
    )
    assert status["startTime"] == "2026-11-22T10:00:00Z"
    assert status["completionTime"] == "2026-11-22T12:00:00Z"
    assert next(c for c in status["conditions"] if c["type"] == "Succeeded")["status"] == "True"


def test_failed_job_is_reported_with_its_reason(cluster: Cluster, operator: Operator) -> None:
    cluster.create(manifest())
    eventually(lambda: job_of(cluster, "bert"), what="the Job")
    cluster.patch(
        "batch/v1",
        "Job",
        "bert",
        {
            "status": {
                "failed": 4,
                "conditions": [
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "BackoffLimitExceeded",
                        "message": "Job has reached the specified backoff limit",
                        "lastTransitionTime": "2026-11-22T12:00:00Z",
                    }
                ],
            }
        },
        status=True,
    )
    failed = eventually(lambda: cluster.condition("bert", "Failed"), what="the Failed condition")
    assert failed["reason"] == "BackoffLimitExceeded"
    status = (cluster.trainingjob("bert") or {})["status"]
    assert (status["phase"], status["restarts"]) == ("Failed", 4)


def created(cluster: Cluster, name: str = "bert") -> dict[str, Any]:
    """The Job, once the TrainingJob's status says it was created."""
    eventually(lambda: (c := cluster.condition(name, "Created")) and c["status"] == "True", what="Created=True")
    job = job_of(cluster, name)
    assert job is not None
    return job


def test_a_job_deleted_while_the_operator_was_down_is_not_run_again(cluster: Cluster, operator: Operator) -> None:
    cluster.create(manifest(runPolicy={"ttlSecondsAfterFinished": 60}))
    created(cluster)
    operator.stop()
    # The Job finished and its TTL removed it while no operator watched: status still says Pending.
    cluster.delete("batch/v1", "Job", "bert")
    operator.start()
    failed = eventually(
        lambda: (c := cluster.condition("bert", "Failed")) and c["status"] == "True" and c, what="Failed=True"
    )
    assert failed["reason"] == "JobVanished"
    assert failed["message"].startswith("Job bert was deleted before gpuwise saw it end")
    assert "delete and re-create the TrainingJob" in failed["message"]
    status = (cluster.trainingjob("bert") or {})["status"]
    assert status["phase"] == "Failed"
    by_type = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert by_type["Running"] == ("False", "JobVanished")
    warnings = eventually(
        lambda: [
            e for e in cluster.list("v1", "Event") if (e.get("reason"), e.get("type")) == ("JobVanished", "Warning")
        ],
        what="a Warning",
    )
    assert warnings[0]["involvedObject"]["name"] == "bert"
    assert warnings[0]["message"] == failed["message"]
    time.sleep(2.5)  # past a resync (2 s): still no second run
    assert job_of(cluster, "bert") is None
    assert cluster.emulator.emulator.create_attempts["batch/v1/jobs default/bert"] == 1  # type: ignore[union-attr]


def test_a_job_the_action_runner_replaces_is_created_again(cluster: Cluster, operator: Operator) -> None:
    cluster.create(manifest())
    first = created(cluster)
    # What the runner writes before it deletes the Job to restart it (gpuwise.act.runner).
    at = datetime.now(tz=UTC)
    record = ActionRecord(
        id="adjustconfig-1",
        action=ActionKind.ADJUST_CONFIG,
        state=ActionState.APPLYING,
        reason="CheckpointAcknowledged",
        started_at=at,
        updated_at=at,
        restart=True,
    )
    cluster.patch(TJ_API, "TrainingJob", "bert", {"status": {"actions": [record.to_k8s()]}}, status=True)
    cluster.delete("batch/v1", "Job", "bert")
    second = eventually(
        lambda: (j := job_of(cluster, "bert")) and j["metadata"]["uid"] != first["metadata"]["uid"] and j,
        what="the replacement Job",
    )
    assert second["metadata"]["ownerReferences"] == first["metadata"]["ownerReferences"]
    assert cluster.emulator.emulator.create_attempts["batch/v1/jobs default/bert"] == 2  # type: ignore[union-attr]
    assert (cluster.trainingjob("bert") or {})["status"]["phase"] == "Pending"
    assert (cluster.condition("bert", "Failed") or {}).get("reason") != "JobVanished"


def test_suspend_and_resume(cluster: Cluster, operator: Operator) -> None:
    cluster.create(manifest())
    eventually(lambda: job_of(cluster, "bert"), what="the Job")
    cluster.patch(TJ_API, "TrainingJob", "bert", {"spec": {"runPolicy": {"suspend": True}}})
    eventually(lambda: (job_of(cluster, "bert") or {}).get("spec", {}).get("suspend") is True, what="Job suspended")
    eventually(
        lambda: (cluster.trainingjob("bert") or {}).get("status", {}).get("phase") == "Suspended",
        what="phase Suspended",
    )
    cluster.patch(TJ_API, "TrainingJob", "bert", {"spec": {"runPolicy": {"suspend": False}}})
    eventually(lambda: (job_of(cluster, "bert") or {}).get("spec", {}).get("suspend") is False, what="Job resumed")
    eventually(
        lambda: (cluster.trainingjob("bert") or {}).get("status", {}).get("phase") == "Pending",
        what="phase Pending again",
    )


def test_changing_an_immutable_field_is_refused_with_a_condition(cluster: Cluster, operator: Operator) -> None:
    cluster.create(manifest())
    job = eventually(lambda: job_of(cluster, "bert"), what="the Job")
    cluster.patch(TJ_API, "TrainingJob", "bert", {"spec": {"trainer": {"image": "pytorch/pytorch:latest"}}})
    accepted = eventually(
        lambda: (c := cluster.condition("bert", "Accepted")) and c["status"] == "False" and c,
        what="Accepted=False",
    )
    assert accepted["reason"] == "ImmutableFieldChanged"
    assert accepted["message"].startswith("spec.trainer.image cannot change while the job exists")
    kept = job_of(cluster, "bert")
    assert kept is not None
    assert (
        kept["spec"]["template"]["spec"]["containers"][0]["image"]
        == job["spec"]["template"]["spec"]["containers"][0]["image"]
    )
    # Reverting the change makes the spec accepted again.
    cluster.patch(
        TJ_API,
        "TrainingJob",
        "bert",
        {"spec": {"trainer": {"image": manifest()["spec"]["trainer"]["image"]}}},
    )
    eventually(lambda: (c := cluster.condition("bert", "Accepted")) and c["status"] == "True", what="Accepted=True")


def test_deleting_the_trainingjob_removes_what_it_owns(cluster: Cluster, operator: Operator) -> None:
    cluster.create(manifest())
    eventually(lambda: job_of(cluster, "bert"), what="the Job")
    eventually(lambda: cluster.get("v1", "Service", "bert"), what="the Service")
    cluster.delete(TJ_API, "TrainingJob", "bert")
    eventually(
        lambda: job_of(cluster, "bert") is None and cluster.get("v1", "Service", "bert") is None,
        what="the Job and Service to go",
    )
    time.sleep(3)  # a resync later, nothing comes back
    assert job_of(cluster, "bert") is None
    assert operator.process is not None and operator.process.poll() is None


def kubectl(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", *args], env=cluster.emulator.client_env(), capture_output=True, text=True, timeout=60, check=False
    )


def test_kubectl_creates_the_example(cluster: Cluster, operator: Operator) -> None:
    result = kubectl(cluster, "create", "-f", str(EXAMPLE), "--validate=false")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "trainingjob.gpuwise.io/resnet50 created"
    job = eventually(lambda: job_of(cluster, "resnet50"), what="the example's Job")
    example = yaml.safe_load(EXAMPLE.read_text())
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    assert trainer["resources"] == example["spec"]["trainer"]["resourcesPerNode"]
    assert {"name": "gpuwise-shm", "mountPath": "/dev/shm"} in trainer["volumeMounts"]
    assert job["spec"]["backoffLimit"] == 3

    def kubectl_phase() -> str:
        got = kubectl(cluster, "get", "tj", "resnet50", "-n", "default", "-o", "jsonpath={.status.phase}")
        assert got.returncode == 0, got.stderr
        return got.stdout

    eventually(lambda: kubectl_phase() == "Pending", interval=0.5, what="kubectl to show phase Pending")


def test_without_the_operator_deletion_waits_for_the_finalizer_the_readme_says_how_to_remove(
    cluster: Cluster, operator: Operator
) -> None:
    cluster.create(manifest())
    created(cluster)
    # kopf's per-object timers (resync, evaluation) need it to stop them before the object goes.
    eventually(
        lambda: (cluster.trainingjob("bert") or {})["metadata"].get("finalizers") == ["gpuwise.io/finalizer"],
        what="kopf's finalizer",
    )
    operator.stop()
    deleted = kubectl(cluster, "delete", "tj", "bert", "-n", "default", "--wait=false")
    assert deleted.returncode == 0, deleted.stderr
    held = cluster.trainingjob("bert")
    assert held is not None and held["metadata"]["deletionTimestamp"], "no operator: the finalizer holds it"
    assert job_of(cluster, "bert") is not None
    # The command README.md gives ("On a cluster", Deletion).
    patched = kubectl(cluster, "patch", "tj", "bert", "-n", "default", "--type=merge", "-p", RELEASE)
    assert patched.returncode == 0, patched.stderr
    eventually(lambda: cluster.trainingjob("bert") is None, what="the TrainingJob to go")
    eventually(lambda: job_of(cluster, "bert") is None, what="its Job to follow")
    assert f"kubectl patch tj NAME --type=merge -p '{RELEASE}'" in (ROOT / "README.md").read_text()
