"""MigRepartition end to end: the real operator moves a job that uses a tenth of its H100 onto a MIG slice.

A real sidecar replays a light GPU trace (10 % SM activity, 6 GB of 80), a real instrumented
trainer steps and answers the checkpoint request, a real Prometheus scrapes them; the operator
diagnoses OversizedGPU, recommends a 1g.10gb slice and, in Enforce mode, checkpoints the job,
repartitions the GPU it used on the opted-in node (a config of the node's own, written into MIG
Manager's ConfigMap) through the played MIG Manager, and restarts the job on a slice;
or rolls back when MIG Manager fails or wedges, or a disruption budget blocks an eviction.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuwise import wiring
from tests.act.scenario import (
    Trainer,
    events,
    in_state,
    job_of,
    last_action,
    light_telemetry,
    operator_config,
    run_job,
    show_log,
    start,
    start_operator,
    trainingjob,
)
from tests.act.support import MIG_CONFIG_MAP, MigManager, budget, mig_config_map, mig_node, pod
from tests.integration.conftest import Cluster, Operator
from tests.support.emulator import EmulatorThread
from tests.support.prometheus import AVAILABLE, Prometheus
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(not AVAILABLE, reason="needs prometheus (make system-deps)"),
]

NODE = "gpu-node-a"  # where scenario.run_job puts worker 0
BUSY = "gpu-node-0"  # runs another TrainingJob's worker
GPU = {"nvidia.com/gpu": 1}
LIGHT = {
    "DCGM_FI_DEV_GPU_UTIL": 14.0,
    "DCGM_FI_PROF_SM_ACTIVE": 0.09,
    "DCGM_FI_PROF_SM_OCCUPANCY": 0.05,
    "DCGM_FI_DEV_FB_USED": 6000.0,
    "DCGM_FI_DEV_FB_FREE": 74000.0,
    "DCGM_FI_DEV_POWER_USAGE": 110.0,
    "DCGM_FI_DEV_GPU_TEMP": 41.0,
}


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, Trainer]]:
    with light_telemetry(tmp_path_factory.mktemp("mig"), "vit", LIGHT) as running:
        yield running


# Short timeouts for the failure paths (the success path is held pending across an operator restart).
SHORT = {"drainTimeout": "2s", "mig": {"configTimeout": "2s"}}


@pytest.fixture
def node_settings() -> dict[str, Any]:
    return {"drainTimeout": "5s", "mig": {"configTimeout": "20s"}}


@pytest.fixture
def operator(
    emulator: EmulatorThread, light: tuple[Prometheus, Trainer], tmp_path: Path, node_settings: dict[str, Any]
) -> Iterator[Operator]:
    running = start_operator(emulator, tmp_path, light[0], operator_config(tmp_path, nodes=node_settings))
    yield running
    running.stop()
    show_log(running)


def mig_job(name: str = "vit") -> dict[str, Any]:
    return trainingjob(name, efficiency={"actions": ["MigRepartition"], "tunables": {}})


def transitions(cluster: Cluster, record: dict[str, Any]) -> list[str]:
    """The states the action's transition Events announced, in the order they were posted."""
    prefix = f"{record['action']} {record['id']} "
    return [
        e["message"].removeprefix(prefix).split(":")[0]
        for e in cluster.list("v1", "Event", "default")
        if (e.get("involvedObject") or {}).get("name") == "vit" and e["message"].startswith(prefix)
    ]


def back_on_its_whole_gpu(cluster: Cluster) -> None:
    job = job_of(cluster, "vit") or {}
    limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "8", "nvidia.com/gpu": 1} and not job["spec"].get("suspend")
    node = cluster.get("v1", "Node", NODE, namespace="") or {}
    assert not node["spec"].get("unschedulable")


def with_mig_manager_configs(cluster: Cluster) -> None:
    cluster.create(mig_config_map(), namespace=MIG_CONFIG_MAP[0])


