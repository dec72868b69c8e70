"""MigRepartition: the choice of node and plan (pure), and its node-side steps against the
emulator with a played MIG Manager that reads its ConfigMap as nvidia-mig-parted does — success
on an 8-GPU node changing only the GPUs the plan says, foreign configs kept, `failed`, a wedged
`pending`, a write conflict, a blocked eviction, do-not-disrupt, a node not opted in, another
owner's change in flight, and a resumed action."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from gpuwise import wiring
from gpuwise.act.action_settings import ActionSettings
from gpuwise.act.machine import ActContext, ActionFailed, JobView, Plan, Progress, Refusal
from gpuwise.act.mig_repartition import MIG_REPARTITION, Choice, MigConfigs, NoMigNodeError, choose
from gpuwise.act.nodes import ANNOTATION_CORDONED_BY, held_by_budgets
from gpuwise.api.kinds import ActionKind
from gpuwise.api.overrides import JobOverrides
from gpuwise.api.trainingjob import ActionRecord
from gpuwise.decide import mig_parted
from gpuwise.kube.client import Kube
from gpuwise.kube.job_overrides import render
from tests.act.support import (
    MIG_CONFIG_MAP,
    MigManager,
    budget,
    drive,
    job_view,
    mig_config_map,
    mig_node,
    pod,
    recommend,
    record_for,
)
from tests.support.emulator import EmulatorThread

GPU = {"nvidia.com/gpu": 1}
JOB = "default/bert"  # the TrainingJob to move (support.job_view)
SETTINGS = ActionSettings.model_validate({"nodes": {"drainTimeout": "0.6s", "mig": {"configTimeout": "0.6s"}}})
CONFIG_MAP = mig_config_map()
CONFIGS = MigConfigs("/".join(MIG_CONFIG_MAP), mig_parted.parse(CONFIG_MAP["data"]["config.yaml"]))


def planned(job: JobView) -> ActionRecord:
    plan = MIG_REPARTITION.plan(job, recommend(migProfile="3g.40gb"), SETTINGS)
    assert isinstance(plan, Plan)
    return record_for(plan, ActionKind.MIG_REPARTITION)


async def labels_of(kube: Kube, name: str) -> dict[str, str]:
    node = await kube.get("v1", "Node", "", name)
    assert node is not None
    return dict(node["metadata"].get("labels") or {})


async def node_of(kube: Kube, name: str) -> dict[str, Any]:
    node = await kube.get("v1", "Node", "", name)
    assert node is not None
    return node


# --- configs and the choice (pure) ----------------------------------------------------------


def test_a_node_with_free_slices_needs_no_change() -> None:
    nodes = [
        mig_node("a", config="all-disabled"),
        mig_node("b", config="all-3g.40gb", allocatable={"nvidia.com/mig-3g.40gb": "2"}),
    ]
    busy = pod("other", "b", gpus={"nvidia.com/mig-3g.40gb": 1})
    assert choose(nodes, [busy], "3g.40gb", 1, job=JOB, configs=CONFIGS) == Choice("b", "all-3g.40gb", "all-3g.40gb")


def test_the_choice_prefers_fewer_evictions_then_fewer_instance_changes() -> None:
    nodes = [mig_node("a", config="all-1g.10gb"), mig_node("b", gpus=2), mig_node("c")]
    pods = [pod("busy", "b", gpus=GPU), pod("own", "c", gpus=GPU, labels={wiring.LABEL_TRAININGJOB: "bert"})]
    choice = choose(nodes, pods, "3g.40gb", 2, job=JOB, configs=CONFIGS)
    # a and c need no eviction (c's only pod is the job's own); c goes from no instances to two,
    # a would destroy seven first; b would evict its pod (whose GPU it keeps whole).
    assert (choice.node, choice.previous, choice.evictions, choice.changed) == ("c", "all-disabled", (), (0,))
    assert choice.config == mig_parted.config_name("c", choice.devices) and choice.config.startswith("gpuwise-c-")
    assert choice.devices == [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]
    assert choice.instance_changes == 2
    assert choose(nodes[1:2], pods, "3g.40gb", 2, job=JOB, configs=CONFIGS).devices == [
        {"devices": [0], "mig-enabled": False},
        {"devices": [1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
    ]


def test_nodes_that_cannot_serve_say_why() -> None:
    nodes = [
        mig_node("plain", opted_in=False),
        mig_node("busy-mig", config="all-1g.10gb", state="pending"),
        mig_node("broken", state="failed"),
        mig_node("precious"),
        mig_node("kept"),
    ]
    nodes[-1]["metadata"]["annotations"] = {"gpuwise.io/do-not-disrupt": "true"}
    nodes.append(mig_node("small", product="NVIDIA-A100-SXM4-40GB"))
    nodes.append(mig_node("unknown", config="balanced"))
    nodes.append(mig_node("full", gpus=2))
    pods = [
        pod("keep", "precious", gpus=GPU, do_not_disrupt=True),
        pod("serve", "full", gpus={"nvidia.com/gpu": 2}),
    ]
    with pytest.raises(NoMigNodeError) as caught:
        choose(nodes, pods, "3g.40gb", 1, job=JOB, configs=CONFIGS)
    reasons = caught.value.reasons
    assert reasons["plain"] == "not opted in (label gpuwise.io/gpu-partitioning=mig)"
    assert "'all-1g.10gb' is pending" in reasons["busy-mig"] and "did not make" in reasons["busy-mig"]
    assert "is failed" in reasons["broken"]
    assert reasons["precious"] == "must not be disrupted: default/keep (annotated gpuwise.io/do-not-disrupt)"
    assert "A100-40GB has no MIG profile '3g.40gb'" in reasons["small"]
    assert reasons["kept"] == "annotated gpuwise.io/do-not-disrupt"
    assert reasons["unknown"] == (
        "its MIG config 'balanced' is not in gpu-operator/custom-mig-config: its GPUs' layout is unknown"
    )
    assert reasons["full"].startswith("its 0 GPU(s) not held whole cannot offer {'3g.40gb': 1} free beside the 2 whole")
    # Without MIG Manager's configs, only a node needing no change could serve.
    missing = MigConfigs("gpu-operator/custom-mig-config", problem="MIG Manager's ConfigMap ... does not exist")
    with pytest.raises(NoMigNodeError, match=r"a: MIG Manager's ConfigMap \.\.\. does not exist"):
        choose([mig_node("a")], [], "3g.40gb", 1, job=JOB, configs=missing)


def test_another_trainingjobs_worker_keeps_gpuwise_off_its_node() -> None:
    """gpuwise restarts a TrainingJob only through its own checkpoint handshake, never as a side
    effect of another job's action: a node that would have to evict one of its workers is out."""
    gpt = {wiring.LABEL_TRAININGJOB: "gpt"}
    nodes = [mig_node("a", gpus=2), mig_node("b", gpus=2)]
    pods = [pod("gpt-0", "a", gpus=GPU, labels=gpt), pod("serve", "b", gpus=GPU)]
    choice = choose(nodes, pods, "3g.40gb", 1, job=JOB, configs=CONFIGS)
    assert (choice.node, choice.evictions) == ("b", ("default/serve",)), "a would tie and sort first"
    with pytest.raises(NoMigNodeError) as caught:
        choose(nodes[:1], pods, "3g.40gb", 1, job=JOB, configs=CONFIGS)
    assert caught.value.reasons["a"].startswith(
        "must not be disrupted: default/gpt-0 (a worker of TrainingJob default/gpt"
    )
    # Free slices beside it evict nobody: the node serves.
    sliced = mig_node("a", config="all-3g.40gb", allocatable={"nvidia.com/mig-3g.40gb": "2"})
    beside = pod("gpt-0", "a", gpus={"nvidia.com/mig-3g.40gb": 1}, labels=gpt)
    assert choose([sliced], [beside], "3g.40gb", 1, job=JOB, configs=CONFIGS).node == "a"


