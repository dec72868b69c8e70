"""What Prometheus reads: names exactly as dcgm-exporter's, valid text format, promtool-clean."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuwise.sidecar.assembly import Sidecar
from gpuwise.sidecar.identity import Identity
from gpuwise.sidecar.simulated import SimulatedBackend
from tests.sidecar.support import ROOT, parse, select
from tests.sidecar.test_steps import totals
from tests.support.waiting import get

# NVIDIA's dashboard as the chart ships it (tests/chart/test_generated.py: the same as ../shared/data's).
DASHBOARD = ROOT / "charts" / "gpuwise" / "files" / "dashboards" / "dcgm-exporter.json"
# promtool lints what dcgm-exporter itself does, and dashboards depend on: counters named without
# `_total` (one with "COUNTER" in its name), and the camelCase `modelName` label. Nothing else.
DCGM_LINTS = re.compile(
    r"^(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION|DCGM_FI_DEV_PCIE_REPLAY_COUNTER) "
    r'counter metrics should have "_total" suffix$'
    r"|^DCGM_FI_DEV_PCIE_REPLAY_COUNTER metric name should not include type 'counter'$"
    r"|^DCGM_\w+ label names should be written in 'snake_case' not 'camelCase'$"
)


def started(identity: Identity, short_tmp: Path, gpus: int) -> Sidecar:
    """A sidecar on simulated steady GPUs, serving on a free port; the caller stops it."""
    side = Sidecar(
        backend=SimulatedBackend("steady", gpus),
        identity=identity,
        socket_path=short_tmp / "steps.sock",
        instrument_path=short_tmp / "python",
        port=0,
        started_at=0.0,  # the tests hand it events received at a fixed time in the past
    )
    side.start()
    return side


@pytest.fixture
def running(short_tmp: Path) -> Iterator[Sidecar]:
    identity = Identity(
        hostname="node-a", namespace="team", pod='odd "pod"\\name\n', trainingjob="job", worker="3", container="trainer"
    )
    side = started(identity, short_tmp, gpus=2)
    assert side.receiver is not None
    side.receiver.handle(totals(12), 1_700_000_000.0)
    side.receiver.handle(b"garbage", 1_700_000_000.0)
    yield side
    side.stop()


def metrics(side: Sidecar) -> tuple[str, str]:
    assert side.server is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{side.server.port}/metrics") as response:
        return response.headers["Content-Type"], response.read().decode()


def test_text_format_with_dcgm_names_exactly(running: Sidecar) -> None:
    content_type, text = metrics(running)
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert re.search(r"^DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{", text, re.M)
    assert "# TYPE gpuwise_steps_total counter\n" in text
    assert "# TYPE gpuwise_step_duration_seconds histogram\n" in text
    assert "# TYPE process_cpu_seconds_total counter\n" in text
    assert "_created" not in text


def test_labels_are_escaped_and_empty_ones_left_out(running: Sidecar) -> None:
    _, text = metrics(running)
    series = parse(text)
    steps = select(series, "gpuwise_steps_total")[0]
    assert steps.labels == {
        "namespace": "team",
        "pod": 'odd \\"pod\\"\\\\name\\n',
        "trainingjob": "job",
        "worker": "3",
        "local_rank": "0",
    }
    util = select(series, "DCGM_FI_DEV_GPU_UTIL")[0]
    assert "GPU_I_PROFILE" not in util.labels and "GPU_I_ID" not in util.labels
    assert (util.labels["pod"], util.labels["namespace"], util.labels["container"]) == (
        steps.labels["pod"],
        "team",
        "trainer",
    )
    assert select(series, "gpuwise_step_events_dropped_total", reason="malformed")[0].value == 1
    assert select(series, "gpuwise_step_duration_seconds_bucket", le="+Inf")[0].value == 12


@pytest.mark.prometheus
@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (make system-deps)")
def test_promtool_accepts_the_exposition(running: Sidecar) -> None:
    _, text = metrics(running)
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    problems = [line for line in (check.stdout + check.stderr).splitlines() if line.strip()]
    assert check.returncode in (0, 3), problems  # 1 would be a parse error
    assert problems, "the DCGM lints are expected; if none come up, promtool changed"
    assert [p for p in problems if not DCGM_LINTS.match(p)] == []
    own = "".join(block for block in re.split(r"(?m)^(?=# HELP )", text) if not block.startswith("# HELP DCGM_"))
    check = subprocess.run(["promtool", "check", "metrics"], input=own, capture_output=True, text=True, check=False)
    assert (check.returncode, check.stdout + check.stderr) == (0, ""), "gpuwise's own metrics lint clean"


def test_every_metric_of_the_dcgm_dashboard_is_exposed(running: Sidecar) -> None:
    dashboard = json.loads(DASHBOARD.read_text())

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    queries = [t["expr"] for p in panels(dashboard["panels"]) for t in p.get("targets", [])]
    queries += [v["query"] for v in dashboard["templating"]["list"] if v.get("type") == "query"]
    wanted = {name for query in queries for name in re.findall(r"\bDCGM_FI_\w+", query)}
    assert len(wanted) == 6
    _, text = metrics(running)
    exposed = {s.name for s in parse(text)}
    assert wanted <= exposed
    assert all("gpu" in s.labels for s in select(parse(text), "DCGM_FI_DEV_GPU_TEMP")), "the $gpu variable"


def test_healthz_and_unknown_paths(running: Sidecar) -> None:
    assert running.server is not None
    base = f"http://127.0.0.1:{running.server.port}"
    assert get(f"{base}/healthz") == (200, "ok\n")
    assert get(f"{base}/nope")[0] == 404


def test_device_series_name_the_gpu_s_container_as_dcgm_exporter_does(running: Sidecar) -> None:
    """`container` is the GPU's user: on every DCGM series, on none of gpuwise's own."""
    _, text = metrics(running)
    series = parse(text)
    dcgm = [s for s in series if s.name.startswith("DCGM_")]
    assert len({s.name for s in dcgm}) > 10
    assert {s.labels.get("container") for s in dcgm} == {"trainer"}
    assert [s.name for s in series if not s.name.startswith("DCGM_") and "container" in s.labels] == []


def test_without_a_known_container_the_label_is_left_out(short_tmp: Path) -> None:
    identity = Identity.from_environment({"GPUWISE_POD_NAME": "p-0", "GPUWISE_POD_NAMESPACE": "team"})
    assert identity.container == ""
    assert Identity.from_environment({"GPUWISE_CONTAINER": "pytorch"}).container == "pytorch"
    side = started(identity, short_tmp, gpus=1)
    try:
        _, text = metrics(side)
    finally:
        side.stop()
    util = select(parse(text), "DCGM_FI_DEV_GPU_UTIL")
    assert [(s.labels["pod"], "container" in s.labels) for s in util] == [("p-0", False)]


def test_every_series_carries_only_labels_its_catalog_entry_lists(running: Sidecar) -> None:
    from gpuwise.metrics import BY_NAME

    _, text = metrics(running)
    checked = 0
    for series in parse(text):
        metric = BY_NAME.get(re.sub(r"_(bucket|sum|count)$", "", series.name)) or BY_NAME.get(series.name)
        if metric is None:
            assert series.name.startswith(("process_", "python_")), series.name
            continue
        assert set(series.labels) - {"le"} <= set(metric.labels), series.name
        checked += 1
    assert checked > 50
