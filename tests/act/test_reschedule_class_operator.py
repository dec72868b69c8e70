"""Reschedule to a smaller GPU class end to end: the real operator moves a job that barely uses its
H100 onto the platform's L40S nodes.

The platform declares two classes, L40S and L4 (`actions.gpuClasses`, selected by
`nvidia.com/gpu.product`). A real sidecar replays a light H100 trace (2 % busy, 9,000 MiB at
peak), a real instrumented trainer steps and answers the checkpoint request, a real Prometheus
scrapes them. The job lists only Reschedule, so OversizedGPU recommends a class rather than a MIG
slice: the L4 would hold the memory, but from an H100 its work may take 11x longer (memory
bandwidth), too slow at 2 % busy; the L40S keeps the steps within 10 %. In Enforce mode the
operator checkpoints the job and restarts it with the L40S class's node selector.
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
    light_telemetry,
    operator_config,
    run_job,
    start,
    start_operator,
    status_of,
    trainingjob,
)
from tests.integration.conftest import Cluster, Operator
from tests.support.emulator import EmulatorThread
from tests.support.prometheus import AVAILABLE, Prometheus
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(not AVAILABLE, reason="needs prometheus (make system-deps)"),
]

PRODUCT = "nvidia.com/gpu.product"
CLASSES = [
    {"name": "l40s", "nodeSelector": {PRODUCT: "NVIDIA-L40S"}},
    {"name": "l4", "nodeSelector": {PRODUCT: "NVIDIA-L4"}, "gpuModel": "NVIDIA L4"},
]
BARELY_BUSY_H100 = {
    "DCGM_FI_DEV_GPU_UTIL": 2.0,
    "DCGM_FI_PROF_SM_ACTIVE": 0.01,
    "DCGM_FI_PROF_SM_OCCUPANCY": 0.01,
    "DCGM_FI_DEV_FB_USED": 9000.0,
    "DCGM_FI_DEV_FB_FREE": 72047.0,
    "DCGM_FI_DEV_FB_RESERVED": 512.0,
    "DCGM_FI_DEV_POWER_USAGE": 80.0,
    "DCGM_FI_DEV_GPU_TEMP": 35.0,
}


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, Trainer]]:
    with light_telemetry(tmp_path_factory.mktemp("smaller"), "vit", BARELY_BUSY_H100, "--model", "H100") as running:
        yield running


@pytest.fixture
def operator(emulator: EmulatorThread, light: tuple[Prometheus, Trainer], tmp_path: Path) -> Iterator[Operator]:
    running = start_operator(emulator, tmp_path, light[0], operator_config(tmp_path, gpuClasses=CLASSES))
    yield running
    running.stop()


def reschedule_job() -> dict[str, Any]:
    body = trainingjob("vit", efficiency={"actions": ["Reschedule"], "tunables": {}})
    body["spec"]["pod"] = {"nodeSelector": {PRODUCT: "NVIDIA-H100-80GB-HBM3", "team": "vision"}}
    return body


def test_an_oversized_job_is_rescheduled_to_the_smallest_class_that_keeps_its_steps(
    cluster: Cluster, operator: Operator, trainer: Trainer
) -> None:
    job = start(cluster, reschedule_job())
    assert job["spec"]["template"]["spec"]["nodeSelector"][PRODUCT] == "NVIDIA-H100-80GB-HBM3"
    waiting = eventually(
        lambda: in_state(cluster, "vit", "WaitingForCheckpoint"), timeout=40, what="a checkpoint request"
    )
    assert (waiting["action"], waiting["finding"]) == ("Reschedule", "OversizedGPU")
    assert waiting["changes"] == {"gpuClass": "l40s"}
    assert waiting["overridesTarget"]["nodeSelector"] == {PRODUCT: "NVIDIA-L40S"}
    assert "steps at most 6% longer on the NVIDIA L40S" in waiting["expectedEffect"]
    (recommendation,) = [r for r in status_of(cluster, "vit")["recommendations"] if r["finding"] == "OversizedGPU"]
    assert (recommendation["action"], recommendation["changes"]) == ("Reschedule", {"gpuClass": "l40s"})
    assert "frees 1 NVIDIA H100 80GB HBM3 GPU(s)" in recommendation["expectedEffect"]
    eventually(lambda: trainer.project(cluster) == waiting["id"], what="the request on the pod")

    # Worker 0 answers the handshake; the Job is replaced by one whose pods select the L40S nodes.
    new_job = eventually(
        lambda: (j := job_of(cluster, "vit")) and j["metadata"]["uid"] != job["metadata"]["uid"] and j,
        timeout=30,
        what="the Job restarted on the smaller class",
    )
    selector = new_job["spec"]["template"]["spec"]["nodeSelector"]
    assert selector == {PRODUCT: "NVIDIA-L40S", "team": "vision"}, "the class replaces the spec's product"
    run_job(cluster, new_job, node="l40s-node")
    done = eventually(lambda: in_state(cluster, "vit", "Done"), timeout=30, what="the action verified")
    states = [step["state"] for step in done["history"]]
    assert states == ["Planned", "WaitingForCheckpoint", "Applying", "Verifying", "Done"]
    assert done["checkpointAcknowledgedAt"]
    assert len(events(cluster, "CheckpointRequested", "vit")) == 1
    assert events(cluster, "JobRestarted", "vit")
