"""A rendered two-node TrainingJob really trains: torchrun's rendezvous forms, a gloo DDP job runs to
its end on the CPU, and each worker's sidecar counts every one of its ranks' steps, none twice.

The Job comes from the operator's own `render_job`. Each worker is the pod the Job controller makes
for its completion index (`tests.support.kubelet`), and its two containers run as local processes
with the command, arguments and environment the kubelet would give them (downward-API fields
resolved, `$(VAR)`s expanded), the sidecar started first and the trainer only once the sidecar
answers its startup probe's `/healthz`, as in the pod. Nothing of the rendered spec is taken on
trust, and only these are rewritten, each because a local process cannot have what a pod has:

- **The rendezvous host** (`PET_MASTER_ADDR`, `MASTER_ADDR`): worker 0's DNS name under the
  headless Service, computed here from pod 0's hostname, subdomain and namespace (not copied from
  the operator), becomes 127.0.0.1: no cluster DNS here, and both workers share this host. A value
  that is not exactly that name stays as it is, and the rendezvous would fail.
- **The rendezvous port** (`PET_MASTER_PORT`, `MASTER_PORT`): a value equal to the trainer's
  declared `rendezvous` containerPort becomes one free port, the same for both workers: 29500 is
  not ours to take on a shared machine, and two pods' ports are not two hosts' here.
- **Paths the pod mounts**: every volume becomes a directory of its own per worker (an emptyDir an
  empty one, the downward-API volume its projected files), and each container's `mountPath` of it,
  wherever it starts an env value or an argument (after `=` or `:`, as in `--socket=` and
  `PYTHONPATH`), becomes that directory: the trainer's socket, request file and pod-GPUs directory
  meet the sidecar's own through the volume they share, or the test fails.
- **The image's programs**: the trainer's `torchrun` is `python -m torch.distributed.run`, and the
  sidecar image's entrypoint `gpuwise` is `python -m gpuwise.cli`, both with `sys.executable`;
  the trainer's `workingDir` (the image's `/workspace`, holding `train.py`) is a per-worker
  directory with the script.
- **The sidecar's GPU backend and port**: `--backend=nvml` is `--backend=simulated` (no GPU here;
  steps do not depend on it) and `--port=9400` a free loopback port (two pods' 9400s on one host).
- **The image's environment** is this process's, less whatever gpuwise or torchrun read from it
  (`tests.sidecar.support.environment`, and `PET_*`/`TORCHELASTIC_*`), so only rendered values steer them.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from gpuwise import wiring
from gpuwise.api.trainingjob import TrainingJobSpec
from gpuwise.operator import workload
from gpuwise.operator.config import SidecarSettings
from tests.sidecar.support import Series, environment, select, sidecar
from tests.support import kubelet
from tests.support.waiting import eventually, free_port


def _gloo_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch.distributed

    return bool(torch.distributed.is_available() and torch.distributed.is_gloo_available())


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not _gloo_available(), reason="needs PyTorch with torch.distributed and gloo (CPU is enough)"),
]

NAME: Final = "ddp"
NAMESPACE: Final = "research"
NODES: Final = 2
PROCS_PER_NODE: Final = 2
STEPS: Final = 300
WORKSPACE: Final = "/workspace"  # the image's working directory, holding train.py
LOOPBACK: Final = "127.0.0.1"
TRAINING_TIMEOUT: Final = 150.0

# The user's training script: plain torch.distributed, not a line of gpuwise (instrumentation: Auto
# counts optimizer steps). Every rank prints what it was and what it did as one JSON line; the
# checksum of its parameters, the same on every rank only if DDP averaged the gradients across nodes.
TRAIN: Final = textwrap.dedent(
    """
    import argparse, json, os
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    steps = parser.parse_args().steps
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(rank)  # each rank its own data
    done = 0
    for _ in range(steps):
        x = torch.randn(8, 16, generator=generator)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        done += 1
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    dist.barrier()
    dist.destroy_process_group()
    books = {
        "rank": rank,
        "world_size": world,
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "node_rank": int(os.environ["GROUP_RANK"]),
        "steps": done,
        "checksum": round(checksum, 9),
    }
    # One write of the whole line: the worker's ranks share its stdout, and print()'s separate
    # newline let two ranks' lines run together.
    os.write(1, (json.dumps(books) + "\\n").encode())
    """
)

OWNER: Final = {
    "apiVersion": f"{wiring.API_GROUP}/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "u-ddp"},
}


def render() -> dict[str, Any]:
    """The operator's Job for a two-node job whose image runs `torchrun train.py` in /workspace."""
    spec = TrainingJobSpec.model_validate(
        {
            "trainer": {
                "image": "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
                "command": ["torchrun"],
                "args": ["train.py", f"--steps={STEPS}"],
                "workingDir": WORKSPACE,
                "numNodes": NODES,
                "numProcPerNode": PROCS_PER_NODE,
            },
            "telemetry": {"instrumentation": "Auto"},
        }
    )
    return workload.render_job(OWNER, spec, SidecarSettings())


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        c for c in (*pod["spec"]["initContainers"], *pod["spec"]["containers"]) if c["name"] == name
    ]
    assert len(found) == 1, f"{len(found)} containers named {name}"
    return found[0]


