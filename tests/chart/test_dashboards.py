"""Every dashboard panel parses and shows data on a real Prometheus fed by simulated sidecars.

Two workers of one TrainingJob, each a real `gpuwise sidecar --backend simulated` with its own
training process (a real PyTorch loop on one, the manual instrumentation API on the other), are
scraped the way the chart's PodMonitor has Prometheus scrape them: its rendered relabelings and
metric relabelings, translated as the Prometheus Operator does (job `gpuwise-sidecar`, the
target's own pod and namespace labels, DCGM series naming the GPU's container). Prometheus also
loads the chart's alert rules: on this healthy job none of them may fire or even be pending.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from gpuwise.metrics import catalog
from gpuwise.metrics.promql import SIDECAR_JOB
from gpuwise.observability import DASHBOARDS
from tests.chart.support import CHART, prometheus_relabel_configs, sidecar_scrape_endpoint
from tests.sidecar.support import SidecarProcess, environment, sidecar
from tests.support.prometheus import Prometheus, running
from tests.support.waiting import eventually, get

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs prometheus (make system-deps)"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch (CPU build is enough)"),
]

NAMESPACE, JOB = "team", "resnet"
WORKERS = ("resnet-0-x7k2p", "resnet-1-q9m4z")
# The container each worker's GPUs work for, as the operator tells its sidecar: the trainer on the
# first; none on the second, as for an injected pod with several GPU containers.
GPU_CONTAINERS = ("trainer", "")
SIDECAR_CONTAINER = "gpuwise-sidecar"
# What Grafana puts in for its built-in variables, at this test's time scale.
BUILTINS = {"$__rate_interval": "20s", "$__interval_ms": "2000", "$__interval": "2s", "$__range": "40s"}

TORCH_TRAINER = textwrap.dedent(
    """
    import time, torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 10**9
        def __getitem__(self, i):
            time.sleep(0.002)
            return torch.randn(8), torch.randn(1)

    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in DataLoader(Slow(), batch_size=4):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.mse_loss(model(x).float(), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        time.sleep(0.01)
    """
)
MANUAL_TRAINER = textwrap.dedent(
    """
    import time
    from gpuwise import instrument
    while True:
        with instrument.data_wait():
            time.sleep(0.01)
        time.sleep(0.02)
        instrument.step_end(samples=16)
    """
)


@contextmanager
def prometheus(tmp: Path, sidecars: list[tuple[str, SidecarProcess]]) -> Iterator[Prometheus]:
    """A real Prometheus scraping the sidecars with the PodMonitor's labelling, rules loaded."""
    endpoint = sidecar_scrape_endpoint()
    targets = [
        {
            "targets": [f"127.0.0.1:{side.port}"],
            # What prometheus-operator sets from the pod: the target, not the exposition, is trusted.
            "labels": {
                "namespace": NAMESPACE,
                "pod": pod,
                "container": SIDECAR_CONTAINER,
                "endpoint": endpoint["port"],
            },
        }
        for pod, side in sidecars
    ]
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(CHART / "files" / "prometheus-rules.yaml")],
        "scrape_configs": [
            {
                "job_name": SIDECAR_JOB,
                "honor_labels": endpoint["honorLabels"],
                "static_configs": targets,
                "relabel_configs": prometheus_relabel_configs(endpoint["relabelings"]),
                "metric_relabel_configs": prometheus_relabel_configs(endpoint.get("metricRelabelings", [])),
            }
        ],
    }
    with running(tmp, config) as server:
        yield server


@contextmanager
def trainer(tmp: Path, side: SidecarProcess, script: str, mode: str) -> Iterator[None]:
    path = tmp / f"train_{mode}.py"
    path.write_text(script)
    process = subprocess.Popen([sys.executable, str(path)], env=side.trainer_env(mode), cwd=tmp, stderr=subprocess.PIPE)
    try:
        yield
    finally:
        process.terminate()
        process.wait(timeout=15)
        if process.stderr is not None:
            process.stderr.close()


@pytest.fixture(scope="module")
def server() -> Iterator[Prometheus]:
    import tempfile

    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gw-")))  # short: unix socket paths
        sides = []
        for index, (pod, scenario) in enumerate(zip(WORKERS, ("steady", "data-starved"), strict=True)):
            env = environment(
                GPUWISE_POD_NAME=pod,
                GPUWISE_POD_NAMESPACE=NAMESPACE,
                GPUWISE_TRAININGJOB=JOB,
                GPUWISE_WORKER_INDEX=str(index),
                GPUWISE_NODE_NAME=f"gpu-node-{index}",
                GPUWISE_CONTAINER=GPU_CONTAINERS[index],
            )
            work = tmp / f"w{index}"
            work.mkdir()
            args = (
                "--backend",
                "simulated",
                "--gpus",
                "2",
                "--scenario",
                scenario,
                "--interval",
                "0.5",
                "--seed",
                str(index),
            )
            sides.append((pod, stack.enter_context(sidecar(work, *args, env=env))))
        stack.enter_context(trainer(tmp, sides[0][1], TORCH_TRAINER, "auto"))
        stack.enter_context(trainer(tmp, sides[1][1], MANUAL_TRAINER, "manual"))
        yield stack.enter_context(prometheus(tmp, sides))


def fill(expr: str, variables: dict[str, str]) -> str:
    for name, value in {**BUILTINS, **variables}.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unfilled variable in {expr}"
    return expr


