"""The chart's ValidatingAdmissionPolicy, run: the operator may change one annotation of a pod.

Enforce grants `patch` on pods (the checkpoint request); RBAC cannot narrow that to one
annotation, so the chart ships a policy that does (issue 20: least privilege). No API server runs
here, so this test plays its part: it renders the chart with Helm, then evaluates the policy's
match condition and validations with cel-python on the pod before and after each change, as the
API server would on an UPDATE. The changes include the operator's own (the checkpoint request
and its withdrawal, applied as the merge patches `gpuwise.act.checkpoint` sends).
"""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from gpuwise import wiring
from gpuwise.api.trainingjob import TrainingJobSpec
from gpuwise.operator.config import SidecarSettings
from gpuwise.operator.workload import pod_spec
from tests.chart.support import NAMESPACE, RELEASE, find, one, render

ENV = celpy.Environment()
OPERATOR = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-gpuwise"
KEY = wiring.ANNOTATION_CHECKPOINT_REQUEST


def policy(values: dict[str, Any]) -> dict[str, Any] | None:
    found = find(render(values), "ValidatingAdmissionPolicy")
    return found[0] if found else None


def holds(expression: str, old: dict[str, Any], new: dict[str, Any], user: str) -> bool:
    activation = {
        "object": json_to_cel(new),
        "oldObject": json_to_cel(old),
        "request": json_to_cel({"userInfo": {"username": user}, "operation": "UPDATE"}),
    }
    try:
        result = ENV.program(ENV.compile(expression)).evaluate(activation)
    except CELEvalError:
        return False  # the API server refuses a request whose validation cannot be evaluated
    return isinstance(result, celtypes.BoolType) and bool(result)


def admitted(rules: dict[str, Any], old: dict[str, Any], new: dict[str, Any], user: str = OPERATOR) -> bool:
    """Whether the API server lets this UPDATE through, the policy bound with Deny."""
    spec = rules["spec"]
    if not all(holds(c["expression"], old, new, user) for c in spec["matchConditions"]):
        return True  # not the operator: the policy does not apply
    return all(holds(v["expression"], old, new, user) for v in spec["validations"])


def merged(doc: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`doc` after a JSON merge patch (RFC 7386), as the API server applies the operator's."""
    out = copy.deepcopy(doc)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def worker_pod(**annotations: str) -> dict[str, Any]:
    """A TrainingJob's worker pod as the operator renders it, sidecar and all."""
    spec = TrainingJobSpec.model_validate(
        {"trainer": {"image": "pytorch/pytorch:2.4.0", "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}}}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "bert-0-x1",
            "namespace": "ml",
            "labels": {wiring.LABEL_TRAININGJOB: "bert", "app": "bert"},
            "annotations": {wiring.JOB_COMPLETION_INDEX_ANNOTATION: "0", **annotations},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "bert", "uid": "u1"}],
        },
        "spec": pod_spec("bert", "ml", spec, SidecarSettings()),
    }


@pytest.fixture(scope="module")
def rules() -> dict[str, Any]:
    found = policy({"actions": {"enforce": True}})
    assert found is not None
    return found


REQUEST = {"metadata": {"annotations": {KEY: "adjustconfig-1"}}}
WITHDRAW = {"metadata": {"annotations": {KEY: None}}}


def test_the_policy_comes_with_enforce_and_is_bound_to_deny() -> None:
    assert policy({}) is None, "no pod patch granted, nothing to narrow"
    assert policy({"actions": {"enforce": True, "podPatchPolicy": False}}) is None
    docs = render({"actions": {"enforce": True}})
    vap = one(docs, "ValidatingAdmissionPolicy")
    binding = one(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
    assert vap["spec"]["failurePolicy"] == "Fail"
    assert vap["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["UPDATE"]


def test_the_operator_s_own_changes_pass(rules: dict[str, Any]) -> None:
    pod = worker_pod()
    requested = merged(pod, REQUEST)
    assert admitted(rules, pod, requested), "the checkpoint request"
    assert admitted(rules, requested, merged(requested, {"metadata": {"annotations": {KEY: "adjustconfig-2"}}}))
    assert admitted(rules, requested, merged(requested, WITHDRAW)), "its withdrawal"
    bare = worker_pod()
    del bare["metadata"]["annotations"]
    assert admitted(rules, bare, merged(bare, REQUEST)), "a pod without any annotation yet"


@pytest.mark.parametrize(
    "change",
    [
        {"metadata": {"annotations": {"team": "b"}}},
        {"metadata": {"annotations": {wiring.JOB_COMPLETION_INDEX_ANNOTATION: "3"}}},
        {"metadata": {"annotations": {wiring.JOB_COMPLETION_INDEX_ANNOTATION: None}}},
        {"metadata": {"labels": {"app": "other"}}},
        {"metadata": {"labels": {wiring.LABEL_TRAININGJOB: None}}},
        {"metadata": {"finalizers": ["example.com/keep"]}},
        {"metadata": {"ownerReferences": None}},
        {"spec": {"activeDeadlineSeconds": 1}},
        {"spec": {"nodeName": "elsewhere"}},
        {"metadata": {"annotations": {KEY: "adjustconfig-1", "team": "b"}}},
    ],
    ids=[
        "add-annotation",
        "change-annotation",
        "remove-annotation",
        "change-label",
        "remove-trainingjob-label",
        "add-finalizer",
        "drop-owners",
        "change-spec",
        "move-node",
        "request-and-more",
    ],
)
def test_any_other_change_by_the_operator_is_refused(rules: dict[str, Any], change: dict[str, Any]) -> None:
    pod = worker_pod()
    assert not admitted(rules, pod, merged(pod, change))
    assert admitted(rules, pod, merged(pod, change), user="system:serviceaccount:ml:default"), "others: not ours"


def test_only_trainingjob_workers(rules: dict[str, Any]) -> None:
    notebook = worker_pod()
    notebook["metadata"]["labels"] = {"app": "notebook"}
    assert not admitted(rules, notebook, merged(notebook, REQUEST)), "a pod that is not a TrainingJob's"