def test_budgets_that_allow_no_disruption_keep_gpuwise_off_a_node() -> None:
    def serving(name: str, on: str, namespace: str = "default") -> dict[str, Any]:
        return pod(name, on, gpus=GPU, labels={"app": "serve"}, namespace=namespace)

    pods = [serving("a", "gpu-1"), serving("b", "gpu-1"), serving("c", "gpu-2"), serving("d", "gpu-2", "team-b")]
    allows_one = budget("serving", {"matchLabels": {"app": "serve"}}, minAvailable=2)
    allows_one["status"] = {"disruptionsAllowed": 1}  # as the disruption controller writes it
    unknown = budget("fresh", {"matchLabels": {"app": "serve"}}, namespace="team-b", minAvailable=1)
    held = held_by_budgets(pods, [allows_one, unknown])
    # One of default's three may go; team-b's budget has no status yet: not presumed either way.
    assert held == {
        "default/b": "PodDisruptionBudget default/serving allows 1 disruption(s) now",
        "default/c": "PodDisruptionBudget default/serving allows 1 disruption(s) now",
    }
    nodes = [mig_node("gpu-1"), mig_node("gpu-2")]
    with pytest.raises(NoMigNodeError) as caught:
        choose(nodes, pods, "3g.40gb", 1, job=JOB, configs=CONFIGS, held=held)
    assert caught.value.reasons["gpu-1"] == (
        "cannot be idled now: default/b (PodDisruptionBudget default/serving allows 1 disruption(s) now)"
    )
    assert choose(nodes, pods[:2], "3g.40gb", 1, job=JOB, configs=CONFIGS, held={"default/b": "held"}).node == "gpu-2"