@dataclass(frozen=True)
class Local:
    """This machine's stand-ins for a pod's rendezvous address and volumes (module docstring)."""

    rendezvous_host: str
    rendezvous_port: str
    port: str
    volumes: Mapping[str, Path]  # a volume's name -> its directory

    @classmethod
    def of(cls, pod: dict[str, Any], pod0: dict[str, Any], volumes: Mapping[str, Path], port: int) -> Local:
        trainer = container(pod, workload.TRAINER_CONTAINER)
        declared = [p["containerPort"] for p in trainer["ports"] if p["name"] == workload.RENDEZVOUS_PORT_NAME]
        assert len(declared) == 1, "the trainer declares its rendezvous port"
        return cls(kubelet.dns_name(pod0), str(declared[0]), str(port), volumes)

    def value(self, text: str, spec: dict[str, Any]) -> str:
        """An env value of container `spec`: the rendezvous address or a path of its mounts."""
        if text == self.rendezvous_host:
            return LOOPBACK
        if text == self.rendezvous_port:
            return self.port
        return self.path(text, spec)

    def path(self, text: str, spec: dict[str, Any]) -> str:
        """`text` with each of container `spec`'s mount paths, where one starts a path, on its volume."""
        for mount in spec.get("volumeMounts", []):
            directory = str(self.volumes[mount["name"]])
            text = re.sub(rf"(?<![^:=]){re.escape(mount['mountPath'])}(?=[/:]|$)", directory, text)
        return text


def image_environment() -> dict[str, str]:
    """This process's environment as the image's: nothing gpuwise or torchrun would read from it."""
    return {k: v for k, v in environment().items() if not k.startswith(("PET_", "TORCHELASTIC_"))}


@dataclass(frozen=True)
class Worker:
    """One pod of the Job, as local processes: its sidecar's arguments and env, its trainer's command."""

    index: int
    pod: dict[str, Any]
    directory: Path
    runtime: Path
    sidecar_args: list[str]
    sidecar_env: dict[str, str]
    trainer_argv: list[str]
    trainer_env: dict[str, str]
    trainer_cwd: Path


def worker(job: dict[str, Any], index: int, root: Path, port: int) -> Worker:
    pod = kubelet.indexed_pod(job, index, node=f"node-{index}")
    pod0 = kubelet.indexed_pod(job, 0, node="node-0")
    directory = root / f"w{index}"
    volumes = kubelet.materialize_volumes(pod, directory)

    local = Local.of(pod, pod0, volumes, port)

    side = container(pod, wiring.SIDECAR_CONTAINER)
    side_env = kubelet.container_env(pod, side)
    command, args = kubelet.container_argv(side, side_env)
    assert command == [] and args[0] == "sidecar", "the image's entrypoint runs `gpuwise sidecar`"
    assert f"--port={wiring.METRICS_PORT}" in args and "--backend=nvml" in args
    sidecar_args = [
        "--backend=simulated" if arg == "--backend=nvml" else local.path(arg, side)
        for arg in args[1:]
        if arg != f"--port={wiring.METRICS_PORT}"
    ]

    trainer = container(pod, workload.TRAINER_CONTAINER)
    trainer_env = {name: local.value(value, trainer) for name, value in kubelet.container_env(pod, trainer).items()}
    command, args = kubelet.container_argv(trainer, trainer_env)
    assert command == ["torchrun"], command
    workspace = directory / "workspace"
    workspace.mkdir()
    (workspace / "train.py").write_text(TRAIN)
    assert trainer["workingDir"] == WORKSPACE
    return Worker(
        index=index,
        pod=pod,
        directory=directory,
        runtime=volumes[wiring.RUNTIME_VOLUME],
        sidecar_args=sidecar_args,
        sidecar_env={**image_environment(), **side_env},
        trainer_argv=[sys.executable, "-m", "torch.distributed.run", *(local.path(a, trainer) for a in args)],
        trainer_env={**image_environment(), **trainer_env},
        trainer_cwd=workspace,
    )


