"""A real Prometheus (the Debian package) scrapes a real sidecar on loopback; queries see it all."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sidecar.support import ROOT, SidecarProcess, sidecar
from tests.sidecar.test_exposition import DASHBOARD
from tests.support.prometheus import Prometheus, running
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs prometheus (make system-deps)"),
]


@pytest.fixture
def side(short_tmp: Path) -> Iterator[SidecarProcess]:
    env = {"GPUWISE_POD_NAME": "job-worker-1", "GPUWISE_POD_NAMESPACE": "team", "GPUWISE_TRAININGJOB": "job"}
    from tests.sidecar.support import environment

    with sidecar(short_tmp, "--backend", "simulated", "--gpus", "2", "--interval", "0.5", env=environment(**env)) as s:
        yield s


@pytest.fixture
def prometheus(short_tmp: Path, side: SidecarProcess) -> Iterator[Prometheus]:
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "gpuwise", "honor_labels": True, "static_configs": [{"targets": [f"127.0.0.1:{side.port}"]}]}
        ],
    }
    with running(short_tmp, config) as server:
        eventually(lambda: server.query('up{job="gpuwise"} == 1'), timeout=30, what="the first scrape")
        yield server


def test_prometheus_scrapes_devices_and_steps(side: SidecarProcess, prometheus: Prometheus) -> None:
    trainer = "from gpuwise import instrument\nfor _ in range(25):\n    instrument.step_end(samples=8)\n"
    subprocess.run([sys.executable, "-c", trainer], env=side.trainer_env("manual"), cwd=ROOT, check=True, timeout=60)

    steps = eventually(lambda: prometheus.query('gpuwise_steps_total{trainingjob="job"} == 25'), timeout=20)
    assert steps[0]["metric"]["pod"] == "job-worker-1"
    assert prometheus.query("gpuwise_samples_total")[0]["value"][1] == "200"
    assert prometheus.query("histogram_quantile(0.5, gpuwise_step_duration_seconds_bucket)")
    util = prometheus.query('DCGM_FI_DEV_GPU_UTIL{simulated="true"}')
    assert sorted(r["metric"]["gpu"] for r in util) == ["0", "1"]
    assert util[0]["metric"]["modelName"] == "NVIDIA H100 80GB HBM3"
    # The energy counter carries dcgm-exporter's name and behaves as a counter.
    energy = eventually(lambda: prometheus.query("rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[5s]) > 0"), timeout=20)
    assert len(energy) == 2


def test_every_panel_of_the_dcgm_dashboard_has_data(prometheus: Prometheus) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    instances = prometheus.label_values("instance", "DCGM_FI_DEV_GPU_TEMP")  # the $instance variable
    gpus = prometheus.label_values("gpu", "DCGM_FI_DEV_GPU_TEMP")  # the $gpu variable
    assert len(instances) == 1 and gpus == ["0", "1"]
    pick = {"$instance": "|".join(instances), "$gpu": "|".join(gpus)}  # as Grafana fills a multi-value
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            query = target["expr"]
            for variable, values in pick.items():
                query = query.replace(variable, values)
            assert prometheus.query(query), f"panel {panel['title']!r} would be empty: {query}"
