"""A real Prometheus server (Debian's `prometheus` package) on loopback, for tests that query it."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.support.waiting import eventually, free_port, get

AVAILABLE = shutil.which("prometheus") is not None


@dataclass
class Prometheus:
    url: str

    def query(self, promql: str) -> list[dict[str, Any]]:
        status, body = get(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        assert status == 200, f"{promql}: {body}"
        result: list[dict[str, Any]] = json.loads(body)["data"]["result"]
        return result

    def label_values(self, label: str, match: str) -> list[str]:
        query = urllib.parse.urlencode({"match[]": match})
        status, body = get(f"{self.url}/api/v1/label/{label}/values?{query}")
        assert status == 200, f"{match}: {body}"
        values: list[str] = json.loads(body)["data"]
        return values


@contextmanager
def running(workdir: Path, config: dict[str, Any], port: int | None = None) -> Iterator[Prometheus]:
    """Start Prometheus with `config` (prometheus.yml as a dict) and stop it afterwards.

    `port`: the one to listen on (a Prometheus stopped and started again at the same address);
    by default a free one.
    """
    port = port or free_port()
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    command = [
        shutil.which("prometheus") or "prometheus",
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server = Prometheus(f"http://127.0.0.1:{port}")

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(process.stderr.read().decode() if process.stderr else "prometheus exited")
        try:
            return get(f"{server.url}/-/ready", timeout=1.0)[0] == 200
        except OSError:
            return False

    try:
        eventually(ready, timeout=30, what="Prometheus to be ready")
        yield server
    finally:
        process.terminate()
        process.wait(timeout=15)
        if process.stderr is not None:
            process.stderr.close()


@contextmanager
def scraping(workdir: Path, exposition: Callable[[], bytes]) -> Iterator[Prometheus]:
    """A real Prometheus scraping, every second, an HTTP target that answers `exposition()`: what a
    test writes there stands for what sidecars would export."""

    class Target(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = exposition()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    target = HTTPServer(("127.0.0.1", 0), Target)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [
            {"job_name": "sidecars", "static_configs": [{"targets": [f"127.0.0.1:{target.server_port}"]}]}
        ],
    }
    try:
        with running(workdir, config) as server:
            yield server
    finally:
        target.shutdown()
