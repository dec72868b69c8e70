"""Prometheus down, slow and answering garbage (issue 20): the status says so, nothing is made up.

The operator is the real process against the emulator; Prometheus is the real server, stopped and
started again at the same address, and in between a small HTTP server that answers what no
Prometheus would. While it cannot read, a job's `status.efficiency` says since when and why
(`metricsUnavailableSince`, `metricsError`, once, with a `MetricsUnavailable` Event), its figures
and findings stay as the last read left them, and no finding or action is invented; when
Prometheus answers again the next evaluation clears it. A slow Prometheus is met at the client's
timeout, once a cycle for every job together (`Evaluator`), not once per job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from gpuwise.operator.evaluate import Evaluator
from gpuwise.prometheus.batched import PARALLEL_QUERIES, query_count
from gpuwise.prometheus.client import Prometheus as Source
from gpuwise.prometheus.client import PrometheusError
from tests.integration.conftest import Cluster, Operator
from tests.integration.test_efficiency import start_running, status_of
from tests.integration.test_operator import manifest
from tests.support.prometheus import AVAILABLE, running
from tests.support.waiting import eventually, free_port

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(not AVAILABLE, reason="needs prometheus (make system-deps)"),
]

# What a scrape of nothing needs: Prometheus only has to answer.
CONFIG: dict[str, Any] = {"global": {"scrape_interval": "1s"}, "scrape_configs": []}


class _Garbage(BaseHTTPRequestHandler):
    """Answers 200 with a body cut inside a series, or after `delay` seconds: not a Prometheus."""

    delay: ClassVar[float] = 0.0
    requests: ClassVar[int] = 0

    def do_GET(self) -> None:
        type(self).requests += 1
        time.sleep(self.delay)
        body = b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"namespace":'
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up waiting: what a slow server is for

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def garbage(port: int = 0, delay: float = 0.0) -> Iterator[str]:
    _Garbage.delay, _Garbage.requests = delay, 0
    server = ThreadingHTTPServer(("127.0.0.1", port), _Garbage)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def operator_args(port: int) -> list[str]:
    return [f"--prometheus-url=http://127.0.0.1:{port}", "--evaluate-seconds=1", "--query-step-seconds=1"]


def efficiency(cluster: Cluster) -> dict[str, Any]:
    found: dict[str, Any] = status_of(cluster).get("efficiency") or {}
    return found


def reasons(cluster: Cluster) -> list[str]:
    return [str(e.get("reason")) for e in cluster.list("v1", "Event")]


def test_prometheus_down_then_garbage_is_said_in_status_and_cleared_when_it_answers(
    cluster: Cluster, operator: Operator, port: int, tmp_path: Path
) -> None:
    with running(tmp_path, CONFIG, port=port):
        start_running(cluster)
        time.sleep(2)  # evaluated against an empty Prometheus: nothing to say
        assert not efficiency(cluster).get("metricsUnavailableSince")
    # Down: the port refuses.
    unavailable = eventually(lambda: efficiency(cluster).get("metricsUnavailableSince"), what="the outage in status")
    assert "Connection refused" in efficiency(cluster)["metricsError"]
    eventually(lambda: "MetricsUnavailable" in reasons(cluster), what="a MetricsUnavailable Event")
    # Garbage: a 200 whose body is cut inside a series.
    with garbage(port):
        eventually(lambda: "not a Prometheus" in operator.log(), what="the garbage refused in the log")
        time.sleep(1.5)
    status = status_of(cluster)
    assert status["efficiency"]["metricsUnavailableSince"] == unavailable, "said once an outage, not every cycle"
    assert not status.get("findings") and not status.get("recommendations") and not status.get("actions")
    assert reasons(cluster).count("MetricsUnavailable") == 1
    # Back: the same address answers again.
    with running(tmp_path, CONFIG, port=port):  # its storage as it left it
        eventually(lambda: not efficiency(cluster).get("metricsUnavailableSince"), what="the outage cleared")
        eventually(lambda: "MetricsAvailable" in reasons(cluster), what="a MetricsAvailable Event")
    assert efficiency(cluster).get("metricsError") is None
    assert operator.process is not None and operator.process.poll() is None, "the operator never exits"


async def test_a_slow_prometheus_costs_one_timeout_a_cycle_whatever_the_jobs() -> None:
    """Every job's timer asks; the first waits out the client's timeout, the others hear its answer."""
    now = [1_800_000_000.0]
    with garbage(delay=2.0) as url:
        evaluator = Evaluator(Source(url, timeout=0.3), cycle_seconds=30, step_seconds=1, clock=lambda: now[0])
        body = manifest()
        body["metadata"]["creationTimestamp"] = "2026-11-22T00:00:00Z"
        started = time.monotonic()
        for name in ("bert", "gpt", "vit", "t5", "llama"):
            job = {**body, "metadata": {**body["metadata"], "name": name}}
            settings = evaluator.job_settings(job)
            assert settings is not None
            with pytest.raises(PrometheusError, match="timed out"):
                await evaluator.evaluate(job, settings)
        assert time.monotonic() - started < 1.0, "one timeout, not one per job or per query"
        assert evaluator.fetches == 1
        # Those in flight when the first failed, and those its threads took up before it was seen.
        assert _Garbage.requests <= 2 * PARALLEL_QUERIES < query_count(), "the rest of the round is not sent"
        now[0] += 30  # the next cycle asks again
        assert settings is not None
        with pytest.raises(PrometheusError):
            await evaluator.evaluate(job, settings)
        assert evaluator.fetches == 2
