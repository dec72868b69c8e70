"""Evaluation-cycle cost for many jobs against a real Prometheus: batched queries against per-job ones.

    python -m bench.evaluate                 # 10,000 jobs, 20 minutes of 15 s samples
    python -m bench.evaluate --jobs 2000 --json-only

It writes synthetic series for every job (one worker, two GPUs: dcgm-exporter's device gauges,
the sidecar's info series and step gauges), backfills them with `promtool tsdb create-blocks-from
openmetrics` into an empty data directory, starts Prometheus on loopback over it, and measures in a
fresh process (so its peak RSS is the evaluation's, not the generator's):

- one batched cycle: `fetch()` + `Snapshot.window()` + `diagnose()` for every job, twice;
- the naive way, the same 18 quantities per job restricted to that job, for a sample of jobs,
  extrapolated to all of them.

Operator CPU is `time.process_time()` of the measuring process (Prometheus runs elsewhere), RSS is
`ru_maxrss`. Targets (issue 4): one cycle ≤ 2 s of operator CPU and ≤ 300 MiB RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TextIO

from gpuwise.api.base import parse_duration
from gpuwise.api.trainingjob import Tunables
from gpuwise.diagnose import prometheus
from gpuwise.diagnose.rules import Context, DiagnosisThresholds, diagnose
from gpuwise.diagnose.window import Sustain
from gpuwise.metrics import Metric, catalog
from gpuwise.observability.promql import sel

TARGET_CPU_SECONDS: Final = 2.0
TARGET_RSS_MIB: Final = 300.0
NAMESPACES: Final = 100
MODEL: Final = "NVIDIA H100 80GB HBM3"
FB_TOTAL_MIB: Final = 81_559
# Six kinds of job, in turn: what each looks like (GPU util %, data wait, FB used MiB, autocast, tensor).
PROFILES: Final = {
    "input-bound": (30.0, 0.6, 30_000.0, 1, 0.3),
    "small-batch": (35.0, 0.05, 8_000.0, 1, 0.3),
    "healthy": (92.0, 0.02, 60_000.0, 1, 0.5),
    "no-amp": (70.0, 0.05, 50_000.0, 0, 0.02),
    "idle": (0.0, 0.0, 40_000.0, 1, 0.0),
    "throttled": (92.0, 0.02, 60_000.0, 1, 0.5),  # and its GPUs in thermal slowdown
}
THERMAL_SLOWDOWN: Final = "96"  # NVML clock-event reasons: software and hardware thermal slowdown
NOISE: Final = [((i * 37) % 23 - 11) / 11 for i in range(97)]  # deterministic, in [-1, 1]


def job_names(jobs: int) -> Iterator[tuple[int, str, str, str]]:
    for i in range(jobs):
        yield i, f"ns-{i % NAMESPACES:03d}", f"job-{i:05d}", f"job-{i:05d}-0"


def _family(out: TextIO, metric: Metric) -> None:
    out.write(f"# HELP {metric.name} {metric.help}\n# TYPE {metric.name} gauge\n")


def generate(out: TextIO, jobs: int, end: int, interval: int, history: int) -> int:
    """OpenMetrics text for every job's series over `history` seconds up to `end`; returns samples."""
    stamps = [str(t) for t in range(end - history, end + 1, interval)]
    profiles = list(PROFILES.values())
    samples = 0

    def series(head: str, values: Sequence[str]) -> None:
        nonlocal samples
        out.write("".join(f"{head} {v} {t}\n" for v, t in zip(values, stamps, strict=True)))
        samples += len(stamps)

    def noisy(base: float, spread: float, seed: int, fmt: str = ".1f") -> list[str]:
        return [format(max(0.0, base + spread * NOISE[(seed + k) % 97]), fmt) for k in range(len(stamps))]

    def device(metric: Metric, value: Any) -> None:
        _family(out, metric)
        for i, ns, _, pod in job_names(jobs):
            for gpu in (0, 1):
                labels = (
                    f'gpu="{gpu}",UUID="GPU-{i:08x}-{gpu}",modelName="{MODEL}",Hostname="node-{i // 4:04d}",'
                    f'namespace="{ns}",pod="{pod}"'
                )
                series(f"{metric.name}{{{labels}}}", value(i, gpu))

    def process(metric: Metric, value: Any) -> None:
        _family(out, metric)
        for i, ns, job, pod in job_names(jobs):
            values = value(i)
            if values is not None:
                labels = f'namespace="{ns}",pod="{pod}",trainingjob="{job}",worker="0",local_rank="0"'
                series(f"{metric.name}{{{labels}}}", values)

    def constant(text: str) -> list[str]:
        return [text] * len(stamps)

    def profile(i: int) -> tuple[float, float, float, int, float]:
        return profiles[i % len(profiles)]

    def kind(i: int, name: str) -> bool:
        return i % len(profiles) == list(PROFILES).index(name)

    device(catalog.GPU_UTIL, lambda i, g: noisy(profile(i)[0], 4.0 if profile(i)[0] else 0.0, i + g, ".0f"))
    device(catalog.FB_USED, lambda i, g: noisy(profile(i)[2], 200.0, i + g, ".0f"))
    device(catalog.FB_FREE, lambda i, g: noisy(FB_TOTAL_MIB - profile(i)[2], -200.0, i + g, ".0f"))
    device(catalog.SM_ACTIVE, lambda i, g: noisy(profile(i)[0] / 110, 0.02 if profile(i)[0] else 0.0, i + g, ".3f"))
    device(catalog.TENSOR_ACTIVE, lambda i, g: noisy(profile(i)[4], 0.01 if profile(i)[4] else 0.0, i + g, ".3f"))
    device(catalog.PCIE_TX, lambda i, g: noisy(2e8, 1e7, i + g, ".0f"))
    device(catalog.PCIE_RX, lambda i, g: noisy(6e8, 1e7, i + g, ".0f"))
    device(catalog.CLOCKS_EVENT_REASONS, lambda i, g: constant(THERMAL_SLOWDOWN if kind(i, "throttled") else "0"))
    _family(out, catalog.SIDECAR_INFO)
    for _, ns, job, pod in job_names(jobs):
        labels = f'namespace="{ns}",pod="{pod}",trainingjob="{job}",worker="0"'
        series(f"{catalog.SIDECAR_INFO.name}{{{labels}}}", constant("1"))
    process(catalog.DATA_WAIT_RATIO, lambda i: None if kind(i, "idle") else noisy(profile(i)[1], 0.03, i, ".3f"))
    last_idle_step = str(end - history - 600)
    process(catalog.LAST_STEP, lambda i: constant(last_idle_step) if kind(i, "idle") else list(stamps))
    process(catalog.BATCH_SIZE, lambda i: constant("8" if profile(i)[2] < 10_000 else "64"))
    process(catalog.NUM_WORKERS, lambda i: constant("2"))
    process(catalog.PIN_MEMORY, lambda i: constant("0"))
    process(catalog.AUTOCAST, lambda i: constant(str(profile(i)[3])))
    process(catalog.CUDA_RESERVED_PEAK, lambda i: constant(str(int(profile(i)[2] * 0.9 * 1024 * 1024))))
    out.write("# EOF\n")
    return samples


