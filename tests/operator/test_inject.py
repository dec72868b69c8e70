"""The checkpoint-request file every injected trainer gets, on both injection paths."""

from __future__ import annotations

from typing import Any

import pytest

from gpuwise.api.trainingjob import Instrumentation, TrainingJobSpec
from gpuwise.operator import workload
from gpuwise.operator.config import SidecarSettings
from gpuwise.operator.inject import inject_sidecar

PODINFO = {
    "name": "gpuwise-podinfo",
    "downwardAPI": {
        "items": [
            {
                "path": "checkpoint-request",
                "fieldRef": {"fieldPath": "metadata.annotations['gpuwise.io/checkpoint-request']"},
            }
        ]
    },
}
MOUNT = {"name": "gpuwise-podinfo", "mountPath": "/etc/gpuwise/podinfo", "readOnly": True}
FILE = {"name": "GPUWISE_CHECKPOINT_REQUEST_FILE", "value": "/etc/gpuwise/podinfo/checkpoint-request"}


def trainers_see_the_request(pod: dict[str, Any]) -> None:
    assert [v for v in pod["volumes"] if v["name"] == "gpuwise-podinfo"] == [PODINFO]
    for container in pod["containers"]:
        assert container["volumeMounts"].count(MOUNT) == 1, container["name"]
        assert container["env"].count(FILE) == 1, container["name"]
    sidecar = pod["initContainers"][0]
    assert all(m["name"] != "gpuwise-podinfo" for m in sidecar["volumeMounts"]), "only trainers read requests"


@pytest.mark.parametrize("mode", list(Instrumentation))
def test_every_container_gets_the_request_file_once(mode: Instrumentation) -> None:
    pod = {
        "containers": [
            {"name": "trainer", "image": "i", "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
            {"name": "evaluator", "image": "i"},
        ],
        "volumes": [{"name": "data", "emptyDir": {}}],
    }
    once = inject_sidecar(pod, settings=SidecarSettings(), instrumentation=mode)
    trainers_see_the_request(once)
    trainers_see_the_request(inject_sidecar(once, settings=SidecarSettings(), instrumentation=mode))
    assert {"name": "data", "mountPath": "/data"} in once["containers"][0]["volumeMounts"]
    assert [v["name"] for v in once["volumes"]] == ["data", "gpuwise-runtime", "gpuwise-podinfo"]


def test_a_trainingjob_worker_gets_the_request_file() -> None:
    spec = TrainingJobSpec.model_validate({"trainer": {"image": "img", "numNodes": 2}, "checkpoint": {"enabled": True}})
    owner = {"metadata": {"name": "llama", "namespace": "research", "uid": "u-1"}}
    job = workload.render_job(
        {"apiVersion": "gpuwise.io/v1alpha1", "kind": "TrainingJob", **owner}, spec, SidecarSettings()
    )
    trainers_see_the_request(job["spec"]["template"]["spec"])


def test_a_request_file_the_user_set_is_replaced() -> None:
    """The file is where the operator's annotation lands; another path would never see a request."""
    pod = {"containers": [{"name": "t", "image": "i", "env": [{**FILE, "value": "/tmp/elsewhere"}]}]}
    trainers_see_the_request(inject_sidecar(pod, settings=SidecarSettings()))


POD_GPUS_DIR = {"name": "GPUWISE_POD_GPUS_DIR", "value": "/var/run/gpuwise/pod-gpus"}


def sidecar_args(pod: dict[str, Any]) -> list[str]:
    sidecar = pod["initContainers"][0]
    assert sidecar["name"] == "gpuwise-sidecar"
    args: list[str] = sidecar["args"]
    return args


def test_a_trainingjob_sidecar_knows_how_many_gpus_the_trainer_requested() -> None:
    spec = TrainingJobSpec.model_validate(
        {"trainer": {"image": "img", "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}}}
    )
    owner = {"metadata": {"name": "llama", "namespace": "research", "uid": "u-1"}}
    job = workload.render_job(
        {"apiVersion": "gpuwise.io/v1alpha1", "kind": "TrainingJob", **owner}, spec, SidecarSettings()
    )
    pod = job["spec"]["template"]["spec"]
    args = sidecar_args(pod)
    assert "--pod-gpus-dir=/var/run/gpuwise/pod-gpus" in args
    assert "--requested-gpus=2" in args
    assert all(container["env"].count(POD_GPUS_DIR) == 1 for container in pod["containers"])


def test_the_webhook_passes_the_one_gpu_containers_whole_gpus_only() -> None:
    def pod(*containers: dict[str, Any]) -> dict[str, Any]:
        return inject_sidecar({"containers": list(containers)}, settings=SidecarSettings())

    gpus = {"name": "train", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
    mig = {"name": "train", "image": "i", "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}}
    plain = {"name": "web", "image": "i"}
    assert "--requested-gpus=4" in sidecar_args(pod(gpus, plain))
    for without in (pod(plain), pod(mig), pod(gpus, {**gpus, "name": "other"})):
        args = sidecar_args(without)
        assert "--pod-gpus-dir=/var/run/gpuwise/pod-gpus" in args, "trainers may still name their GPUs"
        assert not [arg for arg in args if arg.startswith("--requested-gpus")], "no count: never a guess"
