"""What the action scenarios run: real trainers and sidecars, a real Prometheus, the real operator.

Each job identity (namespace, TrainingJob) has a real sidecar (simulated GPU) and a real training
process that uses `gpuwise.instrument` the way a user would: it reports input-bound steps and
registers `on_checkpoint`. The test plays the kubelet: it copies the pods' checkpoint-request
annotation into the trainer's request file, as the downward-API volume would, and the trainer
acknowledges through the sidecar, which Prometheus scrapes. The operator sees only Prometheus
and the emulated API server, as in a cluster. The trainer's data wait is read from a control
file, so a test can make the job slower (a change that made things worse).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from gpuwise import wiring
from tests.integration.conftest import Cluster, Operator
from tests.sidecar.support import ROOT, environment, sidecar
from tests.support.emulator import EmulatorThread
from tests.support.prometheus import Prometheus, running
from tests.support.waiting import eventually

TJ_API = "gpuwise.io/v1alpha1"
# The simulated sidecar's GPU (its arguments): what the trainers' GPUs do.
DATA_STARVED = ("--gpus", "1", "--scenario", "data-starved")
FAST_WAIT = 0.03  # seconds of data wait per step: input-bound, about 25 steps/s
TRAINER = textwrap.dedent(
    """
    import os, pathlib, sys, time
    from gpuwise import instrument

    control = pathlib.Path(sys.argv[1])
    instrument.on_checkpoint(lambda request_id: f"/checkpoints/{request_id}.pt")
    wait, looked = 0.03, 0.0
    while True:
        if time.monotonic() - looked > 0.5:
            looked = time.monotonic()
            try:
                wait = float(control.read_text())
            except (OSError, ValueError):
                pass
        with instrument.data_wait():
            time.sleep(wait)
        time.sleep(0.01)
        instrument.step_end(samples=16)
    """
)


@dataclass
class Trainer:
    """One worker's telemetry: its identity, request file (the downward API) and speed control."""

    namespace: str
    name: str
    request_file: Path
    control: Path

    def project(self, cluster: Cluster) -> str:
        """Play the kubelet: the worker-0 pod's checkpoint-request annotation into the request file."""
        pods = pods_of(cluster, self.name, self.namespace)
        value = ""
        for pod in pods:
            if pod["metadata"]["labels"].get(wiring.JOB_COMPLETION_INDEX_ANNOTATION) == "0":
                value = (pod["metadata"].get("annotations") or {}).get(wiring.ANNOTATION_CHECKPOINT_REQUEST, "")
        if self.request_file.read_text() != value:
            self.request_file.write_text(value)
        return value

    def slow_down(self, wait: float) -> None:
        self.control.write_text(str(wait))


@contextmanager
def trainer(
    tmp: Path, namespace: str, name: str, gpu: tuple[str, ...] = DATA_STARVED, wait: float = FAST_WAIT
) -> Iterator[tuple[Trainer, int]]:
    """A sidecar and an instrumented training process for worker 0 of `namespace/name`."""
    labels = {
        "GPUWISE_POD_NAME": f"{name}-0",
        "GPUWISE_POD_NAMESPACE": namespace,
        "GPUWISE_TRAININGJOB": name,
        "GPUWISE_WORKER_INDEX": "0",
    }
    args = ("--backend", "simulated", *gpu, "--interval", "1")
    (tmp / name).mkdir()
    handle = Trainer(namespace, name, tmp / name / "checkpoint-request", tmp / name / "control")
    handle.request_file.write_text("")
    handle.control.write_text(str(wait))
    with sidecar(tmp / name, *args, env=environment(**labels)) as side:
        env = {**side.trainer_env("manual"), wiring.ENV_CHECKPOINT_REQUEST_FILE: str(handle.request_file)}
        process = subprocess.Popen([sys.executable, "-c", TRAINER, str(handle.control)], env=env, cwd=ROOT)
        try:
            yield handle, side.port
        finally:
            process.terminate()
            process.wait(timeout=10)


