"""The sidecar's HTTP port under idle and half-sent connections: memory stays small, scrapes go on.

The port is reachable from every pod of the node. Before, each connection held a thread with no
deadline: 2,000 of them pushed the sidecar past its 128 Mi limit.
"""

from __future__ import annotations

import resource
import socket
import time
import urllib.request
from pathlib import Path

import pytest

from tests.sidecar.support import sidecar
from tests.sidecar.test_flood import rss_kib

HELD = 1500


@pytest.mark.slow
def test_idle_and_half_sent_connections_cost_little_and_block_nothing(short_tmp: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < HELD + 200:
        pytest.skip(f"this machine allows {hard} open files; the test holds {HELD} connections")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, HELD + 200), hard))
    held: list[socket.socket] = []
    with sidecar(short_tmp, "--backend", "simulated", "--interval", "1") as side:
        try:
            for n in range(HELD):
                connection = socket.create_connection(("127.0.0.1", side.port), timeout=5)
                if n % 2:  # half of them start a request and never finish it
                    connection.sendall(b"GET /metrics HTTP/1.1\r\nHost: sidecar\r\n")
                held.append(connection)
            time.sleep(0.5)  # let the sidecar accept them all
            started = time.monotonic()
            with urllib.request.urlopen(f"{side.url}/metrics", timeout=5) as response:
                body = response.read()
            answered = time.monotonic() - started
            rss_mib = rss_kib(side.process.pid) / 1024
            threads = threads_of(side.process.pid)
        finally:
            for connection in held:
                connection.close()
    assert b"DCGM_FI_DEV_GPU_UTIL" in body
    assert answered < 1.0, f"/metrics took {answered:.2f} s with {HELD} connections held"
    assert rss_mib < 64, f"{rss_mib:.1f} MiB with {HELD} connections held"
    assert threads < 20, f"{threads} threads: a connection must not cost one"


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def answer(connection: socket.socket) -> bytes:
    """One whole response: its head, then as many bytes as its Content-Length says."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += connection.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    )
    while len(body) < length:
        body += connection.recv(4096)
    return head + b"\r\n\r\n" + body


def test_a_kept_alive_connection_serves_several_requests_and_bad_ones_are_refused(short_tmp: Path) -> None:
    with sidecar(short_tmp, "--backend", "simulated") as side:
        with socket.create_connection(("127.0.0.1", side.port), timeout=5) as connection:
            for _ in range(3):
                connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                reply = answer(connection)
                assert reply.startswith(b"HTTP/1.1 200 OK") and reply.endswith(b"ok\n")
            connection.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            assert answer(connection).startswith(b"HTTP/1.1 405")
        with socket.create_connection(("127.0.0.1", side.port), timeout=5) as connection:
            connection.sendall(b"nonsense\r\n\r\n")
            assert answer(connection).startswith(b"HTTP/1.1 400")
            assert connection.recv(4096) == b"", "closed after a request that is not HTTP"
        with socket.create_connection(("127.0.0.1", side.port), timeout=5) as connection:
            connection.sendall(b"GET /" + b"x" * 10_000 + b" HTTP/1.1\r\n\r\n")  # a head past the limit
            assert connection.recv(4096) == b"", "closed without an answer"
        assert side.process.poll() is None
