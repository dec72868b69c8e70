"""Reschedule end to end: a straggling worker's job restarts away from its node.

A straggler shows only against minutes of history (per-worker step rates over a minute, a
baseline of dozens of samples), so the three workers' step times are backfilled into a real
Prometheus with `promtool tsdb create-blocks-from openmetrics`: steady at 1 s per step, until
worker 2 takes 2 s for the last three minutes. A real sidecar for worker 0 is scraped live; the
test answers the checkpoint request with the datagram a trainer would send it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuwise import wiring
from gpuwise.instrument import wire
from gpuwise.metrics import catalog
from tests.act.scenario import (
    events,
    in_state,
    job_of,
    operator_config,
    phase,
    show_log,
    start_operator,
    trainingjob,
)
from tests.integration.conftest import Cluster, Operator
from tests.sidecar.support import environment, sidecar
from tests.support.emulator import EmulatorThread
from tests.support.prometheus import AVAILABLE, Prometheus, running
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(not AVAILABLE, reason="needs prometheus (make system-deps)"),
]
NODES = ("gpu-n0", "gpu-n1", "gpu-n2")
HISTORY, INTERVAL, SLOW_FOR = 720, 5, 180


def step_history(end: int) -> str:
    """OpenMetrics: each worker's step-time summary (`_sum`, `_count`) every 5 s up to `end`."""
    name = catalog.STEP_DURATION.name
    lines = [f"# TYPE {name} summary"]
    for worker in range(3):
        labels = f'namespace="default",pod="llm-{worker}",trainingjob="llm",worker="{worker}",local_rank="0"'
        total = count = 0.0
        for k, stamp in enumerate(range(end - HISTORY, end + 1, INTERVAL)):
            jitter = 1 + 0.01 * ((k * 7 + worker * 3) % 5 - 2)  # ±2 %: workers are never perfectly even
            seconds = (2.0 if worker == 2 and stamp > end - SLOW_FOR else 1.0) * jitter
            total, count = total + INTERVAL, count + INTERVAL / seconds
            lines.append(f"{name}_sum{{{labels}}} {total:.3f} {stamp}")
            lines.append(f"{name}_count{{{labels}}} {count:.3f} {stamp}")
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def straggling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, Path]]:
    tmp = tmp_path_factory.mktemp("straggler")
    (tmp / "history.txt").write_text(step_history(int(time.time()) - 1))
    promtool = shutil.which("promtool") or "promtool"
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp / "history.txt"), str(tmp / "data")],
        check=True,
        capture_output=True,
    )
    labels = {
        "GPUWISE_POD_NAME": "llm-0",
        "GPUWISE_POD_NAMESPACE": "default",
        "GPUWISE_TRAININGJOB": "llm",
        "GPUWISE_WORKER_INDEX": "0",
    }
    args = ("--backend", "simulated", "--gpus", "1", "--interval", "1")
    with sidecar(tmp / "side", *args, env=environment(**labels)) as side:
        config = {
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": "gpuwise-sidecar",
                    "honor_labels": True,
                    "static_configs": [{"targets": [f"127.0.0.1:{side.port}"]}],
                }
            ],
        }
        with running(tmp, config) as server:
            eventually(lambda: server.query(f"{catalog.STEP_DURATION.name}_count"), what="the backfilled history")
            yield server, side.socket


@pytest.fixture
def operator(emulator: EmulatorThread, straggling: tuple[Prometheus, Path], tmp_path: Path) -> Iterator[Operator]:
    # The history is sampled every 5 s and read at 15 s, as a production scrape interval would be:
    # at a finer step, per-minute rates ramp over dozens of points and a baseline follows the ramp.
    config = operator_config(tmp_path)
    running_operator = start_operator(emulator, tmp_path, straggling[0], config, query_step=15)
    yield running_operator
    running_operator.stop()
    show_log(running_operator)


def run_workers(cluster: Cluster, job: dict[str, Any], nodes: tuple[str, ...]) -> None:
    """Play the Job controller and the kubelet: one running pod per worker, on `nodes`."""
    meta = job["metadata"]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"], "controller": True}
    cluster.patch("batch/v1", "Job", meta["name"], {"status": {"startTime": "2026-01-01T00:00:00Z"}}, status=True)
    template = job["spec"]["template"]
    for index, node in enumerate(nodes):
        marks = {wiring.JOB_COMPLETION_INDEX_ANNOTATION: str(index)}
        name = f"{meta['name']}-{index}-{meta['uid'][:5]}"
        metadata = {
            "name": name,
            "labels": {**template["metadata"]["labels"], **marks},
            "annotations": marks,
            "ownerReferences": [owner],
        }
        cluster.create(
            {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {**template["spec"], "nodeName": node}}
        )
        cluster.patch("v1", "Pod", name, {"status": {"phase": "Running"}}, status=True)


def acknowledge(sock: Path, request_id: str) -> None:
    """What worker 0's trainer sends its sidecar once the checkpoint is saved."""
    ack = wire.CheckpointAck(os.getpid(), 0, 0, request_id, f"/ckpt/{request_id}.pt")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as out:
        out.sendto(wire.encode_ack(ack), str(sock))


def test_a_straggler_is_rescheduled_away_from_its_node(
    cluster: Cluster, operator: Operator, straggling: tuple[Prometheus, Path]
) -> None:
    body = trainingjob("llm", efficiency={"window": "10m", "actions": ["Reschedule"]})
    body["spec"]["trainer"]["numNodes"] = 3
    cluster.create(body)
    job = eventually(lambda: job_of(cluster, "llm"), what="the Job")
    run_workers(cluster, job, NODES)
    eventually(lambda: phase(cluster, "llm") == "Running", what="phase Running")

    waiting = eventually(lambda: in_state(cluster, "llm", "WaitingForCheckpoint"), timeout=30, what="Reschedule")
    assert (waiting["action"], waiting["finding"]) == ("Reschedule", "Straggler")
    assert waiting["details"] == {"worker": "2", "node": "gpu-n2"}
    pods = cluster.list("v1", "Pod", label_selector=f"{wiring.LABEL_TRAININGJOB}=llm")
    assert {p["metadata"]["annotations"][wiring.ANNOTATION_CHECKPOINT_REQUEST] for p in pods} == {waiting["id"]}
    acknowledge(straggling[1], waiting["id"])

    new = eventually(
        lambda: (j := job_of(cluster, "llm")) and j["metadata"]["uid"] != job["metadata"]["uid"] and j,
        timeout=20,
        what="the replacement Job",
    )
    affinity = new["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-n2"]}]
    run_workers(cluster, new, ("gpu-n0", "gpu-n1", "gpu-n3"))
    done = eventually(lambda: in_state(cluster, "llm", "Done"), timeout=30, what="the action done")
    assert done["overridesTarget"]["avoidNodes"] == ["gpu-n2"]
    assert done["checkpointAcknowledgedAt"]
    assert events(cluster, "JobRestarted", "llm")
    assert yaml.safe_dump(done)  # the record is plain data, as kubectl shows it
