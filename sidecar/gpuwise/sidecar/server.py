"""The HTTP endpoint: `/metrics` for Prometheus, `/healthz` for the kubelet's startup probe.

`/healthz` answers 200 only once the sidecar is ready (the instrumentation is copied and the
step socket is bound): the operator makes it the native sidecar's startupProbe, so the trainer
starts only when its instrumentation is in place. Each request is served on its own thread, and
a scrape only encodes cached state.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.registry import CollectorRegistry

from gpuwise import wiring
from gpuwise.sidecar import exposition

log = logging.getLogger(__name__)


class MetricsServer:
    def __init__(self, registry: CollectorRegistry, address: str, port: int, ready: Callable[[], bool]) -> None:
        self._registry = registry
        self._ready = ready
        handler = type("Handler", (_Handler,), {"server_owner": self})
        self._httpd = ThreadingHTTPServer((address, port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="gpuwise-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.server_close()

    def metrics(self) -> bytes:
        return exposition.render(self._registry.collect())

    def ready(self) -> bool:
        return self._ready()


class _Handler(BaseHTTPRequestHandler):
    server_owner: MetricsServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            try:
                body = self.server_owner.metrics()
            except Exception:
                log.exception("rendering /metrics failed")
                self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, b"rendering metrics failed; see the sidecar log\n")
                return
            self._reply(HTTPStatus.OK, body, exposition.CONTENT_TYPE)
        elif path == wiring.HEALTH_PATH:
            if self.server_owner.ready():
                self._reply(HTTPStatus.OK, b"ok\n")
            else:
                self._reply(HTTPStatus.SERVICE_UNAVAILABLE, b"starting\n")
        else:
            self._reply(HTTPStatus.NOT_FOUND, b"try /metrics or /healthz\n")

    def _reply(self, status: HTTPStatus, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per scrape is noise; errors are logged where they happen