# --- measuring (in a fresh process) ----------------------------------------------------------


class Counting(prometheus.Prometheus):
    """A client that counts its requests."""

    requests: list[str]

    def __init__(self, url: str, timeout: float) -> None:
        super().__init__(url, timeout)
        object.__setattr__(self, "requests", [])

    def _get(self, path: str, params: Any) -> bytes:
        self.requests.append(params["query"])
        return super()._get(path, params)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def batched_cycle(url: str, now: float, window: float, step: float) -> dict[str, Any]:
    client = Counting(url, timeout=300)
    wall, cpu = time.perf_counter(), time.process_time()
    snapshot = prometheus.fetch(client, now=now, window_seconds=window, step_seconds=step)
    fetch_wall, fetch_cpu = time.perf_counter() - wall, time.process_time() - cpu
    sustain, when = Sustain(), datetime.fromtimestamp(now, tz=UTC)
    facts = prometheus.JobFacts(age_seconds=3600.0, cpu_cores=8.0)
    kinds: Counter[str] = Counter()
    keys = snapshot.jobs()
    for key in keys:
        context = Context(
            window=snapshot.window(key, facts),
            tunables=Tunables(),
            thresholds=DiagnosisThresholds(),
            sustain=sustain,
            now=when,
            active=frozenset(),
            since={},
        )
        kinds.update(finding.kind for finding, _ in diagnose(context))
    return {
        "jobs": len(keys),
        "queries": len(client.requests),
        "wall_s": round(time.perf_counter() - wall, 3),
        "cpu_s": round(time.process_time() - cpu, 3),
        "fetch_wall_s": round(fetch_wall, 3),
        "fetch_cpu_s": round(fetch_cpu, 3),
        "findings": dict(sorted(kinds.items())),
    }


