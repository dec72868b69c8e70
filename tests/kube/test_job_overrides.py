"""Overrides: what actions change, rendered into the Job on top of the user's spec, and read back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuwise.api.overrides import JobOverrides
from gpuwise.api.trainingjob import TrainingJobSpec
from gpuwise.kube import job_overrides
from gpuwise.kube.trainingjob import mutable_job_fields
from gpuwise.operator.config import SidecarSettings
from gpuwise.operator.reconcile import read_overrides
from gpuwise.operator.workload import render_job

OWNER = {
    "apiVersion": "gpuwise.io/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "bert", "namespace": "default", "uid": "u-1"},
}
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
            ]
        }
    }
}


def spec(**pod: Any) -> TrainingJobSpec:
    return TrainingJobSpec.model_validate(
        {
            "trainer": {
                "image": "x",
                "env": [{"name": "NUM_WORKERS", "value": "1"}, {"name": "SEED", "value": "7"}],
                "resourcesPerNode": {"requests": {"cpu": "8", "nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}},
            },
            "pod": pod,
        }
    )


def trainer_of(job: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = job["spec"]["template"]["spec"]["containers"][0]
    return container


def test_no_overrides_render_the_spec_unchanged() -> None:
    plain = render_job(OWNER, spec(), SidecarSettings())
    assert trainer_of(plain)["env"][-2:] == [{"name": "NUM_WORKERS", "value": "1"}, {"name": "SEED", "value": "7"}]
    assert plain["metadata"]["annotations"][job_overrides.ANNOTATION_APPLIED_OVERRIDES] == "{}"
    assert "affinity" not in plain["spec"]["template"]["spec"]


def test_overrides_win_over_the_spec_and_keep_the_rest() -> None:
    changed = JobOverrides(
        env={"NUM_WORKERS": "6", "AMP": "1"},
        avoid_nodes=["slow-node"],
        node_selector={"gpu-class": "l4"},
        resources={"nvidia.com/mig-3g.40gb": 1},
        remove_resources=["nvidia.com/gpu"],
    )
    job = render_job(OWNER, spec(affinity=AFFINITY, nodeSelector={"pool": "gpu"}), SidecarSettings(), changed)
    trainer = trainer_of(job)
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert (env["NUM_WORKERS"], env["AMP"], env["SEED"]) == ("6", "1", "7")
    assert [e["name"] for e in trainer["env"]].count("NUM_WORKERS") == 1
    assert trainer["resources"] == {
        "requests": {"cpu": "8", "nvidia.com/mig-3g.40gb": 1},
        "limits": {"nvidia.com/mig-3g.40gb": 1},
    }
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "gpu", "gpu-class": "l4"}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    avoid = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["slow-node"]}
    assert [t["matchExpressions"][-1] for t in terms] == [avoid, avoid], "every ORed term must avoid the node"
    assert terms[0]["matchExpressions"][0]["values"] == ["a"]
    applied = job_overrides.applied(job)
    assert applied == changed
    assert AFFINITY["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"
    ] == [{"key": "zone", "operator": "In", "values": ["a"]}], "the spec's affinity is not modified in place"


def test_suspend_holds_the_job_but_is_not_part_of_what_it_runs() -> None:
    held = JobOverrides(env={"NUM_WORKERS": "6"}, suspend=True)
    job = render_job(OWNER, spec(), SidecarSettings(), held)
    assert job["spec"]["suspend"] is True
    assert job_overrides.applied(job) == held.placement()
    assert mutable_job_fields(spec(), held)["suspend"] is True
    assert mutable_job_fields(spec(), held.placement())["suspend"] is False


def test_the_annotation_round_trips_and_bad_input_says_what_to_fix() -> None:
    changed = JobOverrides(env={"NUM_WORKERS": "6"}, avoid_nodes=["n1"])
    patch = job_overrides.annotation_patch(changed)
    text = patch["metadata"]["annotations"][job_overrides.ANNOTATION_OVERRIDES]
    assert json.loads(text) == {"avoidNodes": ["n1"], "env": {"NUM_WORKERS": "6"}}
    assert job_overrides.wanted({"metadata": {"annotations": {job_overrides.ANNOTATION_OVERRIDES: text}}}) == changed
    assert (
        job_overrides.annotation_patch(job_overrides.NONE)["metadata"]["annotations"][
            job_overrides.ANNOTATION_OVERRIDES
        ]
        is None
    )
    assert job_overrides.wanted({"metadata": {}}) == job_overrides.NONE

    bad = {
        "metadata": {"annotations": {job_overrides.ANNOTATION_OVERRIDES: '{"env": {"NUM WORKERS": "6"}, "color": 1}'}}
    }
    with pytest.raises(job_overrides.OverridesError) as error:
        job_overrides.wanted(bad)
    assert "annotation gpuwise.io/overrides is not valid" in str(error.value)
    assert "color: Extra inputs are not permitted" in str(error.value)
    assert "'NUM WORKERS' is not a valid environment variable name" in str(error.value)
    assert "Fix or remove the annotation" in str(error.value)
    found, problem = read_overrides(bad)
    assert found == job_overrides.NONE
    assert problem is not None and problem.reason == "InvalidOverrides"