@contextmanager
def telemetry(
    tmp: Path, jobs: list[tuple[str, str]], gpu: tuple[str, ...] = DATA_STARVED, wait: float = FAST_WAIT
) -> Iterator[tuple[Prometheus, dict[str, Trainer]]]:
    """Trainers for `jobs` and a Prometheus scraping their sidecars every second; `gpu` are the
    simulated sidecars' GPU arguments, `wait` the seconds each step first waits for input."""
    with ExitStack() as stack:
        trainers: dict[str, Trainer] = {}
        targets = []
        for namespace, name in jobs:
            handle, port = stack.enter_context(trainer(tmp, namespace, name, gpu, wait))
            trainers[name] = handle
            targets.append(f"127.0.0.1:{port}")
        config = {
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [
                {"job_name": "gpuwise-sidecar", "honor_labels": True, "static_configs": [{"targets": targets}]}
            ],
        }
        server = stack.enter_context(running(tmp, config))
        for _, name in jobs:
            eventually(
                lambda n=name: server.query(f'gpuwise_data_wait_ratio{{trainingjob="{n}"}}'),  # type: ignore[misc]
                timeout=30,
                what="step metrics",
            )
        time.sleep(6)  # a window's worth of input-bound samples
        yield server, trainers


@contextmanager
def light_telemetry(
    tmp: Path, name: str, values: Mapping[str, float], *sidecar: str
) -> Iterator[tuple[Prometheus, Trainer]]:
    """Worker 0 of default/`name` computing lightly and never waiting on input (so a share of a GPU
    is the fix, not more DataLoader workers): its simulated sidecar replays `values` (with
    `sidecar`, more of its arguments, e.g. `--model L4`), and Prometheus scrapes it."""
    trace = tmp / f"{name}.jsonl"
    trace.write_text("".join(json.dumps({"t": t, "gpu": 0, "values": dict(values)}) + "\n" for t in (0.0, 1.0)))
    with telemetry(tmp, [("default", name)], ("--trace", str(trace), *sidecar), wait=0.0) as (prometheus, trainers):
        yield prometheus, trainers[name]


def operator_config(tmp: Path, **actions: Any) -> Path:
    """Operator settings with the short windows these tests need, plus `actions` overrides."""
    settings = {
        "cooldown": "1h",
        "minRuntime": "1s",
        "verifyWindow": "4s",
        "worseTolerance": 0.3,
        "budgets": [{"jobs": "1"}],
        **actions,
    }
    path = tmp / "operator.yaml"
    path.write_text(yaml.safe_dump({"actions": settings}))
    return path


def show_log(operator: Operator) -> None:
    """With GPUWISE_SHOW_OPERATOR_LOG set, the operator's log goes to the test's stderr."""
    if os.environ.get("GPUWISE_SHOW_OPERATOR_LOG"):
        sys.stderr.write(operator.log())


def start_operator(
    emulator: EmulatorThread, tmp: Path, prometheus: Prometheus, config: Path, query_step: int = 1
) -> Operator:
    """The operator evaluating every second; `query_step` as Prometheus' scrape interval (1 s here)."""
    args = [
        f"--prometheus-url={prometheus.url}",
        "--evaluate-seconds=1",
        f"--query-step-seconds={query_step}",
        f"--config={config}",
    ]
    return Operator(emulator, tmp / "operator.log", args).start()


# --- the TrainingJob and the kubelet ------------------------------------------------------------


