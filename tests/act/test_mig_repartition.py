"""MigRepartition: the choice of node and config (pure), and its node-side steps against the
emulator with a played MIG Manager — success, `failed`, a wedged `pending`, a blocked eviction,
do-not-disrupt, a node not opted in, another owner's change in flight, and a resumed action."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from gpuwise import wiring
from gpuwise.act.action_settings import ActionSettings
from gpuwise.act.machine import ActContext, ActionFailed, JobView, Plan, Progress, Refusal
from gpuwise.act.mig_repartition import MIG_REPARTITION, Choice, NoMigNodeError, choose, known_configs
from gpuwise.act.nodes import ANNOTATION_CORDONED_BY, held_by_budgets
from gpuwise.api.kinds import ActionKind
from gpuwise.api.overrides import JobOverrides
from gpuwise.api.trainingjob import ActionRecord
from gpuwise.decide.mig_geometry import MigInstance
from gpuwise.hardware.mig_profiles import gpu_model
from gpuwise.kube.client import Kube
from gpuwise.kube.job_overrides import render
from tests.act.support import MigManager, budget, drive, job_view, mig_node, pod, recommend, record_for
from tests.support.emulator import EmulatorThread

GPU = {"nvidia.com/gpu": 1}
JOB = "default/bert"  # the TrainingJob to move (support.job_view)
H100 = gpu_model("H100-80GB")
SETTINGS = ActionSettings.model_validate(
    {"nodes": {"drainTimeout": "0.6s", "mig": {"configTimeout": "0.6s", "configs": {"two-big": {"3g.40gb": 2}}}}}
)


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


def test_known_configs_are_nvidias_defaults_plus_the_platforms_own() -> None:
    configs = known_configs(H100, {"two-big": {"3g.40gb": 2}, "a100-only": {"1g.5gb": 7}})
    assert configs["all-disabled"] == frozenset()
    assert sorted(i.profile for i in configs["all-1g.10gb"]) == ["1g.10gb"] * 7
    assert configs["two-big"] == {MigInstance(0, "3g.40gb"), MigInstance(4, "3g.40gb")}
    assert "a100-only" not in configs  # another model's profile: never set on an H100 node


def test_a_node_with_free_slices_needs_no_change() -> None:
    nodes = [
        mig_node("a", config="all-disabled"),
        mig_node("b", config="all-3g.40gb", allocatable={"nvidia.com/mig-3g.40gb": "2"}),
    ]
    busy = pod("other", "b", gpus={"nvidia.com/mig-3g.40gb": 1})
    assert choose(nodes, [busy], "3g.40gb", 1, job=JOB) == Choice("b", "all-3g.40gb", "all-3g.40gb")


def test_the_choice_prefers_fewer_evictions_then_fewer_instance_changes() -> None:
    nodes = [mig_node("a", config="all-1g.10gb"), mig_node("b"), mig_node("c")]
    pods = [pod("busy", "b", gpus=GPU), pod("own", "c", gpus=GPU, labels={wiring.LABEL_TRAININGJOB: "bert"})]
    choice = choose(nodes, pods, "3g.40gb", 2, job=JOB)
    # a and c need no eviction (c's only pod is the job's own); c goes from no instances to two,
    # a would destroy seven first.
    assert (choice.node, choice.config, choice.previous, choice.evictions) == ("c", "all-3g.40gb", "all-disabled", ())
    assert choice.instance_changes == 2


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
    pods = [pod("keep", "precious", gpus=GPU, do_not_disrupt=True)]
    with pytest.raises(NoMigNodeError) as caught:
        choose(nodes, pods, "3g.40gb", 1, job=JOB)
    reasons = caught.value.reasons
    assert reasons["plain"] == "not opted in (label gpuwise.io/gpu-partitioning=mig)"
    assert "'all-1g.10gb' is pending" in reasons["busy-mig"] and "did not make" in reasons["busy-mig"]
    assert "is failed" in reasons["broken"]
    assert reasons["precious"] == "must not be disrupted: default/keep (annotated gpuwise.io/do-not-disrupt)"
    assert "A100-40GB has no MIG profile '3g.40gb'" in reasons["small"]
    assert reasons["kept"] == "annotated gpuwise.io/do-not-disrupt"


def test_another_trainingjobs_worker_keeps_gpuwise_off_its_node() -> None:
    """gpuwise restarts a TrainingJob only through its own checkpoint handshake, never as a side
    effect of another job's action: a node that would have to evict one of its workers is out."""
    gpt = {wiring.LABEL_TRAININGJOB: "gpt"}
    nodes = [mig_node("a"), mig_node("b")]
    pods = [pod("gpt-0", "a", gpus=GPU, labels=gpt), pod("serve", "b", gpus=GPU)]
    choice = choose(nodes, pods, "3g.40gb", 1, job=JOB)
    assert (choice.node, choice.evictions) == ("b", ("default/serve",)), "a would tie and sort first"
    with pytest.raises(NoMigNodeError) as caught:
        choose(nodes[:1], pods, "3g.40gb", 1, job=JOB)
    assert caught.value.reasons["a"].startswith(
        "must not be disrupted: default/gpt-0 (a worker of TrainingJob default/gpt"
    )
    # Free slices beside it evict nobody: the node serves.
    sliced = mig_node("a", config="all-3g.40gb", allocatable={"nvidia.com/mig-3g.40gb": "2"})
    beside = pod("gpt-0", "a", gpus={"nvidia.com/mig-3g.40gb": 1}, labels=gpt)
    assert choose([sliced], [beside], "3g.40gb", 1, job=JOB).node == "a"


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
        choose(nodes, pods, "3g.40gb", 1, job=JOB, held=held)
    assert caught.value.reasons["gpu-1"] == (
        "cannot be idled now: default/b (PodDisruptionBudget default/serving allows 1 disruption(s) now)"
    )
    assert choose(nodes, pods[:2], "3g.40gb", 1, job=JOB, held={"default/b": "held"}).node == "gpu-2"


