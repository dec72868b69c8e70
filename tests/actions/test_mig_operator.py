"""MigRepartition end to end: the real operator moves a job that uses a tenth of its H100 onto a MIG slice.

A real sidecar replays a light GPU trace (10 % SM activity, 6 GB of 80), a real instrumented
trainer steps and answers the checkpoint request, a real Prometheus scrapes them; the operator
diagnoses OversizedGPU, recommends a 1g.10gb slice and, in Enforce mode, checkpoints the job,
repartitions the opted-in node through the played MIG Manager, and restarts the job on a slice.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.actions.scenario import (
    Trainer,
    events,
    in_state,
    job_of,
    last_action,
    light_telemetry,
    operator_config,
    run_job,
    start,
    start_operator,
    trainingjob,
)
from tests.actions.support import MigManager, mig_node
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


@pytest.fixture
def operator(emulator: EmulatorThread, light: tuple[Prometheus, Trainer], tmp_path: Path) -> Iterator[Operator]:
    nodes = {"drainTimeout": "5s", "mig": {"configTimeout": "20s"}}
    running = start_operator(emulator, tmp_path, light[0], operator_config(tmp_path, nodes=nodes))
    yield running
    running.stop()


def mig_job(name: str = "vit") -> dict[str, Any]:
    return trainingjob(name, efficiency={"actions": ["MigRepartition"], "tunables": {}})


def test_repartition_end_to_end_survives_an_operator_restart(
    cluster: Cluster, emulator: EmulatorThread, operator: Operator, trainer: Trainer
) -> None:
    cluster.create(mig_node(NODE, allocatable={"nvidia.com/gpu": "1"}), namespace="")
    with MigManager(str(emulator.kubeconfig), hold={"all-1g.10gb"}) as manager:
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
        assert manager.seen == [(NODE, "all-1g.10gb")]
        node = cluster.get("v1", "Node", NODE, namespace="") or {}
        assert node["spec"]["unschedulable"] is True
        assert last_action(cluster, "vit")["details"]["previousMigConfig"] == "all-disabled"

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
    assert manager.seen == [(NODE, "all-1g.10gb")], "asked once, across the restart"
    node = cluster.get("v1", "Node", NODE, namespace="") or {}
    assert not node["spec"].get("unschedulable")
    assert node["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
    states = [step["state"] for step in done["history"]]
    assert states == ["Planned", "WaitingForCheckpoint", "Applying", "Verifying", "Done"]
    assert done["details"]["node"] == NODE and done["details"]["applied"] == "true"
    assert len(events(cluster, "CheckpointRequested", "vit")) == 1


def test_a_failed_mig_config_rolls_back_and_the_job_keeps_its_whole_gpu(
    cluster: Cluster, emulator: EmulatorThread, operator: Operator, trainer: Trainer
) -> None:
    cluster.create(mig_node(NODE, allocatable={"nvidia.com/gpu": "1"}), namespace="")
    with MigManager(str(emulator.kubeconfig), fail={"all-1g.10gb"}) as manager:
        start(cluster, mig_job())
        waiting = eventually(
            lambda: in_state(cluster, "vit", "WaitingForCheckpoint"), timeout=40, what="a checkpoint request"
        )
        eventually(lambda: trainer.project(cluster) == waiting["id"], what="the request on the pod")
        rolled_back = eventually(lambda: in_state(cluster, "vit", "RolledBack"), timeout=40, what="RolledBack")
    assert rolled_back["reason"] == "MigConfigFailed"
    assert manager.seen == [(NODE, "all-1g.10gb"), (NODE, "all-disabled")], "the previous config, asked back"
    node = cluster.get("v1", "Node", NODE, namespace="") or {}
    assert node["metadata"]["labels"]["nvidia.com/mig.config"] == "all-disabled"
    assert node["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
    assert not node["spec"].get("unschedulable")
    job = job_of(cluster, "vit") or {}
    limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "8", "nvidia.com/gpu": 1} and not job["spec"].get("suspend")
    # kopf posts Events in the background: they may trail the status a little.
    rolled = eventually(
        lambda: [e for e in events(cluster, "MigConfigFailed", "vit") if "RolledBack" in e["message"]],
        what="the RolledBack Event",
    )
    assert [e["type"] for e in rolled] == ["Warning"]
    assert any("could not apply all-1g.10gb" in e["message"] for e in events(cluster, "MigConfigFailed", "vit"))


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
