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