@dataclass
class Run:
    worker: Worker
    process: subprocess.Popen[bytes]

    @property
    def stdout(self) -> str:
        return (self.worker.directory / "stdout").read_text()

    @property
    def stderr(self) -> str:
        return (self.worker.directory / "stderr").read_text()


def start(w: Worker) -> Run:
    """The trainer container's process, in its own session so that torchrun's workers go with it."""
    with (w.directory / "stdout").open("wb") as out, (w.directory / "stderr").open("wb") as err:
        process = subprocess.Popen(
            w.trainer_argv, env=w.trainer_env, cwd=w.trainer_cwd, stdout=out, stderr=err, start_new_session=True
        )
    return Run(w, process)


def finish(runs: list[Run], timeout: float) -> None:
    """Wait for every trainer to exit, but no longer than `timeout`, nor once one has failed (its peers
    would wait for the rendezvous or a collective until theirs timed out): then kill the process group
    of each one still running (torchrun and its ranks)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        codes = [run.process.poll() for run in runs]
        if None not in codes or any(code not in (None, 0) for code in codes):
            break
        time.sleep(0.2)
    for run in runs:
        if run.process.poll() is None:
            os.killpg(run.process.pid, signal.SIGKILL)
            run.process.wait()


def steps_by_local_rank(series: list[Series]) -> dict[str, float]:
    found = select(series, "gpuwise_steps_total")
    ranks = [s.labels.get("local_rank", "") for s in found]
    assert len(ranks) == len(set(ranks)), f"one series per local rank: {found}"
    return dict(zip(ranks, (s.value for s in found), strict=True))


def test_a_two_node_job_rendezvouses_trains_and_every_rank_is_counted(short_tmp: Path) -> None:
    job = render()
    port = free_port()
    workers = [worker(job, index, short_tmp, port) for index in range(NODES)]
    expected_ranks = {str(local): float(STEPS) for local in range(PROCS_PER_NODE)}
    with ExitStack() as stack:
        sidecars = [
            stack.enter_context(sidecar(w.directory, *w.sidecar_args, env=w.sidecar_env, runtime=w.runtime))
            for w in workers
        ]
        runs = [start(w) for w in workers]
        finish(runs, TRAINING_TIMEOUT)
        failed = [f"worker {r.worker.index} exited {r.process.returncode}:\n{r.stderr[-3000:]}" for r in runs]
        assert all(r.process.returncode == 0 for r in runs), "\n".join(failed)

        def counted(index: int) -> list[Series] | None:
            series = sidecars[index].scrape()
            return series if sum(steps_by_local_rank(series).values()) >= STEPS * PROCS_PER_NODE else None

        scrapes = [eventually(functools.partial(counted, i), what=f"worker {i}'s steps") for i in range(NODES)]

    books = [[json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")] for run in runs]
    every_rank = sorted(b["rank"] for node in books for b in node)
    assert every_rank == list(range(NODES * PROCS_PER_NODE)), "every rank ran, each once"
    assert {b["world_size"] for node in books for b in node} == {NODES * PROCS_PER_NODE}
    assert len({b["checksum"] for node in books for b in node}) == 1, "DDP kept every replica the same"
    for index, (w, node, series) in enumerate(zip(workers, books, scrapes, strict=True)):
        assert {b["node_rank"] for b in node} == {index}, "the node rank is the pod's completion index"
        assert sorted(b["local_rank"] for b in node) == list(range(PROCS_PER_NODE))
        assert all(b["steps"] == STEPS for b in node)
        assert steps_by_local_rank(series) == expected_ranks, f"worker {index}: every rank's steps, none twice"
        labels = select(series, "gpuwise_steps_total")[0].labels
        assert (labels["worker"], labels["pod"]) == (str(index), w.pod["metadata"]["name"])
        assert (labels["trainingjob"], labels["namespace"]) == (NAME, NAMESPACE)
