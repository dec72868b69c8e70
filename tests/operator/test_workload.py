"""Rendering a TrainingJob into its Job and Service, and the sidecar both injection paths share."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuwise.api.trainingjob import Instrumentation, TrainingJobSpec
from gpuwise.operator import workload
from gpuwise.operator.config import SidecarSettings
from gpuwise.operator.inject import gpu_container, inject_sidecar

OWNER = {
    "apiVersion": "gpuwise.io/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "llama", "namespace": "research", "uid": "u-1"},
}


def render(**trainer: Any) -> dict[str, Any]:
    spec = TrainingJobSpec.model_validate({"trainer": {"image": "img", **trainer}})
    return workload.render_job(OWNER, spec, SidecarSettings())


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_job_is_indexed_owned_and_labelled() -> None:
    job = render(numNodes=3)
    assert job["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "gpuwise.io/v1alpha1",
            "kind": "TrainingJob",
            "name": "llama",
            "uid": "u-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 3
    assert job["spec"]["template"]["metadata"]["labels"]["gpuwise.io/trainingjob"] == "llama"
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert "backoffLimit" not in job["spec"], "unset run policy keeps the Job's own default"


def test_user_env_resources_and_pod_settings_pass_through() -> None:
    spec = TrainingJobSpec.model_validate(
        {
            "trainer": {
                "image": "img",
                "env": [{"name": "LR", "value": "3e-4"}],
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}},
                "args": ["--fp8"],
            },
            "pod": {
                "nodeSelector": {"pool": "h100"},
                "serviceAccountName": "trainer",
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}}],
                "labels": {"team": "nlp"},
            },
            "runPolicy": {"backoffLimit": 2, "activeDeadlineSeconds": 3600},
        }
    )
    job = workload.render_job(OWNER, spec, SidecarSettings())
    pod = job["spec"]["template"]["spec"]
    trainer = pod["containers"][0]
    assert env(trainer)["LR"] == "3e-4"
    assert trainer["resources"] == {"limits": {"nvidia.com/gpu": 4}}
    assert trainer["args"] == ["--fp8"]
    assert pod["nodeSelector"] == {"pool": "h100"}
    assert pod["serviceAccountName"] == "trainer"
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}} in pod["volumes"]
    assert job["spec"]["template"]["metadata"]["labels"]["team"] == "nlp"
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (2, 3600)


def test_shm_size_mounts_a_memory_volume() -> None:
    pod = render(shmSize="8Gi")["spec"]["template"]["spec"]
    assert {"name": "gpuwise-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in pod["volumes"]
    assert {"name": "gpuwise-shm", "mountPath": "/dev/shm"} in pod["containers"][0]["volumeMounts"]


def test_applied_spec_annotation_records_the_immutable_sections() -> None:
    job = render(numNodes=2)
    applied = json.loads(job["metadata"]["annotations"]["gpuwise.io/applied-spec"])
    assert set(applied) == {"trainer", "pod", "telemetry"}
    assert applied["trainer"]["numNodes"] == 2


def test_service_is_headless_and_publishes_unready_workers() -> None:
    service = workload.render_service(OWNER)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["ports"][0]["port"] == 29500


@pytest.mark.parametrize(
    ("mode", "pythonpath"),
    [
        (Instrumentation.AUTO, "/var/run/gpuwise/python:/app"),
        (Instrumentation.MANUAL, "/var/run/gpuwise/python:/app"),
        (Instrumentation.DISABLED, "/app"),
    ],
)
def test_instrumentation_modes(mode: Instrumentation, pythonpath: str) -> None:
    pod = {"containers": [{"name": "t", "image": "i", "env": [{"name": "PYTHONPATH", "value": "/app"}]}]}
    injected = inject_sidecar(pod, settings=SidecarSettings(), instrumentation=mode)
    values = env(injected["containers"][0])
    assert values["GPUWISE_INSTRUMENT"] == mode.value.lower()
    assert values["GPUWISE_SOCKET"] == "/var/run/gpuwise/steps.sock"
    assert values["PYTHONPATH"] == pythonpath
    assert [e["name"] for e in injected["containers"][0]["env"]].count("PYTHONPATH") == 1


def test_sidecar_is_native_hardened_and_gates_the_trainer() -> None:
    settings = SidecarSettings(image="registry.local/gpuwise:1.2.3", startup_timeout_seconds=30)
    injected = inject_sidecar({"containers": [{"name": "t", "image": "i"}]}, settings=settings, sample_interval=0.5)
    sidecar = injected["initContainers"][0]
    assert sidecar["image"] == "registry.local/gpuwise:1.2.3"
    assert sidecar["restartPolicy"] == "Always"
    assert "--interval=0.5" in sidecar["args"]
    assert sidecar["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert sidecar["startupProbe"]["failureThreshold"] * sidecar["startupProbe"]["periodSeconds"] == 30
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True
    assert sidecar["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert sidecar["resources"]["limits"] == {"memory": "128Mi"}
    assert {"name": "gpuwise-runtime", "mountPath": "/var/run/gpuwise"} in injected["containers"][0]["volumeMounts"]


def field(path: str) -> dict[str, Any]:
    return {"fieldRef": {"fieldPath": path}}


def test_sidecar_knows_its_pod_and_shares_the_socket_dir_with_the_trainer() -> None:
    pod = render(numNodes=2)["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["initContainers"] if c["name"] == "gpuwise-sidecar")
    trainer = pod["containers"][0]
    # The downward API gives the sidecar what labels its series: pod, namespace, node, worker index.
    assert {k: v for k, v in env(sidecar).items() if k.startswith("GPUWISE_")} == {
        "GPUWISE_POD_NAME": field("metadata.name"),
        "GPUWISE_POD_NAMESPACE": field("metadata.namespace"),
        "GPUWISE_NODE_NAME": field("spec.nodeName"),
        "GPUWISE_WORKER_INDEX": field("metadata.annotations['batch.kubernetes.io/job-completion-index']"),
        "GPUWISE_TRAININGJOB": "llama",
        # Not from the downward API: the operator rendered the trainer, the GPUs' user.
        "GPUWISE_CONTAINER": "trainer",
    }
    assert trainer["name"] == "trainer"
    assert env(trainer)["RANK"] == env(sidecar)["GPUWISE_WORKER_INDEX"], "worker index = node rank"
    # One emptyDir, mounted by both at the directory of the socket the sidecar binds and the trainer sends to.
    assert [v for v in pod["volumes"] if v["name"] == "gpuwise-runtime"] == [
        {"name": "gpuwise-runtime", "emptyDir": {}}
    ]
    runtime = {"name": "gpuwise-runtime", "mountPath": "/var/run/gpuwise"}
    assert sidecar["volumeMounts"] == [runtime]
    assert trainer["volumeMounts"].count(runtime) == 1
    assert "--socket=/var/run/gpuwise/steps.sock" in sidecar["args"]
    assert env(trainer)["GPUWISE_SOCKET"] == "/var/run/gpuwise/steps.sock"
    assert "--instrument-dir=/var/run/gpuwise/python" in sidecar["args"]
    assert env(trainer)["PYTHONPATH"] == "/var/run/gpuwise/python"


def test_a_webhook_injected_sidecar_reads_its_trainingjob_from_the_pod_label() -> None:
    injected = inject_sidecar({"containers": [{"name": "t", "image": "i"}]}, settings=SidecarSettings())
    assert env(injected["initContainers"][0])["GPUWISE_TRAININGJOB"] == field(
        "metadata.labels['gpuwise.io/trainingjob']"
    )


def gpu(name: str, resource: str = "nvidia.com/gpu", amount: Any = 1, *, where: str = "limits") -> dict[str, Any]:
    return {"name": name, "image": "i", "resources": {where: {"cpu": "4", resource: amount}}}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        ({"containers": [{"name": "sidecar-proxy", "image": "envoy"}, gpu("pytorch")]}, "pytorch"),
        ({"containers": [gpu("pytorch", "nvidia.com/mig-3g.40gb")]}, "pytorch"),
        ({"containers": [gpu("pytorch", "nvidia.com/gpu.shared", "1", where="requests")]}, "pytorch"),
        # No GPU container: nothing to name.
        ({"containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]}, None),
        ({"containers": [gpu("a", amount=0), gpu("b", amount="0")]}, None),
        ({"containers": [gpu("nic-user", "nvidia.com/hostdev")]}, None),  # a NIC, not a GPU
        # Several: which one uses the GPU the series is about is unknown, so no guess.
        ({"containers": [gpu("trainer"), gpu("evaluator", "nvidia.com/mig-1g.10gb")]}, None),
        ({"initContainers": [gpu("warm-up")], "containers": [gpu("trainer")]}, None),
    ],
)
def test_a_webhook_injected_sidecar_names_the_one_gpu_container(pod: dict[str, Any], expected: str | None) -> None:
    sidecar = inject_sidecar(pod, settings=SidecarSettings())["initContainers"][0]
    assert env(sidecar).get("GPUWISE_CONTAINER") == expected
    assert gpu_container(pod) == expected
    # Exactly one such variable, or none: the sidecar leaves the label out rather than emit it empty.
    assert [e["name"] for e in sidecar["env"]].count("GPUWISE_CONTAINER") == (expected is not None)


def test_a_trainingjob_names_its_trainer_whatever_it_requests() -> None:
    for resources in ({}, {"limits": {"nvidia.com/mig-1g.10gb": 1}}):
        pod = render(resourcesPerNode=resources)["spec"]["template"]["spec"]
        assert env(pod["initContainers"][0])["GPUWISE_CONTAINER"] == "trainer"


def test_injection_is_idempotent_and_leaves_the_input_alone() -> None:
    pod = {
        "initContainers": [{"name": "fetch-data", "image": "busybox"}],
        "containers": [{"name": "t", "image": "i"}],
    }
    once = inject_sidecar(pod, settings=SidecarSettings())
    twice = inject_sidecar(once, settings=SidecarSettings())
    assert twice == once
    assert [c["name"] for c in once["initContainers"]] == ["gpuwise-sidecar", "fetch-data"]
    assert pod == {
        "initContainers": [{"name": "fetch-data", "image": "busybox"}],
        "containers": [{"name": "t", "image": "i"}],
    }
