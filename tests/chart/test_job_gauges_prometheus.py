"""The operator's gpuwise_job_* gauges and action counts through a real Prometheus: panels, the
finding alert, removal.

A prometheus-client HTTP server exposes a `JobGauges` and an `ActionTransitions` collector the way
the operator's /metrics does; Prometheus scrapes it as job `gpuwise-operator` with the operator
pod's own namespace and pod as target labels, honouring the exposed `namespace` (the
TrainingJob's, not the operator's), and loads the chart's rules.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, start_http_server

from gpuwise.act.transitions import ActionTransitions
from gpuwise.metrics import catalog
from gpuwise.metrics.promql import OPERATOR_JOB
from gpuwise.observability import DASHBOARDS
from gpuwise.operator.evaluate import evaluate_window
from gpuwise.operator.metrics import JobGauges
from tests.chart.support import CHART
from tests.operator.test_job_gauges import spec, window
from tests.support.prometheus import Prometheus, running
from tests.support.waiting import eventually, free_port

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs prometheus (make system-deps)"),
]

JOB_METRICS = (catalog.JOB_FINDING, catalog.JOB_RECOMMENDATION, catalog.JOB_GPU_UTIL, catalog.JOB_DATA_WAIT)
VARIABLES = {"$namespace": "team", "$trainingjob": "bert", "$__rate_interval": "20s"}
ACTIONS = ActionTransitions()


@pytest.fixture(scope="module")
def operator() -> Iterator[tuple[JobGauges, Prometheus]]:
    jobs = JobGauges()
    registry = CollectorRegistry()
    registry.register(jobs)
    registry.register(ACTIONS)
    port = free_port()
    http, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(CHART / "files" / "prometheus-rules.yaml")],
        "scrape_configs": [
            {
                "job_name": OPERATOR_JOB,
                "honor_labels": True,
                "static_configs": [
                    {"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": "gpuwise", "pod": "gpuwise-0"}}
                ],
            }
        ],
    }
    try:
        with tempfile.TemporaryDirectory(prefix="gw-") as tmp, running(Path(tmp), config) as server:
            yield jobs, server
    finally:
        http.shutdown()
        thread.join(timeout=5)


def fill(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def test_findings_reach_the_panels_fire_the_alert_and_go_when_the_job_does(
    operator: tuple[JobGauges, Prometheus],
) -> None:
    jobs, server = operator
    now = datetime.now(tz=UTC).replace(microsecond=0)
    jobs.publish("team", "bert", evaluate_window(spec(), window(), {}, now).series(), ttl=600)
    names = tuple(metric.name for metric in JOB_METRICS)
    targets = [
        (panel.title, target.expr)
        for dashboard in DASHBOARDS
        for panel, target in dashboard.targets()
        if any(name in target.expr for name in names)
    ]
    assert len(targets) >= 6

    def empty() -> list[str]:
        return [f"{title}: {expr}" for title, expr in targets if not server.query(fill(expr))]

    eventually(lambda: not empty(), timeout=30, interval=1, what=f"finding panels with data: {empty()}")
    firing = eventually(
        lambda: server.query('ALERTS{alertname="GpuwiseJobFinding", alertstate="firing"}'), timeout=30, interval=1
    )
    assert [{k: r["metric"][k] for k in ("namespace", "trainingjob", "kind", "severity")} for r in firing] == [
        {"namespace": "team", "trainingjob": "bert", "kind": "InputBound", "severity": "info"}
    ]

    jobs.forget("team", "bert")  # the job stopped running: its series end at the next scrape
    eventually(lambda: not server.query(catalog.JOB_FINDING.name), timeout=30, interval=1, what="stale findings")
    eventually(lambda: not server.query('ALERTS{alertname="GpuwiseJobFinding"}'), timeout=30, interval=1)


def test_actions_taken_reach_the_cluster_overview(operator: tuple[JobGauges, Prometheus]) -> None:
    _, server = operator
    panels = [(p.title, t.expr) for p, t in DASHBOARDS[0].targets() if catalog.ACTION_TRANSITIONS.name in t.expr]
    assert [title for title, _ in panels] == ["Actions taken"]
    expr = fill(panels[0][1].replace("$__range", "15s"))  # the dashboard's time range: the last 15 s

    def shown() -> dict[tuple[str, str], str]:
        return {(r["metric"]["action"], r["metric"]["state"]): r["value"][1] for r in server.query(expr)}

    for state in ("Planned", "WaitingForCheckpoint", "Applying"):
        ACTIONS.count("team", "bert", "AdjustConfig", state)
    born = {("AdjustConfig", state): "1" for state in ("Planned", "WaitingForCheckpoint", "Applying")}
    eventually(lambda: shown() == born, timeout=30, interval=1, what=f"actions taken: {shown()}")
    eventually(lambda: shown() == {}, timeout=30, interval=1, what="the range to move past them")
    # One series counts on (a rollback re-enters Applying), one is new.
    ACTIONS.count("team", "bert", "AdjustConfig", "Applying")
    ACTIONS.count("team", "bert", "AdjustConfig", "RolledBack")
    later = {("AdjustConfig", "Applying"): "1", ("AdjustConfig", "RolledBack"): "1"}
    eventually(lambda: shown() == later, timeout=10, interval=0.5, what=f"actions taken: {shown()}")