def trainingjob(name: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    """An Enforce-mode, input-bound job that may AdjustConfig its DataLoader workers."""
    efficiency = {
        "mode": "Enforce",
        "window": "6s",
        "actions": ["AdjustConfig"],
        "tunables": {"dataLoaderWorkers": {"env": "NUM_WORKERS", "min": 1, "max": 16}},
    }
    body: dict[str, Any] = {
        "apiVersion": TJ_API,
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "trainer": {
                "image": "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
                "numNodes": 1,
                "env": [{"name": "NUM_WORKERS", "value": "1"}],
                "resourcesPerNode": {"limits": {"cpu": "8", "nvidia.com/gpu": 1}},
            },
            "checkpoint": {"enabled": True, "timeoutSeconds": 60},
            "efficiency": efficiency,
            "telemetry": {"sampleIntervalSeconds": 1},
        },
    }
    for key, value in spec.items():
        section = body["spec"].setdefault(key, {})
        section.update(value)
    return body


def job_of(cluster: Cluster, name: str, namespace: str = "default") -> dict[str, Any] | None:
    return cluster.get("batch/v1", "Job", name, namespace)


def uid_of_job(cluster: Cluster, name: str, namespace: str = "default") -> str | None:
    job = job_of(cluster, name, namespace)
    return job["metadata"]["uid"] if job else None


def pods_of(cluster: Cluster, name: str, namespace: str = "default") -> list[dict[str, Any]]:
    return cluster.list("v1", "Pod", namespace, label_selector=f"{wiring.LABEL_TRAININGJOB}={name}")


def run_job(cluster: Cluster, job: dict[str, Any], node: str = "gpu-node-a") -> None:
    """Play the Job controller and kubelet: worker 0's pod, owned by the Job, running on `node`."""
    meta = job["metadata"]
    namespace = meta["namespace"]
    an_hour_ago = (datetime.now(tz=UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster.patch(
        "batch/v1",
        "Job",
        meta["name"],
        {"status": {"startTime": an_hour_ago, "active": 1}},
        status=True,
        namespace=namespace,
    )
    template = job["spec"]["template"]
    index = {wiring.JOB_COMPLETION_INDEX_ANNOTATION: "0"}
    pod_name = f"{meta['name']}-0-{meta['uid'][:5]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "labels": {**template["metadata"]["labels"], **index},
            "annotations": {**(template["metadata"].get("annotations") or {}), **index},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"], "controller": True}
            ],
        },
        "spec": {**template["spec"], "nodeName": node},
    }
    cluster.create(pod, namespace=namespace)
    cluster.patch("v1", "Pod", pod_name, {"status": {"phase": "Running"}}, status=True, namespace=namespace)


def start(cluster: Cluster, body: dict[str, Any]) -> dict[str, Any]:
    """Create the TrainingJob, run its Job, and wait until it is Running; the Job it runs."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    cluster.create(body, namespace=namespace)
    job = eventually(lambda: job_of(cluster, name, namespace), what="the Job")
    run_job(cluster, job)
    eventually(lambda: phase(cluster, name, namespace) == "Running", what="phase Running")
    return job


def status_of(cluster: Cluster, name: str, namespace: str = "default") -> dict[str, Any]:
    return (cluster.get(TJ_API, "TrainingJob", name, namespace) or {}).get("status") or {}


def phase(cluster: Cluster, name: str, namespace: str = "default") -> str | None:
    return status_of(cluster, name, namespace).get("phase")


def actions_of(cluster: Cluster, name: str, namespace: str = "default") -> list[dict[str, Any]]:
    return list(status_of(cluster, name, namespace).get("actions") or [])


def last_action(cluster: Cluster, name: str, namespace: str = "default") -> dict[str, Any]:
    actions = actions_of(cluster, name, namespace)
    return actions[-1] if actions else {}


def in_state(cluster: Cluster, name: str, state: str, namespace: str = "default") -> dict[str, Any] | None:
    record = last_action(cluster, name, namespace)
    return record if record.get("state") == state else None


def events(cluster: Cluster, reason: str, name: str, namespace: str = "default") -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.list("v1", "Event", namespace)
        if e.get("reason") == reason and (e.get("involvedObject") or {}).get("name") == name
    ]


def env_of(job: dict[str, Any]) -> dict[str, str]:
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in trainer.get("env", [])}
