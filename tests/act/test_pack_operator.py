"""Pack end to end: the real operator moves a job that uses a tenth of its L4 onto a time-sliced share.

An NVIDIA L4 has no MIG, so OversizedGPU recommends Pack (a share of at least 12 % of a GPU).
A real sidecar replays a light L4 trace, a real instrumented trainer steps and answers the
checkpoint request, a real Prometheus scrapes them; in Enforce mode the operator checkpoints the
job, switches the opted-in node to the device plugin's time-slicing config (the test plays the
device plugin, which then offers `nvidia.com/gpu.shared`) and restarts the job on one share.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.act.scenario import (
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
    status_of,
    trainingjob,
)
from tests.act.support import DevicePlugin, time_slicing_node
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
SHARED = "nvidia.com/gpu.shared"
LIGHT_L4 = {
    "DCGM_FI_DEV_GPU_UTIL": 14.0,
    "DCGM_FI_PROF_SM_ACTIVE": 0.09,
    "DCGM_FI_PROF_SM_OCCUPANCY": 0.05,
    "DCGM_FI_DEV_FB_USED": 1500.0,
    "DCGM_FI_DEV_FB_FREE": 21100.0,
    "DCGM_FI_DEV_FB_RESERVED": 434.0,
    "DCGM_FI_DEV_POWER_USAGE": 30.0,
    "DCGM_FI_DEV_GPU_TEMP": 40.0,
}


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, Trainer]]:
    with light_telemetry(tmp_path_factory.mktemp("pack"), "vit", LIGHT_L4, "--model", "L4") as running:
        yield running


@pytest.fixture
def operator(emulator: EmulatorThread, light: tuple[Prometheus, Trainer], tmp_path: Path) -> Iterator[Operator]:
    nodes = {"drainTimeout": "5s", "timeSlicing": {"config": "shared-4", "replicas": 4, "configTimeout": "20s"}}
    running = start_operator(emulator, tmp_path, light[0], operator_config(tmp_path, nodes=nodes))
    yield running
    running.stop()


def pack_job() -> dict[str, Any]:
    return trainingjob("vit", efficiency={"actions": ["Pack"], "tunables": {}})


def l4_node(*, opted_in: bool = True) -> dict[str, Any]:
    """An L4 node on the device plugin's default config: one whole GPU."""
    return time_slicing_node(NODE, switched=False, opted_in=opted_in, product="NVIDIA-L4")


def test_pack_end_to_end_onto_a_node_switched_to_time_slicing(
    cluster: Cluster, emulator: EmulatorThread, operator: Operator, trainer: Trainer
) -> None:
    cluster.create(l4_node(), namespace="")
    with DevicePlugin(str(emulator.kubeconfig), "shared-4") as plugin:
        job = start(cluster, pack_job())
        waiting = eventually(
            lambda: in_state(cluster, "vit", "WaitingForCheckpoint"), timeout=40, what="a checkpoint request"
        )
        assert (waiting["action"], waiting["finding"]) == ("Pack", "OversizedGPU")
        assert waiting["changes"] == {"share": "time-slicing"}
        assert waiting["overridesTarget"]["preferNodes"] == [NODE], "the planner's choice"
        (finding,) = [f for f in status_of(cluster, "vit")["findings"] if f["kind"] == "OversizedGPU"]
        assert finding["evidence"]["gpuModel"] == "NVIDIA L4"
        assert finding["evidence"]["gpuShare"] == "0.12", "0.09 SM activity filled to 80 %"
        eventually(lambda: trainer.project(cluster) == waiting["id"], what="the request on the pod")

        # The job stopped, the node switched; the device plugin's shares are what the job waits for.
        new_job = eventually(
            lambda: (
                (j := job_of(cluster, "vit"))
                and j["metadata"]["uid"] != job["metadata"]["uid"]
                and not j["spec"].get("suspend")
                and j
            ),
            timeout=30,
            what="the job released on a share",
        )
        assert plugin.seen == [(NODE, "shared-4")]
        trainer_container = new_job["spec"]["template"]["spec"]["containers"][0]
        assert trainer_container["resources"]["limits"] == {"cpu": "8", SHARED: "1"}
        affinity = new_job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        (preferred,) = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
        assert preferred["preference"]["matchExpressions"][0]["values"] == [NODE], "the node switched for it"
        run_job(cluster, new_job, node=NODE)
        done = eventually(lambda: in_state(cluster, "vit", "Done"), timeout=30, what="the action verified")
    node = cluster.get("v1", "Node", NODE, namespace="") or {}
    assert node["metadata"]["labels"]["nvidia.com/device-plugin.config"] == "shared-4"
    assert node["status"]["allocatable"][SHARED] == "4" and "nvidia.com/gpu" not in node["status"]["allocatable"]
    assert not node["spec"].get("unschedulable"), "uncordoned once switched"
    states = [step["state"] for step in done["history"]]
    assert states == ["Planned", "WaitingForCheckpoint", "Applying", "Verifying", "Done"]
    details = done["details"]
    assert (details["nodes"], details["switchNode"], details["applied"]) == (NODE, NODE, "true")
    assert details["previousDevicePluginConfig"] == "", "the default config, to restore on a rollback"
    assert len(events(cluster, "CheckpointRequested", "vit")) == 1


def test_no_node_opted_in_for_time_slicing_no_checkpoint_no_restart(
    cluster: Cluster, operator: Operator, trainer: Trainer
) -> None:
    cluster.create(l4_node(opted_in=False), namespace="")
    job = start(cluster, pack_job())
    (event,) = eventually(lambda: events(cluster, "ActionNotTaken", "vit"), timeout=40, what="ActionNotTaken")
    assert "Pack for OversizedGPU not taken (NoSharedGpu)" in event["message"]
    assert "no node is opted in for time-slicing (label gpuwise.io/gpu-partitioning=time-slicing)" in event["message"]
    (recommendation,) = status_of(cluster, "vit")["recommendations"]
    assert recommendation["action"] == "Pack", "it stays a recommendation"
    assert last_action(cluster, "vit") == {}, "no action, no checkpoint request"
    assert trainer.project(cluster) == ""
    assert (job_of(cluster, "vit") or {})["metadata"]["uid"] == job["metadata"]["uid"]
    node = cluster.get("v1", "Node", NODE, namespace="") or {}
    assert "nvidia.com/device-plugin.config" not in node["metadata"]["labels"]
    assert not node["spec"].get("unschedulable")
