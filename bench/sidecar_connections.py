"""The sidecar's HTTP port with many idle and half-sent connections held: memory, threads, scrape time.

Starts `gpuwise sidecar` (simulated GPUs), measures it idle (the baseline), then holds
`--connections` connections open, half of them in the middle of a request head, and measures
again: RSS, threads, and how long one /metrics takes. Budget (issue 20): with 1,500 held, RSS
under 64 MiB and /metrics within a second.

    python -m bench.sidecar_connections [--connections 1500]
"""

from __future__ import annotations

import argparse
import resource
import socket
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.sidecar.support import SidecarProcess, sidecar


def status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def measure(side: SidecarProcess) -> tuple[float, int, float]:
    started = time.monotonic()
    with urllib.request.urlopen(f"{side.url}/metrics", timeout=30) as response:
        response.read()
    scrape = time.monotonic() - started
    return status(side.process.pid, "VmRSS") / 1024, status(side.process.pid, "Threads"), scrape


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1500)
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, args.connections + 200), hard), hard))
    with tempfile.TemporaryDirectory(prefix="gw-") as tmp, sidecar(Path(tmp), "--backend", "simulated") as side:
        base = measure(side)
        held = []
        try:
            for n in range(args.connections):
                connection = socket.create_connection(("127.0.0.1", side.port), timeout=10)
                if n % 2:
                    connection.sendall(b"GET /metrics HTTP/1.1\r\nHost: sidecar\r\n")
                held.append(connection)
            time.sleep(0.5)
            loaded = measure(side)
        finally:
            for connection in held:
                connection.close()
    print(f"{'':28}{'RSS MiB':>10}{'threads':>10}{'/metrics ms':>14}")
    for name, (rss, threads, scrape) in (("idle (baseline)", base), (f"{args.connections} connections held", loaded)):
        print(f"{name:28}{rss:10.1f}{threads:10d}{scrape * 1000:14.1f}")
    print(
        f"ratio: RSS x{loaded[0] / base[0]:.2f}; budget: RSS < 64 MiB and /metrics < 1 s: "
        f"{'met' if loaded[0] < 64 and loaded[2] < 1 else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