def test_settings_name_what_to_fix() -> None:
    with pytest.raises(ValidationError, match=re.escape("config 'odd': '9g.1gb' is not a MIG profile")):
        ActionSettings.model_validate({"nodes": {"mig": {"configs": {"odd": {"9g.1gb": 1}}}}})
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


async def test_repartition_idles_the_node_sets_the_config_and_uncordons(kube: Kube, emulator: EmulatorThread) -> None:
    await kube.create(mig_node("gpu-1"))
    await kube.create(pod("other-job", "gpu-1", gpus=GPU))
    job = job_view()
    with MigManager(str(emulator.kubeconfig)) as manager:
        record, progress = await drive(MIG_REPARTITION, "prepare", job, planned(job), kube=kube, settings=SETTINGS)
    assert isinstance(progress, Progress) and progress.ready, progress
    assert manager.seen == [("gpu-1", "all-3g.40gb")]
    labels = await labels_of(kube, "gpu-1")
    assert labels["nvidia.com/mig.config"] == "all-3g.40gb" and labels["nvidia.com/mig.config.state"] == "success"
    node = await node_of(kube, "gpu-1")
    assert not node["spec"].get("unschedulable") and ANNOTATION_CORDONED_BY not in node["metadata"].get(
        "annotations", {}
    )
    assert node["status"]["allocatable"]["nvidia.com/mig-3g.40gb"] == "2"
    assert await kube.get("v1", "Pod", "default", "other-job") is None  # evicted, not deleted by hand
    assert record.details["previousMigConfig"] == "all-disabled" and record.details["applied"] == "true"
    assert record.details["evicted"] == "default/other-job"


@pytest.mark.parametrize(("outcome", "reason"), [("fail", "MigConfigFailed"), ("hold", "MigConfigTimeout")])
async def test_a_failed_or_wedged_config_is_rolled_back_and_the_node_uncordoned(
    kube: Kube, emulator: EmulatorThread, outcome: str, reason: str
) -> None:
    await kube.create(mig_node("gpu-1"))
    job = job_view()
    with MigManager(str(emulator.kubeconfig), **{outcome: {"all-3g.40gb"}}) as manager:
        record, failed = await drive(MIG_REPARTITION, "prepare", job, planned(job), kube=kube, settings=SETTINGS)
        assert isinstance(failed, ActionFailed) and failed.reason == reason, failed
        assert "all-3g.40gb" in failed.message
        record, undone = await drive(MIG_REPARTITION, "undo", job, record, kube=kube, settings=SETTINGS)
    assert isinstance(undone, Progress) and undone.ready and "uncordoned" in undone.message
    assert manager.seen == [("gpu-1", "all-3g.40gb"), ("gpu-1", "all-disabled")]
    labels = await labels_of(kube, "gpu-1")
    assert labels["nvidia.com/mig.config"] == "all-disabled" and labels["nvidia.com/mig.config.state"] == "success"
    assert not (await node_of(kube, "gpu-1"))["spec"].get("unschedulable")


async def test_a_blocked_eviction_changes_nothing_and_uncordons(kube: Kube, emulator: EmulatorThread) -> None:
    await kube.create(mig_node("gpu-1"))
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
    await kube.create(mig_node("gpu-1"))
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
    await kube.create(mig_node("gpu-1"))
    job = job_view()
    record = planned(job)
    ctx = ActContext(kube, SETTINGS, datetime.now(tz=UTC))
    with MigManager(str(emulator.kubeconfig), hold={"all-3g.40gb"}) as manager:
        for _ in range(3):  # choose, then cordon + evict + set the config, then follow the state
            progress = await MIG_REPARTITION.prepare(job, record, ctx)
            record = record.model_copy(update={"details": {**record.details, **progress.details}})
        await asyncio.sleep(0.3)
        assert (await labels_of(kube, "gpu-1")).get("nvidia.com/mig.config.state") == "pending"
        # "Restarted": the same record again, while MIG Manager is still pending.
        again = await MIG_REPARTITION.prepare(job, record, ctx)
        assert not again.ready and "pending" in again.message
        assert manager.seen == [("gpu-1", "all-3g.40gb")]  # the label was not set a second time
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