def test_repartition_end_to_end_survives_an_operator_restart(
    cluster: Cluster, emulator: EmulatorThread, operator: Operator, trainer: Trainer
) -> None:
    with_mig_manager_configs(cluster)
    cluster.create(mig_node(NODE, gpus=2, allocatable={"nvidia.com/gpu": "2"}), namespace="")
    cluster.create(pod("inference", NODE, gpus=GPU), namespace="default")  # on the other GPU: kept whole, evicted
    # A node as good (one eviction each) that sorts first, but its pod is another TrainingJob's worker.
    cluster.create(mig_node(BUSY, allocatable={"nvidia.com/gpu": "1"}), namespace="")
    cluster.create(pod("gpt-0", BUSY, gpus=GPU, labels={wiring.LABEL_TRAININGJOB: "gpt"}), namespace="default")
    with MigManager(str(emulator.kubeconfig), hold={"gpuwise-*"}) as manager:
        job = start(cluster, mig_job())
        waiting = eventually(
            lambda: in_state(cluster, "vit", "WaitingForCheckpoint"), timeout=40, what="a checkpoint request"
        )
        assert (waiting["action"], waiting["finding"]) == ("MigRepartition", "OversizedGPU")
        assert waiting["changes"] == {"migProfile": "1g.10gb"}
        assert waiting["overridesTarget"]["preferNodes"] == [NODE]
        eventually(lambda: trainer.project(cluster) == waiting["id"], what="the request on the pod")

        # The runner stops the job, then prepares the node: cordoned, config asked for, MIG pending.
        eventually(lambda: manager.seen, timeout=30, what="the MIG config label")
        node = cluster.get("v1", "Node", NODE, namespace="") or {}
        assert node["spec"]["unschedulable"] is True
        preparing = last_action(cluster, "vit")
        config = preparing["details"]["migConfig"]
        assert manager.seen == [(NODE, config)] and config.startswith(f"gpuwise-{NODE}-")
        assert preparing["details"]["previousMigConfig"] == "all-disabled"
        assert preparing["details"]["migGpus"] == "1", "the job's GPU, not the one the inference pod used"
        assert preparing["details"]["evicted"] == "default/inference"
        assert cluster.get("v1", "Pod", "inference", "default") is None
        eventually(lambda: "Applying" in transitions(cluster, waiting), what="the Applying Event")

        # Killed while MIG Manager works: the new process follows the same request, asks nothing again.
        assert operator.process is not None
        operator.process.send_signal(signal.SIGKILL)
        operator.process.wait()
        operator.start()
        manager.hold.clear()

        new_job = eventually(
            lambda: (
                (j := job_of(cluster, "vit"))
                and j["metadata"]["uid"] != job["metadata"]["uid"]
                and not j["spec"].get("suspend")
                and j
            ),
            timeout=30,
            what="the job released on a slice",
        )
        trainer_container = new_job["spec"]["template"]["spec"]["containers"][0]
        assert trainer_container["resources"]["limits"] == {"cpu": "8", "nvidia.com/mig-1g.10gb": "1"}
        affinity = new_job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        (preferred,) = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
        assert preferred["preference"]["matchExpressions"][0]["values"] == [NODE], "where the slices were made"
        run_job(cluster, new_job, node=NODE)
        done = eventually(lambda: in_state(cluster, "vit", "Done"), timeout=30, what="the action verified")
    assert manager.seen == [(NODE, config)], "asked once, across the restart"
    assert manager.layouts[NODE] == [None, {"1g.10gb": 1}]
    node = cluster.get("v1", "Node", NODE, namespace="") or {}
    assert not node["spec"].get("unschedulable")
    assert node["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
    states = [step["state"] for step in done["history"]]
    assert states == ["Planned", "WaitingForCheckpoint", "Applying", "Verifying", "Done"]
    assert done["details"]["node"] == NODE and done["details"]["applied"] == "true"
    assert len(events(cluster, "CheckpointRequested", "vit")) == 1
    # kopf posts Events in the background: the last may trail the status a little.
    eventually(lambda: transitions(cluster, done) == states, what="an Event for every transition, in order")
    for measured in (done["baseline"], done["result"]):
        assert measured["gpuUtilization"] == pytest.approx(LIGHT["DCGM_FI_DEV_GPU_UTIL"], abs=1)
    assert cluster.get("v1", "Pod", "gpt-0", "default") is not None, "another TrainingJob's worker is never evicted"
    assert not (cluster.get("v1", "Node", BUSY, namespace="") or {})["spec"].get("unschedulable")


def checkpointed_and_rolled_back(cluster: Cluster, trainer: Trainer) -> dict[str, Any]:
    """Start the job, answer the checkpoint request, and wait for the action to roll back."""
    start(cluster, mig_job())
    waiting = eventually(
        lambda: in_state(cluster, "vit", "WaitingForCheckpoint"), timeout=40, what="a checkpoint request"
    )
    eventually(lambda: trainer.project(cluster) == waiting["id"], what="the request on the pod")
    rolled_back: dict[str, Any] = eventually(
        lambda: in_state(cluster, "vit", "RolledBack"), timeout=40, what="RolledBack"
    )
    return rolled_back


@pytest.mark.parametrize("node_settings", [SHORT])
@pytest.mark.parametrize(
    "outcome",
    [
        ({"fail": {"gpuwise-*"}}, "MigConfigFailed", "could not apply gpuwise-"),
        ({"hold": {"gpuwise-*"}}, "MigConfigTimeout", "is pending after 2s"),
    ],
    ids=["failed", "wedged-pending"],
)
def test_a_failed_or_wedged_mig_config_rolls_back_and_the_job_keeps_its_whole_gpu(
    cluster: Cluster,
    emulator: EmulatorThread,
    operator: Operator,
    trainer: Trainer,
    outcome: tuple[dict[str, set[str]], str, str],
) -> None:
    manager_settings, reason, said = outcome
    with_mig_manager_configs(cluster)
    cluster.create(mig_node(NODE, allocatable={"nvidia.com/gpu": "1"}), namespace="")
    with MigManager(str(emulator.kubeconfig), **manager_settings) as manager:
        rolled_back = checkpointed_and_rolled_back(cluster, trainer)
    assert rolled_back["reason"] == reason
    config = rolled_back["details"]["migConfig"]
    assert manager.seen == [(NODE, config), (NODE, "all-disabled")], "the previous config, asked back"
    node = cluster.get("v1", "Node", NODE, namespace="") or {}
    assert node["metadata"]["labels"]["nvidia.com/mig.config"] == "all-disabled"
    assert node["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
    back_on_its_whole_gpu(cluster)
    # kopf posts Events in the background: they may trail the status a little.
    rolled = eventually(
        lambda: [e for e in events(cluster, reason, "vit") if "RolledBack" in e["message"]],
        what="the RolledBack Event",
    )
    assert [e["type"] for e in rolled] == ["Warning"]
    assert any(said in e["message"] for e in events(cluster, reason, "vit"))


@pytest.mark.parametrize("node_settings", [SHORT])
def test_an_eviction_a_disruption_budget_blocks_rolls_back(
    cluster: Cluster, emulator: EmulatorThread, operator: Operator, trainer: Trainer
) -> None:
    """The budget's status is unknown (no disruption controller): the node is chosen, and the
    Eviction API refuses, for drainTimeout. Nothing is asked of MIG Manager; the pod stays."""
    with_mig_manager_configs(cluster)
    cluster.create(mig_node(NODE, gpus=2, allocatable={"nvidia.com/gpu": "2"}), namespace="")
    cluster.create(budget("serving", {"matchLabels": {"app": "serve"}}, maxUnavailable=0), namespace="default")
    cluster.create(pod("serve", NODE, gpus=GPU, labels={"app": "serve"}), namespace="default")
    with MigManager(str(emulator.kubeconfig)) as manager:
        rolled_back = checkpointed_and_rolled_back(cluster, trainer)
    assert rolled_back["reason"] == "EvictionBlocked"
    assert "default/serve is blocked: The disruption budget serving needs" in rolled_back["history"][-2]["message"]
    assert manager.seen == [], "no MIG change was asked for"
    node = cluster.get("v1", "Node", NODE, namespace="") or {}
    assert node["metadata"]["labels"]["nvidia.com/mig.config"] == "all-disabled"
    assert cluster.get("v1", "Pod", "serve", "default") is not None
    back_on_its_whole_gpu(cluster)


def test_no_node_opted_in_no_checkpoint_no_restart(cluster: Cluster, operator: Operator, trainer: Trainer) -> None:
    cluster.create(mig_node(NODE, opted_in=False, allocatable={"nvidia.com/gpu": "1"}), namespace="")
    job = start(cluster, mig_job())
    (event,) = eventually(lambda: events(cluster, "ActionNotTaken", "vit"), timeout=40, what="ActionNotTaken")
    assert "MigRepartition for OversizedGPU not taken (NoMigNode)" in event["message"]
    assert "no node is opted in for MIG (label gpuwise.io/gpu-partitioning=mig)" in event["message"]
    assert last_action(cluster, "vit") == {}, "no action, no checkpoint request"
    assert (job_of(cluster, "vit") or {})["metadata"]["uid"] == job["metadata"]["uid"]
    node = cluster.get("v1", "Node", NODE, namespace="") or {}
    assert not node["spec"].get("unschedulable") and "nvidia.com/mig.config.state" in node["metadata"]["labels"]