def test_settings_name_what_to_fix() -> None:
    # Named configs are read from MIG Manager's ConfigMap now: the old list is refused, not ignored.
    with pytest.raises(ValidationError, match=re.escape("nodes.mig.configs\n  Extra inputs are not permitted")):
        ActionSettings.model_validate({"nodes": {"mig": {"configs": {"odd": {"1g.10gb": 1}}}}})
    with pytest.raises(ValidationError, match=re.escape("nodes.mig.configMap.name")):
        ActionSettings.model_validate({"nodes": {"mig": {"configMap": {"name": "Not_A_Name"}}}})
    with pytest.raises(ValidationError, match="'firstfit' is not a packing policy; choose one of: random, bestfit"):
        ActionSettings.model_validate({"nodes": {"packingPolicy": "firstfit"}})
    with pytest.raises(ValidationError, match="drainTimeout"):
        ActionSettings.model_validate({"nodes": {"drainTimeout": "soon"}})


def test_plan_swaps_the_whole_gpu_for_a_slice_and_refuses_what_a_slice_cannot_serve() -> None:
    plan = MIG_REPARTITION.plan(job_view(), recommend(migProfile="3g.40gb"), SETTINGS)
    assert isinstance(plan, Plan) and plan.restart
    assert plan.target == JobOverrides(resources={"nvidia.com/mig-3g.40gb": "1"}, remove_resources=["nvidia.com/gpu"])
    refused = MIG_REPARTITION.plan(job_view(numProcPerNode=2), recommend(migProfile="3g.40gb"), SETTINGS)
    assert isinstance(refused, Refusal) and refused.reason == "NotOneGpuPerWorker"
    assert isinstance(MIG_REPARTITION.plan(job_view(), recommend(), SETTINGS), Refusal)  # no profile named


# --- the node-side steps against the emulator -----------------------------------------------


async def config_yaml(kube: Kube) -> str:
    found = await kube.get("v1", "ConfigMap", *MIG_CONFIG_MAP)
    assert found is not None
    return str(found["data"]["config.yaml"])


