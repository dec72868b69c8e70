"""Pack: the planner's view of the time-sliced nodes, its choice, and the node-side steps against the
emulator with a played device plugin; and packing onto MIG slices that are already free."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpuwise.act.action_settings import ActionSettings
from gpuwise.act.machine import ActContext, ActionFailed, Plan, Progress, Refusal
from gpuwise.act.pack import LABEL_DEVICE_PLUGIN_CONFIG, PACK, cluster_view, mebibytes, place_workers
from gpuwise.api.kinds import ActionKind
from gpuwise.api.overrides import JobOverrides
from gpuwise.decide.packing.cluster import PodRequest
from gpuwise.kube.client import Kube
from tests.act.support import (
    DevicePlugin,
    drive,
    job_view,
    mig_config_map,
    mig_node,
    pod,
    recommend,
    record_for,
    time_slicing_node,
)
from tests.support.emulator import EmulatorThread

SHARED = "nvidia.com/gpu.shared"
SETTINGS = ActionSettings.model_validate(
    {
        "nodes": {
            "drainTimeout": "0.6s",
            "timeSlicing": {"config": "shared-4", "replicas": 4, "configTimeout": "2s"},
        }
    }
)
SLICING = SETTINGS.nodes.time_slicing


def share(name: str, on: str, count: int = 1) -> dict[str, Any]:
    return pod(name, on, gpus={SHARED: count}, namespace="team-b")


def view(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> Any:
    return cluster_view(nodes, pods, SLICING, job="default/bert", extra_shapes=[(4000, 16384, 1, 250)])


def request_for(cluster: Any) -> PodRequest:
    import numpy as np

    return PodRequest(4000, 16384, 1, 250, allowed_models=np.ones(len(cluster.state.nodes.models), dtype=np.bool_))


def test_memory_quantities_in_mebibytes() -> None:
    assert [mebibytes(q) for q in ("512Mi", "16Gi", "1G", 1048576, None)] == [512, 16384, 954, 1, 0]
    with pytest.raises(ValueError, match="not a memory quantity"):
        mebibytes("lots")


def test_the_planner_sees_shares_as_milli_gpus_and_says_why_nodes_are_out() -> None:
    nodes = [
        time_slicing_node("a"),
        time_slicing_node("plain", opted_in=False),
        time_slicing_node("held", unschedulable=True),
        time_slicing_node("whole", switched=False),
        time_slicing_node("fresh", switched=False),
    ]
    pods = [share("s1", "a", 2), pod("w1", "whole", gpus={"nvidia.com/gpu": 1})]
    cluster, reasons = view(nodes, pods)
    assert cluster.state.nodes.names == ("a", "fresh")
    assert cluster.state.gpu_free[0, 0] == 500  # two of four shares taken
    assert cluster.switch_needed == {"fresh"}
    assert reasons == {
        "plain": "not opted in (label gpuwise.io/gpu-partitioning=time-slicing)",
        "held": "cordoned",
        "whole": "runs whole-GPU pods; Pack evicts nobody to switch it to time-slicing",
    }


@pytest.mark.parametrize("policy", ["gpuwise", "bestfit"])
def test_a_share_fills_a_shared_gpu_before_it_breaks_a_whole_one(policy: str) -> None:
    nodes = [time_slicing_node("a-empty"), time_slicing_node("b-shared"), time_slicing_node("c-whole", opted_in=False)]
    pods = [share(f"s{i}", "b-shared") for i in range(3)]
    pods += [pod(f"w{i}", "c-whole", gpus={"nvidia.com/gpu": 1}) for i in range(3)]  # whole GPUs keep coming
    cluster, _ = view(nodes, pods)
    assert place_workers(cluster, request_for(cluster), 2, policy) == ["b-shared", "a-empty"]


def pinned(name: str, on: str, product: str) -> dict[str, Any]:
    body = share(name, on)
    body["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return body


def test_nodes_the_job_does_not_select_are_out_and_say_why() -> None:
    nodes = [time_slicing_node("h100"), time_slicing_node("a100", product="NVIDIA-A100-SXM4-80GB")]
    cluster, reasons = cluster_view(
        nodes, [], SLICING, job="default/bert", selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    )
    assert cluster.state.nodes.names == ("a100",)
    assert reasons == {"h100": "not selected by the job's nodeSelector (nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB)"}


def test_running_pods_that_select_a_gpu_model_are_expected_on_that_model_only() -> None:
    a100 = "NVIDIA-A100-SXM4-80GB"
    nodes = [time_slicing_node("h100"), time_slicing_node("a100", product=a100)]
    pods = [share("free", "h100"), pinned("on-a100", "a100", a100), pinned("elsewhere", "other", "NVIDIA-L4")]
    cluster, _ = view(nodes, pods)
    workload = cluster.workload
    models = cluster.state.nodes.models
    accepted = [
        {m for m, ok in zip(models, row, strict=True) if ok} for row in workload.allowed[workload.spec].tolist()
    ]
    # The L4 pod can never run on these nodes: it is no part of what they should expect.
    assert accepted == [set(models), {a100}, set(models)], "running pods, then the job's own worker"
    assert cluster.state.gpu_free.tolist() == [[750], [750]], "both pods run here, pinned or not"


def test_plan_asks_for_one_share_and_needs_a_config() -> None:
    plan = PACK.plan(job_view(), recommend(ActionKind.PACK), SETTINGS)
    assert isinstance(plan, Plan) and plan.restart
    assert plan.target == JobOverrides(resources={SHARED: "1"}, remove_resources=["nvidia.com/gpu"])
    unset = PACK.plan(job_view(), recommend(ActionKind.PACK), ActionSettings())
    assert isinstance(unset, Refusal) and unset.reason == "NoTimeSlicingConfig"
    assert "actions.nodes.timeSlicing.config" in unset.message


def test_plan_takes_the_recommended_share_only_if_a_replica_is_that_big() -> None:
    # What OversizedGPU recommends on a GPU without MIG: a time-sliced share of at least 13 %.
    fits = PACK.plan(job_view(), recommend(ActionKind.PACK, share="time-slicing", gpuShare="0.13"), SETTINGS)
    assert isinstance(fits, Plan) and fits.changes == {"share": "time-slicing"}
    big = PACK.plan(job_view(), recommend(ActionKind.PACK, share="time-slicing", gpuShare="0.37"), SETTINGS)
    assert isinstance(big, Refusal) and big.reason == "ShareTooSmall"
    assert "needs 37% of a GPU and a time-sliced share is 1/4" in big.message
    assert "actions.nodes.timeSlicing.replicas" in big.message
    wrong = PACK.plan(job_view(), recommend(ActionKind.PACK, gpuShare="half"), SETTINGS)
    assert isinstance(wrong, Refusal) and wrong.reason == "BadRecommendation"


def planned() -> Any:
    plan = PACK.plan(job_view(), recommend(ActionKind.PACK), SETTINGS)
    assert isinstance(plan, Plan)
    return record_for(plan, ActionKind.PACK)


async def test_pack_switches_an_idle_node_to_time_slicing(kube: Kube, emulator: EmulatorThread) -> None:
    await kube.create(time_slicing_node("gpu-1", switched=False))
    job = job_view()
    with DevicePlugin(str(emulator.kubeconfig), "shared-4") as plugin:
        record, progress = await drive(PACK, "prepare", job, planned(), kube=kube, settings=SETTINGS)
        assert isinstance(progress, Progress) and progress.ready, progress
        assert record.details["nodes"] == "gpu-1" and record.details["switchNode"] == "gpu-1"
        switched = await kube.get("v1", "Node", "", "gpu-1")
        assert switched is not None and switched["metadata"]["labels"][LABEL_DEVICE_PLUGIN_CONFIG] == "shared-4"
        assert switched["status"]["allocatable"][SHARED] == "4" and not switched["spec"].get("unschedulable")
        # Reverted later (the job ran worse): the node keeps its shares, others may use them by now.
        _, undone = await drive(PACK, "undo", job, record, kube=kube, settings=SETTINGS)
    assert isinstance(undone, Progress) and undone.ready and "keeps its new configuration" in undone.message
    assert plugin.seen == [("gpu-1", "shared-4")]


async def test_a_config_the_device_plugin_never_applies_is_rolled_back(kube: Kube) -> None:
    await kube.create(time_slicing_node("gpu-1", switched=False))
    job = job_view()
    record, failed = await drive(PACK, "prepare", job, planned(), kube=kube, settings=SETTINGS)  # no device plugin
    assert isinstance(failed, ActionFailed) and failed.reason == "DevicePluginConfigTimeout"
    assert "has not applied config shared-4 yet after 2s" in failed.message
    _, undone = await drive(PACK, "undo", job, record, kube=kube, settings=SETTINGS)
    assert isinstance(undone, Progress) and undone.ready and "uncordoned" in undone.message
    restored = await kube.get("v1", "Node", "", "gpu-1")
    assert restored is not None and LABEL_DEVICE_PLUGIN_CONFIG not in restored["metadata"]["labels"]
    assert not restored["spec"].get("unschedulable")


async def test_pack_onto_a_shared_gpu_changes_no_node(kube: Kube) -> None:
    await kube.create(time_slicing_node("gpu-1"))
    await kube.create(share("s1", "gpu-1"))
    before = await kube.get("v1", "Node", "", "gpu-1")
    record, progress = await drive(PACK, "prepare", job_view(), planned(), kube=kube, settings=SETTINGS)
    assert isinstance(progress, Progress) and progress.ready
    assert record.details["nodes"] == "gpu-1" and "switchNode" not in record.details
    assert await kube.get("v1", "Node", "", "gpu-1") == before


async def test_no_room_without_evicting_says_why(kube: Kube) -> None:
    await kube.create(time_slicing_node("gpu-1", switched=False))
    await kube.create(pod("whole", "gpu-1", gpus={"nvidia.com/gpu": 1}))
    _, failed = await drive(PACK, "prepare", job_view(), planned(), kube=kube, settings=SETTINGS)
    assert isinstance(failed, ActionFailed) and failed.reason == "NoSharedGpu"
    assert "gpu-1: runs whole-GPU pods; Pack evicts nobody" in failed.message
    assert await kube.get("v1", "Pod", "default", "whole") is not None


async def test_pack_onto_free_mig_slices_but_never_repartitions(kube: Kube) -> None:
    await kube.create(mig_config_map())  # where MigRepartition would find a plan: Pack never uses it
    await kube.create(mig_node("sliced", config="all-1g.10gb", allocatable={"nvidia.com/mig-1g.10gb": "7"}))
    plan = PACK.plan(job_view(), recommend(ActionKind.PACK, migProfile="1g.10gb"), SETTINGS)
    assert isinstance(plan, Plan) and plan.target.resources == {"nvidia.com/mig-1g.10gb": "1"}
    record, progress = await drive(
        PACK, "prepare", job_view(), record_for(plan, ActionKind.PACK), kube=kube, settings=SETTINGS
    )
    assert isinstance(progress, Progress) and progress.ready and record.details["node"] == "sliced"

    plan = PACK.plan(job_view(), recommend(ActionKind.PACK, migProfile="3g.40gb"), SETTINGS)
    assert isinstance(plan, Plan)
    _, failed = await drive(
        PACK, "prepare", job_view(), record_for(plan, ActionKind.PACK), kube=kube, settings=SETTINGS
    )
    assert isinstance(failed, ActionFailed) and failed.reason == "NoFreeMigSlices"
    assert "MigRepartition can make them" in failed.message
    assert (await kube.get("v1", "Node", "", "sliced") or {})["metadata"]["labels"][
        "nvidia.com/mig.config"
    ] == "all-1g.10gb"


async def test_admit_refuses_before_anything_is_disrupted(kube: Kube) -> None:
    ctx = ActContext(kube, SETTINGS, datetime.now(tz=UTC))
    shares = PACK.plan(job_view(), recommend(ActionKind.PACK), SETTINGS)
    slices = PACK.plan(job_view(), recommend(ActionKind.PACK, migProfile="1g.10gb"), SETTINGS)
    assert isinstance(shares, Plan) and isinstance(slices, Plan)
    refused = await PACK.admit(job_view(), shares, ctx)
    assert isinstance(refused, Refusal) and refused.reason == "NoSharedGpu"
    assert "no node is opted in" in refused.message
    await kube.create(mig_node("whole-gpus"))  # opted in for MIG, but no slices carved
    await kube.create(mig_config_map())
    refused = await PACK.admit(job_view(), slices, ctx)
    assert isinstance(refused, Refusal) and refused.reason == "NoFreeMigSlices"
    await kube.create(time_slicing_node("ts-1"))
    await kube.create(time_slicing_node("ts-2"))
    for i in range(3):
        await kube.create(share(f"s{i}", "ts-2"))
    await kube.create(pod("whole", "whole-gpus", gpus={"nvidia.com/gpu": 1}))  # whole GPUs are in demand too
    admitted = await PACK.admit(job_view(), shares, ctx)
    assert isinstance(admitted, Plan) and admitted.target.prefer_nodes == ["ts-2"], "the planner's choice"
