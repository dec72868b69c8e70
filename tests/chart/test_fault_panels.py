"""The exporter-health panels show data, and the XID alert fires, on a faulty simulated GPU.

One real sidecar plays the simulated `faulty` scenario (XID 13 events and a reading that times
out, every series labelled simulated="true"); the test sends it malformed step datagrams. A real
Prometheus scrapes it as the PodMonitor would and loads the chart's rules. On the healthy job of
test_dashboards.py these panels are empty; here every one of them must return a positive rate.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from gpuwise.metrics import catalog
from gpuwise.observability import DASHBOARDS
from gpuwise.sidecar.scenarios import FAULT_XID, FAULTY_READING
from tests.chart.test_dashboards import JOB, NAMESPACE, fill, prometheus
from tests.sidecar.support import SidecarProcess, environment, sidecar
from tests.support.prometheus import Prometheus
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs prometheus (make system-deps)"),
]

POD = "resnet-0-f4u1t"
FAULT_METRICS = (catalog.SAMPLE_ERRORS.name, catalog.XID_EVENTS.name, catalog.EVENTS_DROPPED.name)
VARIABLES = {"$namespace": NAMESPACE, "$trainingjob": JOB, "$pod": POD}


@pytest.fixture(scope="module")
def faulty() -> Iterator[tuple[SidecarProcess, Prometheus]]:
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gw-")))  # short: unix socket paths
        env = environment(
            GPUWISE_POD_NAME=POD,
            GPUWISE_POD_NAMESPACE=NAMESPACE,
            GPUWISE_TRAININGJOB=JOB,
            GPUWISE_WORKER_INDEX="0",
            GPUWISE_NODE_NAME="gpu-node-0",
        )
        args = ("--backend", "simulated", "--gpus", "2", "--scenario", "faulty", "--interval", "0.5")
        side = stack.enter_context(sidecar(tmp, *args, env=env))
        yield side, stack.enter_context(prometheus(tmp, [(POD, side)]))


def test_exporter_health_panels_show_the_faults(faulty: tuple[SidecarProcess, Prometheus]) -> None:
    side, server = faulty
    targets = [
        (f"{dashboard.title} / {panel.title}", fill(target.expr, VARIABLES))
        for dashboard in DASHBOARDS
        for panel, target in dashboard.targets()
        if any(name in target.expr for name in FAULT_METRICS)
    ]
    assert len(targets) == 6  # NVML sample errors, XID errors, dropped step events: on both dashboards
    sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    last: list[str] = []

    def shown() -> bool:
        sender.sendto(b"not a step event", str(side.socket))
        positive = {title for title, expr in targets if any(float(r["value"][1]) > 0 for r in server.query(expr))}
        last[:] = [f"{title}: {expr}" for title, expr in targets if title not in positive]
        return not last

    try:
        eventually(shown, timeout=60, interval=1)
    except AssertionError:
        pytest.fail("fault panels without data:\n" + "\n".join(last))
    finally:
        sender.close()
    # What they show: the scenario's XID and failing reading, on GPU 0 only, labelled simulated.
    xids = server.query(f'{catalog.XID_EVENTS.name}{{simulated="true"}}')
    assert {(r["metric"]["gpu"], r["metric"]["xid"]) for r in xids} == {("0", str(FAULT_XID))}
    errors = server.query(f'{catalog.SAMPLE_ERRORS.name}{{simulated="true"}}')
    assert {(r["metric"]["gpu"], r["metric"]["field"], r["metric"]["reason"]) for r in errors} == {
        ("0", FAULTY_READING, "timeout")
    }
    dropped = server.query(catalog.EVENTS_DROPPED.name)
    assert {r["metric"]["reason"] for r in dropped} == {"malformed"}


def test_an_application_xid_fires_the_warning_not_the_hardware_alert(faulty: tuple[SidecarProcess, Prometheus]) -> None:
    _, server = faulty
    firing = eventually(
        lambda: server.query('ALERTS{alertname="GpuwiseXidError", alertstate="firing"}'), timeout=30, interval=1
    )
    assert [(r["metric"]["xid"], r["metric"]["severity"], r["metric"]["pod"]) for r in firing] == [
        (str(FAULT_XID), "warning", POD)
    ]
    assert not server.query('ALERTS{alertname=~"GpuwiseHardwareXidError|GpuwiseGpuLost"}')