def per_job_queries(namespace: str, job: str, pod: str, window: str) -> tuple[dict[str, str], dict[str, str]]:
    """What an operator without batching asks for one job: the same 18 quantities, filtered to it."""
    dev = (f'namespace="{namespace}"', f'pod="{pod}"')
    proc = (f'namespace="{namespace}"', f'trainingjob="{job}"')
    ranged = {
        "gpu_utilization": f"avg({sel(catalog.GPU_UTIL, *dev)})",
        "data_wait_fraction": f"avg({sel(catalog.DATA_WAIT_RATIO, *proc)})",
        "sm_active": f"max({sel(catalog.SM_ACTIVE, *dev)})",
        "clock_events": f"max({sel(catalog.CLOCKS_EVENT_REASONS, *dev)})",
    }
    instant = {
        "sm_activity": f"avg(avg_over_time({sel(catalog.SM_ACTIVE, *dev)}[{window}]))",
        "tensor_activity": f"avg(avg_over_time({sel(catalog.TENSOR_ACTIVE, *dev)}[{window}]))",
        "memory_used_mib": f"max(max_over_time({sel(catalog.FB_USED, *dev)}[{window}]))",
        "memory_total_mib": f"max({sel(catalog.FB_USED, *dev)} + {sel(catalog.FB_FREE, *dev)})",
        "pcie_tx": f"avg(avg_over_time({sel(catalog.PCIE_TX, *dev)}[{window}]))",
        "pcie_rx": f"avg(avg_over_time({sel(catalog.PCIE_RX, *dev)}[{window}]))",
        "gpus": f"count({sel(catalog.GPU_UTIL, *dev)})",
        "gpu_model": f"count by (modelName) ({sel(catalog.GPU_UTIL, *dev)})",
        "last_step": f"max({sel(catalog.LAST_STEP, *proc)})",
        "batch_size": f"max({sel(catalog.BATCH_SIZE, *proc)})",
        "num_workers": f"max({sel(catalog.NUM_WORKERS, *proc)})",
        "pin_memory": f"min({sel(catalog.PIN_MEMORY, *proc)})",
        "autocast": f"min({sel(catalog.AUTOCAST, *proc)})",
        "cuda_reserved_peak_bytes": f"max({sel(catalog.CUDA_RESERVED_PEAK, *proc)})",
    }
    return ranged, instant