def variables(server: Prometheus) -> dict[str, str]:
    """Grafana's values for the gpuwise dashboards' variables, from their own queries."""
    filled: dict[str, str] = {}
    for dashboard in DASHBOARDS:
        for variable in dashboard.variables:
            if not variable.query:
                continue
            match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable.query)
            assert match, variable.query
            values = server.label_values(match[2], fill(match[1], filled | {"$namespace": NAMESPACE}))
            assert values, f"variable {variable.name} of {dashboard.title} has no values"
            filled[f"${variable.name}"] = values[0] if len(values) == 1 else "(" + "|".join(values) + ")"
    return filled


def test_gpuwise_dashboards_show_data(server: Prometheus) -> None:
    # Wait for rates over $__rate_interval to have their samples, and for the step metrics.
    eventually(
        lambda: server.query(f'rate(gpuwise_samples_total{{pod="{WORKERS[0]}"}}[20s]) > 0'), timeout=90, interval=1
    )
    eventually(
        lambda: server.query(f'rate(gpuwise_samples_total{{pod="{WORKERS[1]}"}}[20s]) > 0'), timeout=30, interval=1
    )
    values = variables(server)
    assert values["$namespace"] == NAMESPACE and values["$trainingjob"] == JOB
    assert values["$pod"] == "(" + "|".join(WORKERS) + ")"

    def empty() -> list[str]:
        missing = []
        for dashboard in DASHBOARDS:
            for panel, target in dashboard.targets():
                result = server.query(fill(target.expr, values))  # parses, or the query fails here
                if not result and not target.quiet:
                    missing.append(f"{dashboard.title} / {panel.title}: {target.expr}")
        return missing

    # Range panels need the time range filled with samples: give the last few a little time.
    last: list[str] = []

    def settled() -> bool:
        last[:] = empty()
        return not last

    try:
        eventually(settled, timeout=45, interval=2)
    except AssertionError:
        pytest.fail("panels without data:\n" + "\n".join(last))
    # Per-worker panels see both workers; the data-starved one waits longer for input.
    waits = server.query(fill(DASHBOARDS[1].rows[2].panels[3].targets[0].expr, values))
    assert {r["metric"]["pod"] for r in waits} == set(WORKERS)
    table = server.query(fill('max by (pod) (gpuwise_dataloader_batch_size{pod=~"$pod"})', values))
    assert [(r["metric"]["pod"], r["value"][1]) for r in table] == [(WORKERS[0], "4")]


def test_dcgm_dashboard_12239_shows_data_unchanged(server: Prometheus) -> None:
    dashboard = json.loads((CHART / "files" / "dashboards" / "dcgm-exporter.json").read_text())
    eventually(lambda: len(server.label_values("instance", "DCGM_FI_DEV_GPU_TEMP")) == 2, timeout=30)
    instances = server.label_values("instance", "DCGM_FI_DEV_GPU_TEMP")  # its $instance variable
    gpus = server.label_values("gpu", "DCGM_FI_DEV_GPU_TEMP")  # its $gpu variable
    pick = {"$instance": "|".join(instances), "$gpu": "|".join(gpus)}  # as Grafana fills a multi-value
    checked = 0
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            query = target["expr"]
            for variable, value in pick.items():
                query = query.replace(variable, value)
            assert server.query(query), f"panel {panel['title']!r} would be empty: {query}"
            checked += 1
    assert checked >= 8


def test_dcgm_series_name_the_gpu_s_container_and_gpuwise_series_the_sidecar(server: Prometheus) -> None:
    """dcgm-exporter's `container` is the GPU's user: the trainer, or nothing where none is known."""
    eventually(lambda: len(server.label_values("pod", "DCGM_FI_DEV_GPU_UTIL")) == 2, timeout=30)
    util = server.query("DCGM_FI_DEV_GPU_UTIL")
    assert {(r["metric"]["pod"], r["metric"].get("container")) for r in util} == {
        (WORKERS[0], GPU_CONTAINERS[0]),
        (WORKERS[1], None),  # not the sidecar: it only watches the GPUs
    }
    assert len(util) == 4
    # gpuwise's own series keep the target's container, the sidecar that produced them.
    info = server.query(catalog.SIDECAR_INFO.name)
    assert {r["metric"]["container"] for r in info} == {SIDECAR_CONTAINER} and len(info) == 2
    # No renamed copy is left on any series.
    assert server.query('{__name__=~".+", exported_container=~".+"}') == []
    assert server.query('{__name__=~".+", exported_pod=~".+"}') == []
    assert server.query('{__name__=~".+", exported_namespace=~".+"}') == []


def test_no_alert_fires_on_a_healthy_job(server: Prometheus) -> None:
    status, body = get(f"{server.url}/api/v1/rules")
    assert status == 200
    groups = json.loads(body)["data"]["groups"]
    assert {g["name"] for g in groups} == {"gpuwise-exporter", "gpuwise-operator", "gpuwise-efficiency"}
    assert all(rule["health"] == "ok" for g in groups for rule in g["rules"]), body
    eventually(lambda: server.query(f'up{{job="{SIDECAR_JOB}"}} == 1'), timeout=10)
    assert server.query("ALERTS") == []
    # The rules see the sidecars: the stall alert's expression has its operands.
    assert len(server.query("time() - gpuwise_sidecar_last_sample_timestamp_seconds < 60")) == 2
