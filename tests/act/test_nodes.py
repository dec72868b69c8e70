"""Cordon, evict and wait for idle GPUs against the emulator over HTTP, through the operator's Kube."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kopf._core.engines import posting
from prometheus_client import REGISTRY

from gpuwise import wiring
from gpuwise.act.nodes import (
    ANNOTATION_CORDONED_BY,
    Cordon,
    NodeError,
    cordon,
    evict_gpu_pods,
    never_evicted,
    uncordon,
)
from gpuwise.kube.client import ApiError, Kube
from gpuwise.kube.resources import gpu_resources
from tests.act.support import budget, node, pod

GPU = {"nvidia.com/gpu": 1}
JOB = "default/bert"  # the TrainingJob whose action idles the node
EVICTED = "gpuwise_action_evictions_total"
EVICTED_LABELS = {"namespace": "default", "trainingjob": "bert", "pod_namespace": "team-b"}
NOT_READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}


async def names(kube: Kube, node_name: str | None = None) -> set[str]:
    selector = f"spec.nodeName={node_name}" if node_name else None
    return {p["metadata"]["name"] for p in await kube.list("v1", "Pod", field_selector=selector)}


# --- cordon ---------------------------------------------------------------------------------


async def test_cordon_remembers_the_holder_and_only_the_holder_uncordons(kube: Kube) -> None:
    await kube.create(node("gpu-1"))
    assert await cordon(kube, "gpu-1", "tj-a-1") is Cordon.OURS
    assert await cordon(kube, "gpu-1", "tj-a-1") is Cordon.OURS  # a resumed action repeats it harmlessly
    stored = await kube.get("v1", "Node", "", "gpu-1")
    assert stored is not None and stored["spec"]["unschedulable"] is True
    assert stored["metadata"]["annotations"][ANNOTATION_CORDONED_BY] == "tj-a-1"

    with pytest.raises(NodeError, match="cordoned by another gpuwise action"):
        await cordon(kube, "gpu-1", "tj-b-1")
    assert await uncordon(kube, "gpu-1", "tj-b-1") is False
    assert await uncordon(kube, "gpu-1", "tj-a-1") is True
    stored = await kube.get("v1", "Node", "", "gpu-1")
    assert stored is not None and not stored["spec"].get("unschedulable")
    assert ANNOTATION_CORDONED_BY not in (stored["metadata"].get("annotations") or {})


async def test_an_annotation_left_by_kubectl_uncordon_does_not_hold_the_node(kube: Kube) -> None:
    await kube.create(node("gpu-1"))
    await cordon(kube, "gpu-1", "tj-a-1")
    await kube.patch("v1", "Node", "", "gpu-1", {"spec": {"unschedulable": None}})  # kubectl uncordon
    assert await cordon(kube, "gpu-1", "tj-b-1") is Cordon.OURS
    stored = await kube.get("v1", "Node", "", "gpu-1")
    assert stored is not None and stored["metadata"]["annotations"][ANNOTATION_CORDONED_BY] == "tj-b-1"


async def test_a_node_someone_else_cordoned_stays_cordoned(kube: Kube) -> None:
    await kube.create(node("gpu-1", unschedulable=True))
    assert await cordon(kube, "gpu-1", "tj-a-1") is Cordon.SOMEONE_ELSES
    assert await uncordon(kube, "gpu-1", "tj-a-1") is False
    stored = await kube.get("v1", "Node", "", "gpu-1")
    assert stored is not None and stored["spec"]["unschedulable"] is True


async def test_a_missing_node_is_an_error_that_names_it(kube: Kube) -> None:
    with pytest.raises(NodeError, match="node gpu-9 does not exist"):
        await cordon(kube, "gpu-9", "tj-a-1")


# --- evict ----------------------------------------------------------------------------------


def test_gpu_resources_are_whole_gpus_shares_and_mig_slices() -> None:
    body = pod("p", "n", gpus={"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 1, "nvidia.com/gpu.shared": 1, "cpu": 4})
    assert gpu_resources(body) == {"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 1, "nvidia.com/gpu.shared": 1}
    assert gpu_resources(pod("p", "n")) == {}


async def test_eviction_takes_only_the_gpu_pods_of_the_node(kube: Kube) -> None:
    await kube.create(pod("train", "gpu-1", gpus=GPU))
    await kube.create(pod("slice", "gpu-1", gpus={"nvidia.com/mig-1g.10gb": 1}, namespace="team-b"))
    await kube.create(pod("logger", "gpu-1"))  # no GPU: stays
    await kube.create(pod("done", "gpu-1", gpus=GPU, status={"phase": "Succeeded"}))  # holds nothing
    await kube.create(pod("elsewhere", "gpu-2", gpus=GPU))

    drain = await evict_gpu_pods(kube, "gpu-1", job=JOB)

    assert drain.idle and sorted(drain.evicted) == ["default/train", "team-b/slice"]
    assert await names(kube) == {"logger", "done", "elsewhere"}


async def test_a_disruption_budget_blocks_eviction_until_it_allows_one(kube: Kube) -> None:
    await kube.create(budget("serving", {"matchLabels": {"app": "serve"}}, minAvailable=2))
    await kube.create(pod("serve-a", "gpu-1", gpus=GPU, labels={"app": "serve"}))
    await kube.create(pod("serve-b", "gpu-2", gpus=GPU, labels={"app": "serve"}))

    for _ in range(2):  # refused, and refused again on the next cycle's retry
        drain = await evict_gpu_pods(kube, "gpu-1", job=JOB)
        assert not drain.idle and drain.left == ("default/serve-a",) and not drain.evicted
    assert drain.blocked == {
        "default/serve-a": "The disruption budget serving needs 2 healthy pods and has 2 currently"
    }
    assert "default/serve-a is blocked: The disruption budget serving" in drain.explain()
    # A third replica makes room for one disruption: the retry goes through.
    await kube.create(pod("serve-c", "gpu-3", gpus=GPU, labels={"app": "serve"}))
    drain = await evict_gpu_pods(kube, "gpu-1", job=JOB)
    assert drain.idle and drain.evicted == ("default/serve-a",)


@pytest.mark.parametrize(
    ("spec", "evictable"),
    [
        ({"maxUnavailable": "50%"}, 1),  # of 2 pods: 1 may go
        ({"maxUnavailable": 0}, 0),
        ({"minAvailable": "50%"}, 1),
    ],
)
async def test_the_emulator_reads_budgets_as_the_api_server_does(
    kube: Kube, spec: dict[str, Any], evictable: int
) -> None:
    selector = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["serve"]}]}
    await kube.create(budget("serving", selector, **spec))
    # What the disruption controller would write from the owner's scale (the emulator has none).
    await kube.patch(
        "policy/v1", "PodDisruptionBudget", "default", "serving", {"status": {"expectedPods": 2}}, status=True
    )
    for name in ("a", "b"):
        await kube.create(pod(name, "gpu-1", gpus=GPU, labels={"app": "serve"}))
    drain = await evict_gpu_pods(kube, "gpu-1", job=JOB)
    assert len(drain.evicted) == evictable and len(drain.blocked) == 2 - evictable


async def test_the_emulator_evicts_an_unready_pod_while_the_budget_holds(kube: Kube) -> None:
    await kube.create(budget("serving", {"matchLabels": {"app": "serve"}}, minAvailable=1))
    await kube.create(pod("broken", "gpu-1", gpus=GPU, labels={"app": "serve"}, status=NOT_READY))
    await kube.create(pod("healthy", "gpu-2", gpus=GPU, labels={"app": "serve"}))
    assert (await evict_gpu_pods(kube, "gpu-1", job=JOB)).evicted == ("default/broken",)
    assert (await evict_gpu_pods(kube, "gpu-2", job=JOB)).blocked  # the last healthy one stays


async def test_the_emulator_refuses_a_pod_under_two_budgets(kube: Kube) -> None:
    for name in ("one", "two"):
        await kube.create(budget(name, {"matchLabels": {"app": "serve"}}, maxUnavailable=1))
    await kube.create(pod("serve", "gpu-1", gpus=GPU, labels={"app": "serve"}))
    with pytest.raises(ApiError) as refused:
        await kube.evict("default", "serve")
    assert refused.value.status == 500 and "more than one PodDisruptionBudget" in refused.value.message


@pytest.mark.parametrize(
    ("labels", "do_not_disrupt", "why"),
    [
        ({}, True, "annotated gpuwise.io/do-not-disrupt"),
        ({wiring.LABEL_TRAININGJOB: "gpt"}, False, "a worker of TrainingJob default/gpt"),
    ],
    ids=["do-not-disrupt", "another-trainingjob"],
)
async def test_a_node_with_a_pod_never_evicted_is_not_drained_at_all(
    kube: Kube, labels: dict[str, str], do_not_disrupt: bool, why: str
) -> None:
    await kube.create(pod("precious", "gpu-1", gpus=GPU, labels=labels, do_not_disrupt=do_not_disrupt))
    await kube.create(pod("other", "gpu-1", gpus=GPU))
    drain = await evict_gpu_pods(kube, "gpu-1", job=JOB)
    assert list(drain.protected) == ["default/precious"] and why in drain.protected["default/precious"]
    assert not drain.evicted and drain.left == ("default/other", "default/precious")
    assert f"default/precious must not be evicted: {why}" in drain.explain()
    assert await names(kube, "gpu-1") == {"precious", "other"}, "nobody evicted from a node that cannot be idled"


async def test_the_jobs_own_workers_may_be_evicted(kube: Kube) -> None:
    await kube.create(pod("bert-0", "gpu-1", gpus=GPU, labels={wiring.LABEL_TRAININGJOB: "bert"}))
    await kube.create(pod("gpt-0", "gpu-2", gpus=GPU, labels={wiring.LABEL_TRAININGJOB: "gpt"}, namespace="team-b"))
    assert (await evict_gpu_pods(kube, "gpu-1", job=JOB)).evicted == ("default/bert-0",)
    # The same name in another namespace is another TrainingJob.
    assert (await evict_gpu_pods(kube, "gpu-2", job="default/gpt")).protected


async def test_an_evicted_pod_is_told_who_evicted_it_and_the_eviction_is_counted(
    kube: Kube, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    await kube.create(pod("notebook", "gpu-1", gpus=GPU, namespace="team-b"))
    before = REGISTRY.get_sample_value(EVICTED, EVICTED_LABELS) or 0.0

    drain = await evict_gpu_pods(kube, "gpu-1", job=JOB, why="MIG config all-3g.40gb")

    assert drain.evicted == ("team-b/notebook",)
    (event,) = [events.get_nowait() for _ in range(events.qsize())]
    assert (event.type, event.reason) == ("Warning", "EvictedByGpuwise")
    assert (event.ref["kind"], event.ref["namespace"], event.ref["name"]) == ("Pod", "team-b", "notebook")
    assert "node gpu-1 for an action on TrainingJob default/bert (MIG config all-3g.40gb)" in event.message
    assert REGISTRY.get_sample_value(EVICTED, EVICTED_LABELS) == before + 1


async def test_an_admin_can_keep_evictions_to_some_namespaces(
    kube: Kube, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    await kube.create(pod("serving", "gpu-1", gpus=GPU, namespace="prod"))
    await kube.create(pod("notebook", "gpu-1", gpus=GPU, namespace="team-b"))
    drain = await evict_gpu_pods(kube, "gpu-1", job=JOB, namespaces=["team-b", "default"])
    assert list(drain.protected) == ["prod/serving"]
    assert "in namespace prod, which actions.nodes.evictNamespaces does not list" in drain.explain()
    assert not drain.evicted and events.empty(), "a node that cannot be idled loses nobody"
    assert (await evict_gpu_pods(kube, "gpu-1", job=JOB, namespaces=["team-b", "prod"])).evicted


def test_the_job_s_own_workers_and_other_jobs_workers_whatever_the_namespaces() -> None:
    own = pod("bert-0", "gpu-1", gpus=GPU, labels={wiring.LABEL_TRAININGJOB: "bert"})
    other = pod("gpt-0", "gpu-1", gpus=GPU, labels={wiring.LABEL_TRAININGJOB: "gpt"}, namespace="team-b")
    assert never_evicted(own, JOB, namespaces=["team-b"]) is None, "stopped from its checkpoint anyway"
    assert "a worker of TrainingJob team-b/gpt" in (never_evicted(other, JOB, namespaces=["team-b"]) or "")