def naive_sample(url: str, now: float, window: float, step: float, *, jobs: int, sample: int) -> dict[str, Any]:
    client = Counting(url, timeout=60)
    chosen = list(job_names(jobs))[:: max(1, jobs // sample)][:sample]
    wall, cpu = time.perf_counter(), time.process_time()
    for _, ns, job, pod in chosen:
        ranged, instant = per_job_queries(ns, job, pod, f"{int(window)}s")
        for query in ranged.values():
            [s.values() for s in client.range(query, now - window, now, step)]
        for query in instant.values():
            [s["value"][1] for s in client.instant(query, now)]
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    scale = jobs / len(chosen)
    return {
        "sampled_jobs": len(chosen),
        "sample_queries": len(client.requests),
        "sample_wall_s": round(wall, 3),
        "sample_cpu_s": round(cpu, 3),
        "queries": len(client.requests) * jobs // len(chosen),
        "wall_s": round(wall * scale, 1),
        "cpu_s": round(cpu * scale, 1),
    }


def measure(args: argparse.Namespace) -> int:
    window, step = parse_duration(args.window), parse_duration(args.step)
    before = rss_mib()
    cycles = [batched_cycle(args.measure, args.now, window, step) for _ in range(args.cycles)]
    peak = rss_mib()
    naive = naive_sample(args.measure, args.now, window, step, jobs=args.jobs, sample=args.sample)
    json.dump({"rss_before_mib": round(before, 1), "peak_rss_mib": round(peak, 1), "cycles": cycles, "naive": naive},
              sys.stdout)  # fmt: skip
    return 0


# --- orchestration ---------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.support.prometheus import running  # the project's launcher; tests/ is on the path from the root

    promtool = shutil.which("promtool")
    if promtool is None:
        raise SystemExit("needs promtool and prometheus (Debian package 'prometheus'; make system-deps)")
    interval, history = int(parse_duration(args.interval)), int(parse_duration(args.history))
    end = int(time.time()) // interval * interval
    with tempfile.TemporaryDirectory(prefix="gpuwise-bench-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        text = work / "series.om.txt"
        with text.open("w") as out:
            samples = generate(out, args.jobs, end, interval, history)
        generated = time.perf_counter() - started
        size_mib = text.stat().st_size / 2**20
        started = time.perf_counter()
        (work / "data").mkdir()
        done = subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(text), str(work / "data")],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"promtool failed: {done.stderr[-2000:]}")
        backfilled = time.perf_counter() - started
        text.unlink()
        with running(work, {"global": {"scrape_interval": "15s"}}) as server:
            command = [sys.executable, "-m", "bench.evaluate", "--measure", server.url, "--now", str(end)]
            command += ["--jobs", str(args.jobs), "--window", args.window, "--step", args.step]
            command += ["--cycles", str(args.cycles), "--sample", str(args.sample)]
            child = subprocess.run(command, capture_output=True, text=True, check=False)
            if child.returncode != 0:
                raise SystemExit(f"measurement failed:\n{child.stderr[-4000:]}")
            figures: dict[str, Any] = json.loads(child.stdout)
    figures["setup"] = {
        "jobs": args.jobs,
        "gpus_per_job": 2,
        "series": args.jobs * 24,
        "samples": samples,
        "history": args.history,
        "interval": args.interval,
        "window": args.window,
        "step": args.step,
        "openmetrics_mib": round(size_mib, 1),
        "generate_s": round(generated, 1),
        "backfill_s": round(backfilled, 1),
        "prometheus": subprocess.run(
            ["prometheus", "--version"], capture_output=True, text=True, check=False
        ).stdout.split("\n")[0],
    }
    return figures


def table(figures: dict[str, Any]) -> str:
    last = figures["cycles"][-1]
    naive = figures["naive"]
    rows = [
        ("", "batched (1 cycle)", f"per-job (from {naive['sampled_jobs']} jobs)", "per-job ÷ batched"),
        ("queries", str(last["queries"]), str(naive["queries"]), f"{naive['queries'] / last['queries']:.0f}x"),
        ("wall s", f"{last['wall_s']:.2f}", f"{naive['wall_s']:.1f}", f"{naive['wall_s'] / last['wall_s']:.1f}x"),
        ("operator CPU s", f"{last['cpu_s']:.2f}", f"{naive['cpu_s']:.1f}", f"{naive['cpu_s'] / last['cpu_s']:.1f}x"),
        ("peak RSS MiB", f"{figures['peak_rss_mib']:.0f}", "-", ""),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    cpu_ok = max(c["cpu_s"] for c in figures["cycles"]) <= TARGET_CPU_SECONDS
    rss_ok = figures["peak_rss_mib"] <= TARGET_RSS_MIB
    each = ", ".join(f"{c['wall_s']}/{c['cpu_s']}" for c in figures["cycles"])
    lines.append(
        f"cycles (wall/CPU s): {each}; "
        f"targets: CPU ≤ {TARGET_CPU_SECONDS:g} s {'met' if cpu_ok else 'MISSED'}, "
        f"RSS ≤ {TARGET_RSS_MIB:g} MiB {'met' if rss_ok else 'MISSED'}"
    )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    cli.add_argument("--jobs", type=int, default=10_000)
    cli.add_argument("--history", default="20m", help="how much synthetic history to backfill")
    cli.add_argument("--interval", default="15s", help="the synthetic scrape interval")
    cli.add_argument("--window", default="15m", help="the evaluation window (TrainingJob default)")
    cli.add_argument("--step", default="15s", help="the range-query step")
    cli.add_argument("--cycles", type=int, default=2)
    cli.add_argument("--sample", type=int, default=200, help="jobs the per-job baseline really queries")
    cli.add_argument("--json-only", action="store_true")
    cli.add_argument("--measure", metavar="URL", help=argparse.SUPPRESS)
    cli.add_argument("--now", type=float, help=argparse.SUPPRESS)
    args = cli.parse_args(argv)
    if args.measure:
        return measure(args)
    figures = run(args)
    if not args.json_only:
        sys.stdout.write(table(figures))
    json.dump(figures, sys.stdout, indent=None if args.json_only else 2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