# An 8-GPU node as a platform team partitioned it, in their own config: two whole GPUs, MIG shapes.
MIXED = {
    "mixed": [
        {"devices": [0, 1], "mig-enabled": False},
        {"devices": [2, 3], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
        {"devices": [4, 5], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"devices": [6, 7], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
    ]
}


async def test_one_jobs_resize_repartitions_only_the_gpus_the_plan_says(kube: Kube, emulator: EmulatorThread) -> None:
    """Pods hold both whole GPUs, seven 1g.10gb (of fourteen), all four 3g.40gb and one 7g.80gb.
    The job's 3g.40gb comes from GPU 7 (its 7g.80gb → one 3g.40gb: two instance changes); MIG
    Manager, reading the generated config as nvidia-mig-parted does, changes GPU 7 alone. The
    ConfigMap keeps every config it had but gpuwise's stale one for this node."""
    other_node = mig_parted.config_name("gpu-2", mig_parted.entry((mig_parted.WHOLE,)))
    stale = mig_parted.config_name("gpu-1", mig_parted.entry((mig_parted.WHOLE,) * 8))
    extra = {
        **MIXED,
        other_node: [{"devices": "all", "mig-enabled": False}],
        stale: [{"devices": "all", "mig-enabled": False}],
    }
    await kube.create(mig_config_map(extra))
    running = {"nvidia.com/gpu": "2", "nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "4"}
    await kube.create(mig_node("gpu-1", config="mixed", gpus=8, allocatable={**running, "nvidia.com/mig-7g.80gb": "2"}))
    await kube.create(mig_node("gpu-2", config=other_node, opted_in=False))
    others = [
        pod("whole", "gpu-1", gpus={"nvidia.com/gpu": 2}),
        pod("small", "gpu-1", gpus={"nvidia.com/mig-1g.10gb": 7}),
        pod("mid", "gpu-1", gpus={"nvidia.com/mig-3g.40gb": 4}),
        pod("big", "gpu-1", gpus={"nvidia.com/mig-7g.80gb": 1}),
    ]
    for body in others:
        await kube.create(body)
    job = job_view()
    with MigManager(str(emulator.kubeconfig)) as manager:
        await manager.caught_up()  # it has seen the nodes as they run now
        before = list(manager.layouts["gpu-1"])
        record, progress = await drive(MIG_REPARTITION, "prepare", job, planned(job), kube=kube, settings=SETTINGS)
    assert isinstance(progress, Progress) and progress.ready, progress
    config = record.details["migConfig"]
    assert manager.seen == [("gpu-1", config)] and not manager.errors
    assert config.startswith("gpuwise-gpu-1-") and record.details["migGpus"] == "7"
    after = manager.layouts["gpu-1"]
    assert [i for i in range(8) if before[i] != after[i]] == [7]
    assert after[7] == {"3g.40gb": 1}
    labels = await labels_of(kube, "gpu-1")
    assert labels["nvidia.com/mig.config"] == config and labels["nvidia.com/mig.config.state"] == "success"
    allocatable = (await node_of(kube, "gpu-1"))["status"]["allocatable"]
    assert allocatable["nvidia.com/mig-3g.40gb"] == "5" and allocatable["nvidia.com/gpu"] == "2"
    configs = mig_parted.parse(await config_yaml(kube))
    # Every config but the stale one stays; the previous one too (it is what a rollback asks for).
    assert set(configs) == (set(mig_parted.parse(mig_config_map(extra)["data"]["config.yaml"])) - {stale}) | {config}
    assert configs["mixed"] == MIXED["mixed"] and json.loads(record.details["migDevices"]) == configs[config]
    node = await node_of(kube, "gpu-1")
    assert not node["spec"].get("unschedulable") and ANNOTATION_CORDONED_BY not in node["metadata"].get(
        "annotations", {}
    )
    # The drain stays node-wide: gpuwise cannot tell which GPU a pod holds.
    assert record.details["evicted"] == ",".join(f"default/{p}" for p in ("big", "mid", "small", "whole"))
    assert record.details["previousMigConfig"] == "mixed" and record.details["applied"] == "true"


async def test_the_label_contract_pending_then_success(kube: Kube, emulator: EmulatorThread) -> None:
    """gpuwise sets the config and removes the stale state; MIG Manager says pending, then success;
    only then is the node uncordoned. A write that meets someone else's change of the ConfigMap
    (409) is made again, on top of theirs."""
    await kube.create(mig_config_map())
    await kube.create(mig_node("gpu-1", gpus=2, allocatable={"nvidia.com/gpu": "2"}))
    await kube.create(pod("other-job", "gpu-1", gpus=GPU))
    assert emulator.emulator is not None
    conflict = emulator.emulator.fail_next("PATCH", "v1/configmaps", 409)
    job = job_view()
    patient = ActionSettings.model_validate({"nodes": {"mig": {"configTimeout": "30s"}}})
    ctx = ActContext(kube, patient, datetime.now(tz=UTC))
    record = planned(job)
    with MigManager(str(emulator.kubeconfig), hold={"gpuwise-*"}) as manager:
        messages = []
        for _ in range(4):  # choose; cordon, evict, write (409); write, set the label; follow the state
            progress = await MIG_REPARTITION.prepare(job, record, ctx)
            record = record.model_copy(update={"details": {**record.details, **progress.details}})
            messages.append(progress.message)
            await manager.caught_up()
        assert conflict.answered == 1 and "changed while gpuwise wrote" in messages[1]
        labels = await labels_of(kube, "gpu-1")
        assert labels["nvidia.com/mig.config"] == record.details["migConfig"]
        assert labels["nvidia.com/mig.config.state"] == "pending" and "is pending" in messages[-1]
        assert (await node_of(kube, "gpu-1"))["spec"]["unschedulable"] is True
        manager.hold.clear()
        record, done = await drive(MIG_REPARTITION, "prepare", job, record, kube=kube, settings=patient)
    assert isinstance(done, Progress) and done.ready and "applied" in done.message
    assert manager.layouts["gpu-1"] == [None, {"3g.40gb": 1}], "the other pod's whole GPU kept"
    assert not (await node_of(kube, "gpu-1"))["spec"].get("unschedulable")
    assert await kube.get("v1", "Pod", "default", "other-job") is None  # evicted, not deleted by hand


@pytest.mark.parametrize(("outcome", "reason"), [("fail", "MigConfigFailed"), ("hold", "MigConfigTimeout")])
async def test_a_failed_or_wedged_config_is_rolled_back_and_the_node_uncordoned(
    kube: Kube, emulator: EmulatorThread, outcome: str, reason: str
) -> None:
    await kube.create(mig_config_map())
    await kube.create(mig_node("gpu-1"))
    job = job_view()
    with MigManager(str(emulator.kubeconfig), **{outcome: {"gpuwise-*"}}) as manager:
        record, failed = await drive(MIG_REPARTITION, "prepare", job, planned(job), kube=kube, settings=SETTINGS)
        assert isinstance(failed, ActionFailed) and failed.reason == reason, failed
        config = record.details["migConfig"]
        said = "could not apply" if outcome == "fail" else "is pending after 0.6s"
        assert f"node gpu-1: MIG config {config} {said}" in failed.message or said in failed.message
        record, undone = await drive(MIG_REPARTITION, "undo", job, record, kube=kube, settings=SETTINGS)
    assert isinstance(undone, Progress) and undone.ready and "uncordoned" in undone.message
    assert manager.seen == [("gpu-1", config), ("gpu-1", "all-disabled")]
    labels = await labels_of(kube, "gpu-1")
    assert labels["nvidia.com/mig.config"] == "all-disabled" and labels["nvidia.com/mig.config.state"] == "success"
    assert not (await node_of(kube, "gpu-1"))["spec"].get("unschedulable")


async def test_a_config_mig_manager_cannot_find_fails_clearly(kube: Kube, emulator: EmulatorThread) -> None:
    """The generated config gone from the ConfigMap before MIG Manager read it (someone rewrote the
    file): nvidia-mig-parted finds no such config, MIG Manager says failed, the action rolls back."""
    await kube.create(mig_config_map())
    await kube.create(mig_node("gpu-1"))
    job = job_view()
    ctx = ActContext(kube, SETTINGS, datetime.now(tz=UTC))
    record = planned(job)
    with MigManager(str(emulator.kubeconfig), hold={"gpuwise-*"}) as manager:
        for _ in range(2):  # choose; cordon, evict, write, label
            progress = await MIG_REPARTITION.prepare(job, record, ctx)
            record = record.model_copy(update={"details": {**record.details, **progress.details}})
        await kube.patch("v1", "ConfigMap", *MIG_CONFIG_MAP, {"data": mig_config_map()["data"]})
        manager.hold.clear()
        record, failed = await drive(MIG_REPARTITION, "prepare", job, record, kube=kube, settings=SETTINGS)
    assert isinstance(failed, ActionFailed) and failed.reason == "MigConfigFailed"
    assert failed.message == f"node gpu-1: MIG Manager could not apply {record.details['migConfig']} (state failed)"
    assert manager.errors == [f"no config named {record.details['migConfig']!r}"]


async def test_a_blocked_eviction_changes_nothing_and_uncordons(kube: Kube, emulator: EmulatorThread) -> None:
    await kube.create(mig_config_map())
    await kube.create(mig_node("gpu-1", gpus=2))
    await kube.create(budget("serving", {"matchLabels": {"app": "serve"}}, minAvailable=1))
    await kube.create(pod("serve", "gpu-1", gpus=GPU, labels={"app": "serve"}))
    job = job_view()
    with MigManager(str(emulator.kubeconfig)) as manager:
        record, failed = await drive(MIG_REPARTITION, "prepare", job, planned(job), kube=kube, settings=SETTINGS)
        assert isinstance(failed, ActionFailed) and failed.reason == "EvictionBlocked"
        assert "default/serve is blocked: The disruption budget serving needs 1 healthy pods" in failed.message
        _, undone = await drive(MIG_REPARTITION, "undo", job, record, kube=kube, settings=SETTINGS)
    assert isinstance(undone, Progress) and undone.ready
    assert manager.seen == []  # no MIG change was ever asked for
    assert (await labels_of(kube, "gpu-1"))["nvidia.com/mig.config"] == "all-disabled"
    assert not (await node_of(kube, "gpu-1"))["spec"].get("unschedulable")
    assert await kube.get("v1", "Pod", "default", "serve") is not None
    assert await config_yaml(kube) == mig_config_map()["data"]["config.yaml"], "nothing written before the drain"


@pytest.mark.parametrize(
    ("node", "pods", "why"),
    [
        (mig_node("gpu-1", opted_in=False), [], "no node is opted in for MIG"),
        (mig_node("gpu-1", config="all-1g.10gb", state="pending"), [], "a MIG change gpuwise did not make"),
        (
            mig_node("gpu-1"),
            [pod("keep", "gpu-1", gpus=GPU, do_not_disrupt=True)],
            "must not be disrupted: default/keep (annotated gpuwise.io/do-not-disrupt)",
        ),
        (
            mig_node("gpu-1"),
            [pod("gpt-0", "gpu-1", gpus=GPU, labels={wiring.LABEL_TRAININGJOB: "gpt"})],
            "must not be disrupted: default/gpt-0 (a worker of TrainingJob default/gpt",
        ),
    ],
    ids=["not-opted-in", "mig-change-in-flight", "do-not-disrupt", "another-trainingjob"],
)
async def test_no_action_where_gpuwise_must_not_act(
    kube: Kube, node: dict[str, Any], pods: list[dict[str, Any]], why: str
) -> None:
    await kube.create(node)
    for body in pods:
        await kube.create(body)
    job = job_view()
    _, failed = await drive(MIG_REPARTITION, "prepare", job, planned(job), kube=kube, settings=SETTINGS)
    assert isinstance(failed, ActionFailed) and failed.reason == "NoMigNode" and why in failed.message
    after = await node_of(kube, "gpu-1")
    assert after["metadata"]["labels"] == node["metadata"]["labels"] and not after["spec"].get("unschedulable")


async def test_a_trainingjob_that_lands_after_the_choice_stops_the_drain(kube: Kube, emulator: EmulatorThread) -> None:
    """A worker of another TrainingJob scheduled on the node between the choice and the cordon:
    nobody is evicted, no MIG change is asked for, and the action fails to roll back."""
    await kube.create(mig_config_map())
    await kube.create(mig_node("gpu-1", gpus=2))
    await kube.create(pod("serve", "gpu-1", gpus=GPU))
    job = job_view()
    ctx = ActContext(kube, SETTINGS, datetime.now(tz=UTC))
    record = planned(job)
    chosen = await MIG_REPARTITION.prepare(job, record, ctx)
    assert chosen.details["node"] == "gpu-1" and "1 pod(s) to evict" in chosen.message
    record = record.model_copy(update={"details": {**record.details, **chosen.details}})
    await kube.create(pod("gpt-0", "gpu-1", gpus=GPU, labels={wiring.LABEL_TRAININGJOB: "gpt"}))
    with MigManager(str(emulator.kubeconfig)) as manager:
        record, failed = await drive(MIG_REPARTITION, "prepare", job, record, kube=kube, settings=SETTINGS)
        assert isinstance(failed, ActionFailed) and failed.reason == "DoNotDisrupt"
        assert "default/gpt-0 must not be evicted: a worker of TrainingJob default/gpt" in failed.message
        _, undone = await drive(MIG_REPARTITION, "undo", job, record, kube=kube, settings=SETTINGS)
    assert isinstance(undone, Progress) and undone.ready and manager.seen == []
    assert {p["metadata"]["name"] for p in await kube.list("v1", "Pod")} == {"serve", "gpt-0"}
    assert not (await node_of(kube, "gpu-1"))["spec"].get("unschedulable")


async def test_a_resumed_action_does_not_ask_again(kube: Kube, emulator: EmulatorThread) -> None:
    """An operator restart between any two calls: the record's details are all it has."""
    await kube.create(mig_config_map())
    await kube.create(mig_node("gpu-1"))
    job = job_view()
    record = planned(job)
    ctx = ActContext(kube, SETTINGS, datetime.now(tz=UTC))
    with MigManager(str(emulator.kubeconfig), hold={"gpuwise-*"}) as manager:
        for _ in range(3):  # choose, then cordon + evict + set the config, then follow the state
            progress = await MIG_REPARTITION.prepare(job, record, ctx)
            record = record.model_copy(update={"details": {**record.details, **progress.details}})
        await manager.caught_up()
        assert (await labels_of(kube, "gpu-1")).get("nvidia.com/mig.config.state") == "pending"
        # "Restarted": the same record again, while MIG Manager is still pending.
        again = await MIG_REPARTITION.prepare(job, record, ctx)
        assert not again.ready and "pending" in again.message
        assert manager.seen == [("gpu-1", record.details["migConfig"])]  # the label was not set a second time
    assert (await labels_of(kube, "gpu-1"))["nvidia.com/mig.config.state"] == "pending"  # nor the state touched


async def test_admit_refuses_before_anything_is_disrupted(kube: Kube) -> None:
    """The runner asks before the checkpoint: no node, no checkpoint request and no stopped job."""
    job = job_view()
    plan = MIG_REPARTITION.plan(job, recommend(migProfile="3g.40gb"), SETTINGS)
    assert isinstance(plan, Plan)
    ctx = ActContext(kube, SETTINGS, datetime.now(tz=UTC))
    refused = await MIG_REPARTITION.admit(job, plan, ctx)
    assert isinstance(refused, Refusal) and refused.reason == "NoMigNode"
    assert "no node is opted in for MIG (label gpuwise.io/gpu-partitioning=mig)" in refused.message
    await kube.create(mig_node("gpu-1"))
    refused = await MIG_REPARTITION.admit(job, plan, ctx)
    assert isinstance(refused, Refusal) and "ConfigMap gpu-operator/custom-mig-config does not exist" in refused.message
    await kube.create(mig_config_map())
    admitted = await MIG_REPARTITION.admit(job, plan, ctx)
    assert isinstance(admitted, Plan) and admitted.target.prefer_nodes == ["gpu-1"]
    assert admitted.target.model_copy(update={"prefer_nodes": []}) == plan.target


def test_workers_prefer_the_node_made_ready_for_them() -> None:
    overrides = JobOverrides(prefer_nodes=["gpu-1"], avoid_nodes=["gpu-9"])
    pod = render({"containers": [{"name": "trainer"}]}, "trainer", overrides)
    affinity = pod["affinity"]["nodeAffinity"]
    assert affinity["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {
            "weight": 100,
            "preference": {
                "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-1"]}]
            },
        }
    ]
    required = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert required == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-9"]}]}
    ]
