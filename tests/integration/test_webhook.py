"""The mutating webhook of the real operator: the sidecar for pods that are not TrainingJobs."""

from __future__ import annotations

import base64
import copy
import json
import urllib.request
from typing import Any

import jsonpatch
import pytest

from tests.integration.conftest import Cluster, Operator
from tests.integration.test_operator import env_of
from tests.support.waiting import eventually, free_port


@pytest.fixture
def webhook_port() -> int:
    return free_port()


@pytest.fixture
def operator_args(webhook_port: int) -> list[str]:
    return [f"--webhook-port={webhook_port}", "--webhook-insecure", "--webhook-host=127.0.0.1", "--webhook-managed"]


def admission_review(pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0df28fbd-5f5f-11e8-bc74-36e6bb280816",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": "default",
            "name": pod["metadata"]["name"],
            "object": pod,
            "userInfo": {"username": "tester"},
            "dryRun": False,
        },
    }


def test_webhook_injects_the_sidecar_into_labelled_pods(
    cluster: Cluster, operator: Operator, webhook_port: int
) -> None:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "pytorchjob-worker-0",
            "namespace": "default",
            "labels": {"gpuwise.io/inject": "true", "gpuwise.io/trainingjob": "pytorchjob"},
        },
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": "pytorch/pytorch:latest",
                    "env": [{"name": "PYTHONPATH", "value": "/workspace"}],
                    "resources": {"limits": {"nvidia.com/gpu": 8}},
                }
            ]
        },
    }

    def review(obj: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{webhook_port}/inject-sidecar",
            data=json.dumps(admission_review(obj)).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answer: dict[str, Any] = json.load(response)["response"]
        return answer

    answer = eventually(lambda: _try(review, pod), timeout=30, what="the webhook to answer")
    assert answer["allowed"] is True
    mutated = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(answer["patch"])))
    sidecar = mutated["spec"]["initContainers"][0]
    assert (sidecar["name"], sidecar["restartPolicy"]) == ("gpuwise-sidecar", "Always")
    assert env_of(sidecar)["GPUWISE_TRAININGJOB"] == {
        "fieldRef": {"fieldPath": "metadata.labels['gpuwise.io/trainingjob']"}
    }
    assert env_of(sidecar)["GPUWISE_CONTAINER"] == "pytorch", "the one container requesting GPUs"
    env = env_of(mutated["spec"]["containers"][0])
    assert env["PYTHONPATH"] == "/var/run/gpuwise/python:/workspace"
    # The checkpoint handshake: the pod's request annotation reaches the trainer as a file.
    assert env["GPUWISE_CHECKPOINT_REQUEST_FILE"] == "/etc/gpuwise/podinfo/checkpoint-request"
    podinfo = {"name": "gpuwise-podinfo", "mountPath": "/etc/gpuwise/podinfo", "readOnly": True}
    assert podinfo in mutated["spec"]["containers"][0]["volumeMounts"]
    assert "gpuwise-podinfo" in [volume["name"] for volume in mutated["spec"]["volumes"]]
    assert mutated["metadata"]["annotations"]["gpuwise.io/sidecar-injected"] == "true"
    # Passing the webhook twice adds nothing.
    again = review(mutated)
    assert "patch" not in again or json.loads(base64.b64decode(again["patch"])) == []

    unlabelled = copy.deepcopy(pod)
    unlabelled["metadata"]["labels"] = {}
    assert "patch" not in review(unlabelled)

    wrong = copy.deepcopy(pod)
    wrong["metadata"]["annotations"] = {"gpuwise.io/instrumentation": "Off"}
    refused = review(wrong)
    assert refused["allowed"] is False
    assert "gpuwise.io/instrumentation='Off' is not one of: Auto, Manual, Disabled" in refused["status"]["message"]


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except OSError:
        return None


def test_managed_configuration_selects_only_labelled_pods_and_fails_open(cluster: Cluster, operator: Operator) -> None:
    def injection_webhooks() -> list[dict[str, Any]]:
        configs = cluster.list("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", namespace=None)
        return [w for c in configs for w in c.get("webhooks") or [] if "inject-sidecar" in w["name"]]

    # kopf writes the configuration once its webhook server is up, which a busy machine delays.
    (webhook,) = eventually(injection_webhooks, timeout=60, what="the managed webhook configuration")
    assert webhook["objectSelector"] == {
        "matchExpressions": [{"key": "gpuwise.io/inject", "operator": "In", "values": ["true"]}]
    }
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["rules"][0]["operations"] == ["CREATE"]
    assert webhook["rules"][0]["resources"] == ["pods"]
