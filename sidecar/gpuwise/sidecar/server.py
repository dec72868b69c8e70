"""The HTTP endpoint: `/metrics` for Prometheus, `/healthz` for the kubelet's startup probe.

`/healthz` answers 200 only once the sidecar is ready (the instrumentation is copied and the
step socket is bound): the operator makes it the native sidecar's startupProbe, so the trainer
starts only when its instrumentation is in place. A scrape only encodes cached state.

Why not the standard library's threading HTTP server (or prometheus-client's, which is one): it
starts a thread per connection and waits on it without a deadline, so 2,000 idle or half-sent
connections held 2,004 threads and pushed the sidecar past its memory limit, on a port every
pod of the node can reach. Here one asyncio loop on one thread serves every connection: an idle
one is a few kilobytes, a request head must arrive whole within `HEAD_SECONDS`, a kept-alive
connection closes after `IDLE_SECONDS` without a request, and past `MAX_CONNECTIONS` a new one
is closed at once. HTTP/1.1 with keep-alive, GET and HEAD, nothing else: what a scraper and a
probe need, and small enough to read here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from http import HTTPStatus
from typing import Final

from prometheus_client.registry import CollectorRegistry

from gpuwise import wiring
from gpuwise.sidecar import exposition

log = logging.getLogger(__name__)

MAX_HEAD_BYTES: Final = 8192  # a request line and headers; Prometheus sends a few hundred bytes
HEAD_SECONDS: Final = 10.0  # for a request head to arrive whole, once its first byte has
IDLE_SECONDS: Final = 120.0  # between requests on a kept-alive connection (scrape intervals are shorter)
MAX_CONNECTIONS: Final = 4096


class MetricsServer:
    def __init__(self, registry: CollectorRegistry, address: str, port: int, ready: Callable[[], bool]) -> None:
        self._registry = registry
        self._ready = ready
        # Bound now, so that the port is known (and taken) before start().
        self._socket = socket.create_server((address, port), backlog=1024)
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._connections = 0
        self._thread = threading.Thread(target=self._serve, name="gpuwise-http", daemon=True)
        self._started = threading.Event()

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    def start(self) -> None:
        self._thread.start()
        self._started.wait(timeout=10)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._socket.close()

    def metrics(self) -> bytes:
        return exposition.render(self._registry.collect())

    def ready(self) -> bool:
        return self._ready()

    # --- the loop's thread -----------------------------------------------------------------------

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._connection, sock=self._socket, limit=MAX_HEAD_BYTES)
        )
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            tasks = asyncio.all_tasks(self._loop)
            for task in tasks:
                task.cancel()
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections += 1
        try:
            if self._connections <= MAX_CONNECTIONS:
                await self._requests(reader, writer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # a client that went away, sent too much, or too slowly: nothing to tell anyone
        except Exception:
            log.exception("serving an HTTP connection failed")
        finally:
            self._connections -= 1
            writer.close()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            # The first byte may take as long as a kept-alive connection idles; the rest of the head not.
            first = await asyncio.wait_for(reader.read(1), IDLE_SECONDS)
            if not first:
                return
            head = first + await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_SECONDS)
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            parts = request_line.split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                writer.write(_response(HTTPStatus.BAD_REQUEST, b"not an HTTP/1.x request\n", keep_alive=False))
                await writer.drain()
                return
            method, target, version = parts
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in header_lines if line)
            }
            connection = headers.get("connection", "").lower()
            keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
            if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
                keep_alive = False  # a body nobody here reads: the connection ends with this answer
            status, body, content_type = self._route(method, target.split("?", 1)[0])
            writer.write(_response(status, body, content_type, keep_alive=keep_alive, head_only=method == "HEAD"))
            await writer.drain()
            if not keep_alive:
                return

    def _route(self, method: str, path: str) -> tuple[HTTPStatus, bytes, str]:
        text = "text/plain; charset=utf-8"
        if method not in {"GET", "HEAD"}:
            return HTTPStatus.METHOD_NOT_ALLOWED, b"GET /metrics or /healthz\n", text
        if path == "/metrics":
            try:
                return HTTPStatus.OK, self.metrics(), exposition.CONTENT_TYPE
            except Exception:
                log.exception("rendering /metrics failed")
                return HTTPStatus.INTERNAL_SERVER_ERROR, b"rendering metrics failed; see the sidecar log\n", text
        if path == wiring.HEALTH_PATH:
            if self.ready():
                return HTTPStatus.OK, b"ok\n", text
            return HTTPStatus.SERVICE_UNAVAILABLE, b"starting\n", text
        return HTTPStatus.NOT_FOUND, b"try /metrics or /healthz\n", text


def _response(
    status: HTTPStatus,
    body: bytes,
    content_type: str = "text/plain; charset=utf-8",
    *,
    keep_alive: bool,
    head_only: bool = False,
) -> bytes:
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    return head.encode("latin-1") + (b"" if head_only else body)
