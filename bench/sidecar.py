"""The sidecar's footprint with 8 simulated GPUs, next to a bare baseline process, in one run.

Starts `gpuwise sidecar --backend simulated --gpus 8` at the default 1 s interval, feeds it step
events from 8 training ranks (10 steps/s each), and scrapes it the way Prometheus would (every
5 s, more often than the usual 15-30 s) while measuring its CPU time over a window. Then it
measures `/metrics` latency over back-to-back scrapes, and the sidecar's resident memory next to
a baseline: a bare Python process that imports only prometheus-client and pynvml (the floor any
Python exporter pays). Budgets: RSS <= 50 MiB, CPU <= 2 % of a core, scrape p99 <= 20 ms.

    .venv/bin/python -m bench.sidecar [--seconds 30] [--scrapes 500]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

BUDGET_RSS_MIB = 50.0
BUDGET_CPU = 0.02
BUDGET_P99_SECONDS = 0.020
RANKS = 8
STEPS_PER_SECOND = 10
TICKS = os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def scrape(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url) as response:
        response.read()
    return time.perf_counter() - started


def feed(path: Path, stop: threading.Event) -> int:
    """Step events from RANKS training processes, as their trackers would send them."""
    from gpuwise.instrument import wire

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sent, started = 0, time.monotonic()
    while not stop.wait(1.0 / STEPS_PER_SECOND):
        steps = round((time.monotonic() - started) * STEPS_PER_SECOND)
        for rank in range(RANKS):
            event = wire.StepEvent(
                1000 + rank,
                rank,
                wire.SAMPLES_KNOWN,
                steps,
                steps * 64,
                steps * 0.1,
                steps * 0.02,
                0.1,
                4,
                64,
                -1,
                -1,
                0,
                time.time(),
            )
            try:
                sock.sendto(wire.encode(event), str(path))
                sent += 1
            except OSError:
                pass
    return sent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="CPU measurement window")
    parser.add_argument("--scrapes", type=int, default=500, help="back-to-back scrapes for the latency figures")
    args = parser.parse_args()

    from tests.sidecar.support import environment, sidecar

    baseline = subprocess.Popen([sys.executable, "-c", "import prometheus_client, pynvml, time; time.sleep(3600)"])
    try:
        with tempfile.TemporaryDirectory(prefix="gw-bench-") as tmp:
            gpus = ("--backend", "simulated", "--gpus", "8", "--log-level", "WARNING")
            with sidecar(Path(tmp), *gpus, env=environment()) as side:
                url = f"{side.url}/metrics"
                stop = threading.Event()
                feeder = threading.Thread(target=feed, args=(side.socket, stop), daemon=True)
                feeder.start()
                time.sleep(2.0)  # settle: first samples, every rank known
                pid = side.process.pid
                cpu_before, started = cpu_seconds(pid), time.monotonic()
                while time.monotonic() - started < args.seconds:
                    scrape(url)
                    time.sleep(5.0 - (time.monotonic() - started) % 5.0)
                cpu = (cpu_seconds(pid) - cpu_before) / (time.monotonic() - started)
                stop.set()
                feeder.join()
                latencies = sorted(scrape(url) for _ in range(args.scrapes))
                with urllib.request.urlopen(url) as response:
                    body = response.read()
                series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
                rss, base_rss = rss_mib(pid), rss_mib(baseline.pid)
    finally:
        baseline.terminate()
        baseline.wait()

    p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
    print(f"gpuwise sidecar, simulated backend, 8 GPUs, 1 s interval, {RANKS} ranks x {STEPS_PER_SECOND} steps/s")
    print(f"/metrics: {series} series, {len(body) / 1024:.0f} KiB")
    print(f"{'':30}{'sidecar':>12}{'baseline':>12}{'ratio':>8}{'budget':>10}")
    print(f"{'RSS':30}{rss:8.1f} MiB{base_rss:8.1f} MiB{rss / base_rss:8.2f}{BUDGET_RSS_MIB:7.0f} MiB")
    window = f"CPU over {args.seconds:g} s (scrape every 5 s)"
    print(f"{window:30}{cpu:11.2%}{'':20}{BUDGET_CPU:10.0%}")
    print(f"{'scrape p50 / p99':30}{p50 * 1e3:6.1f} / {p99 * 1e3:.1f} ms{'':14}{BUDGET_P99_SECONDS * 1e3:7.0f} ms")
    print("baseline: a Python process importing only prometheus-client and pynvml")
    print("reference: dcgm-exporter users report 135-510 MiB RSS")
    within = rss <= BUDGET_RSS_MIB and cpu <= BUDGET_CPU and p99 <= BUDGET_P99_SECONDS
    print("all within budget" if within else "OVER budget")
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
