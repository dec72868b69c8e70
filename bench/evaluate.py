"""Evaluation-cycle cost for many jobs against a real Prometheus: the operator's whole cycle, and per-job queries.

    python -m bench.evaluate                 # 10,000 jobs, 20 minutes of 15 s samples
    python -m bench.evaluate --jobs 2000 --json-only
    python -m bench.evaluate --profile cycle.prof   # and a cProfile of one more cycle's per-job path

It writes synthetic series for every job (`--workers` workers, 4 by default, each a pod with one
GPU and one training process: dcgm-exporter's device gauges, the sidecar's info series, step
gauges and the step-time histogram, with a straggler in one kind of job), backfills them with
`promtool tsdb create-blocks-from openmetrics` into an empty data directory, starts Prometheus on
loopback over it, and measures in a fresh process (so its peak RSS is the evaluation's, not the
generator's). Several workers per job make the per-worker queries (step times, clock reasons) and
the straggler detector, which needs three workers to compare, cost what they cost in a fleet:

- the operator's evaluation cycle, `--cycles` times: (a) the batched read, `Evaluator.snapshot()`
  (`fetch()`: the queries and their decoding), then (b) for every job, `evaluate_job()`, the very
  function the kopf timer runs: the job's settings (its spec validated in the first cycle, kept
  while its generation stays), job facts, window, diagnosis, status, the diff against the
  current status, the `gpuwise_job_*` gauges, and the action runner. The jobs are
  TrainingJob bodies as the API server stores them, a mix of modes (Observe, Recommend, Enforce).
  There is no Kubernetes API: a status patch is merged into the stored body (as the watch would
  deliver it to the next cycle), Events are queued the way kopf queues them, and both are counted,
  but no HTTP request is made (a patch bumps the stored resourceVersion, as the API server does).
  The first cycle after a start is the cold one: it reads whole windows and writes every status.
  Later ones, 30 s apart, are the operator's steady state: they read what is new since the last
  cycle and write only what changed. The CPU target is judged on those. The last cycle's window
  ends where the data does, as a running operator's ends at the last scrape.
  kopf's own cost of running 10,000 timers is not measured.
- for reference, window + diagnosis alone over the last snapshot (a part of (b), not added to it);
- the naive way, the same 20 quantities per job restricted to that job, for a sample of jobs,
  extrapolated to all of them.

Operator CPU is `time.process_time()` of the measuring process (Prometheus runs elsewhere), RSS is
`ru_maxrss` (it includes the 10,000 bodies, which the operator also holds). Targets (issue 4): one
cycle ≤ 2 s of operator CPU and ≤ 300 MiB RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import logging
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TextIO

import kopf
from kopf._core.engines import posting  # kopf's Event queue: where kopf.info()/warn() put Events

from gpuwise.api.base import parse_duration
from gpuwise.api.trainingjob import KIND, Tunables
from gpuwise.diagnose.rules import DiagnosisThresholds, RuleContext, diagnose
from gpuwise.diagnose.window import Sustain
from gpuwise.kube.client import Kube
from gpuwise.metrics import Metric, catalog
from gpuwise.metrics.promql import sel
from gpuwise.operator.config import OperatorSettings
from gpuwise.operator.evaluate import Evaluator, evaluate_job
from gpuwise.operator.handlers import build_runner
from gpuwise.operator.reconcile import ReconcileContext
from gpuwise.prometheus.client import Prometheus
from gpuwise.prometheus.heap import FULL_COLLECTION_GROWTH, read_heap
from gpuwise.prometheus.snapshot import JobFacts, Snapshot

JsonDict = dict[str, Any]
TARGET_CPU_SECONDS: Final = 2.0
TARGET_RSS_MIB: Final = 300.0
CYCLE_SECONDS: Final = 30.0  # the operator's default evaluation interval
NAMESPACES: Final = 100
MODEL: Final = "NVIDIA H100 80GB HBM3"
FB_TOTAL_MIB: Final = 81_559
# Seven kinds of job, in turn: what each looks like (GPU util %, data wait, FB used MiB, autocast, tensor).
PROFILES: Final = {
    "input-bound": (30.0, 0.6, 30_000.0, 1, 0.3),
    "small-batch": (35.0, 0.05, 8_000.0, 1, 0.3),
    "healthy": (92.0, 0.02, 60_000.0, 1, 0.5),
    "no-amp": (70.0, 0.05, 50_000.0, 0, 0.02),
    "idle": (0.0, 0.0, 40_000.0, 1, 0.0),
    "throttled": (92.0, 0.02, 60_000.0, 1, 0.5),  # and its GPUs in thermal slowdown
    "straggler": (92.0, 0.02, 60_000.0, 1, 0.5),  # and its last worker 1.8x slower for the last third
}
THERMAL_SLOWDOWN: Final = "96"  # NVML clock-event reasons: software and hardware thermal slowdown
NOISE: Final = [((i * 37) % 23 - 11) / 11 for i in range(97)]  # deterministic, in [-1, 1]
STEP_SECONDS: Final = 0.5  # a healthy worker's step time
STRAGGLER_SLOWDOWN: Final = 1.8


def job_names(jobs: int) -> Iterator[tuple[int, str, str]]:
    for i in range(jobs):
        yield i, f"ns-{i % NAMESPACES:03d}", f"job-{i:05d}"


def pod_name(job: str, worker: int) -> str:
    return f"{job}-{worker}"


def node_name(job: int, worker: int, workers: int) -> str:
    return f"node-{(job * workers + worker) // 8:05d}"  # eight GPUs a node


def _family(out: TextIO, metric: Metric, kind: str = "gauge") -> None:
    out.write(f"# HELP {metric.name} {metric.help}\n# TYPE {metric.name} {kind}\n")


def generate(out: TextIO, jobs: int, *, workers: int, end: int, interval: int, history: int) -> tuple[int, int]:
    """OpenMetrics text for every job's series over `history` seconds up to `end`; returns (series, samples)."""
    stamps = [str(t) for t in range(end - history, end + 1, interval)]
    profiles = list(PROFILES.values())
    written = [0, 0]

    def series(head: str, values: Sequence[str]) -> None:
        out.write("".join(f"{head} {v} {t}\n" for v, t in zip(values, stamps, strict=True)))
        written[0] += 1
        written[1] += len(stamps)

    def noisy(base: float, spread: float, seed: int, fmt: str = ".1f") -> list[str]:
        return [format(max(0.0, base + spread * NOISE[(seed + k) % 97]), fmt) for k in range(len(stamps))]

    def device(metric: Metric, value: Any) -> None:
        _family(out, metric)
        for i, ns, job in job_names(jobs):
            for w in range(workers):
                labels = (
                    f'gpu="0",UUID="GPU-{i:08x}-{w}",modelName="{MODEL}",Hostname="{node_name(i, w, workers)}",'
                    f'namespace="{ns}",pod="{pod_name(job, w)}"'
                )
                series(f"{metric.name}{{{labels}}}", value(i, w))

    def process_labels(ns: str, job: str, w: int) -> str:
        return f'namespace="{ns}",pod="{pod_name(job, w)}",trainingjob="{job}",worker="{w}",local_rank="0"'

    def process(metric: Metric, value: Any) -> None:
        _family(out, metric)
        for i, ns, job in job_names(jobs):
            values = value(i)
            if values is not None:
                for w in range(workers):
                    series(f"{metric.name}{{{process_labels(ns, job, w)}}}", values)

    def constant(text: str) -> list[str]:
        return [text] * len(stamps)

    def profile(i: int) -> tuple[float, float, float, int, float]:
        return profiles[i % len(profiles)]

    def kind(i: int, name: str) -> bool:
        return i % len(profiles) == list(PROFILES).index(name)

    def step_histogram() -> None:
        """Per worker, the step-time histogram's cumulative count and sum (one bucket: +Inf).

        Workers step at their own pace, each a little different; in a straggler job the last
        worker is STRAGGLER_SLOWDOWN times slower over the last third of the history.
        """
        metric = catalog.STEP_DURATION
        _family(out, metric, "histogram")
        slow_from = len(stamps) * 2 // 3
        for i, ns, job in job_names(jobs):
            if kind(i, "idle"):
                continue  # no steps: no histogram
            for w in range(workers):
                counts, sums, count, total = [], [], 0.0, 0.0
                for k in range(len(stamps)):
                    seconds = STEP_SECONDS * (1 + 0.02 * NOISE[(i + 7 * w + k) % 97] + 0.01 * w)
                    if kind(i, "straggler") and w == workers - 1 and k >= slow_from:
                        seconds *= STRAGGLER_SLOWDOWN
                    count, total = count + interval / seconds, total + interval
                    counts.append(f"{count:.0f}")
                    sums.append(f"{total:.0f}")
                labels = process_labels(ns, job, w)
                series(f'{metric.name}_bucket{{{labels},le="+Inf"}}', counts)
                series(f"{metric.name}_count{{{labels}}}", counts)
                series(f"{metric.name}_sum{{{labels}}}", sums)

    device(catalog.GPU_UTIL, lambda i, g: noisy(profile(i)[0], 4.0 if profile(i)[0] else 0.0, i + g, ".0f"))
    device(catalog.FB_USED, lambda i, g: noisy(profile(i)[2], 200.0, i + g, ".0f"))
    device(catalog.FB_FREE, lambda i, g: noisy(FB_TOTAL_MIB - profile(i)[2], -200.0, i + g, ".0f"))
    device(catalog.SM_ACTIVE, lambda i, g: noisy(profile(i)[0] / 110, 0.02 if profile(i)[0] else 0.0, i + g, ".3f"))
    device(catalog.TENSOR_ACTIVE, lambda i, g: noisy(profile(i)[4], 0.01 if profile(i)[4] else 0.0, i + g, ".3f"))
    device(catalog.PCIE_TX, lambda i, g: noisy(2e8, 1e7, i + g, ".0f"))
    device(catalog.PCIE_RX, lambda i, g: noisy(6e8, 1e7, i + g, ".0f"))
    device(catalog.CLOCKS_EVENT_REASONS, lambda i, g: constant(THERMAL_SLOWDOWN if kind(i, "throttled") else "0"))
    _family(out, catalog.SIDECAR_INFO)
    for _, ns, job in job_names(jobs):
        for w in range(workers):
            labels = f'namespace="{ns}",pod="{pod_name(job, w)}",trainingjob="{job}",worker="{w}"'
            series(f"{catalog.SIDECAR_INFO.name}{{{labels}}}", constant("1"))
    process(catalog.DATA_WAIT_RATIO, lambda i: None if kind(i, "idle") else noisy(profile(i)[1], 0.03, i, ".3f"))
    last_idle_step = str(end - history - 600)
    process(catalog.LAST_STEP, lambda i: constant(last_idle_step) if kind(i, "idle") else list(stamps))
    process(catalog.BATCH_SIZE, lambda i: constant("8" if profile(i)[2] < 10_000 else "64"))
    process(catalog.NUM_WORKERS, lambda i: constant("2"))
    process(catalog.PIN_MEMORY, lambda i: constant("0"))
    process(catalog.AUTOCAST, lambda i: constant(str(profile(i)[3])))
    process(catalog.CUDA_RESERVED_PEAK, lambda i: constant(str(int(profile(i)[2] * 0.9 * 1024 * 1024))))
    step_histogram()
    out.write("# EOF\n")
    return written[0], written[1]


# --- measuring (in a fresh process) ----------------------------------------------------------


class Counting(Prometheus):
    """A client that counts its requests."""

    requests: list[str]

    def __init__(self, url: str, timeout: float) -> None:
        super().__init__(url, timeout)
        object.__setattr__(self, "requests", [])

    def _chunks(self, path: str, params: Any) -> Iterator[bytes]:
        self.requests.append(params["query"])
        return super()._chunks(path, params)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- the operator's cycle, without a Kubernetes API ---------------------------------------------

# One job in five observes only, one in five enforces; the rest recommend.
MODES: Final = ("Observe", "Recommend", "Recommend", "Recommend", "Enforce")


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def trainingjob(i: int, namespace: str, name: str, *, workers: int, now: float, window: str) -> JsonDict:
    """A running TrainingJob as the API server stores it: a user's spec and the reconciler's status.

    Enforce jobs list AdjustConfig but have no checkpoint, so the runner plans the action and its
    guardrails refuse it (said once, in an Event): no restart is measured here.
    """
    started = _stamp(now - 3600)
    condition = {"status": "True", "lastTransitionTime": started, "observedGeneration": 1}
    return {
        "apiVersion": "gpuwise.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"00000000-0000-4000-8000-{i:012d}",
            "generation": 1,
            "resourceVersion": str(1000 + i),
            "creationTimestamp": started,
            "labels": {"team": f"team-{i % 7}"},
        },
        "spec": {
            "trainer": {
                "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                "command": ["torchrun"],
                "args": ["/workspace/train.py", "--epochs=90"],
                "numNodes": workers,
                "numProcPerNode": 1,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1, "cpu": "16", "memory": "120Gi"}},
                "env": [
                    {"name": "BATCH_SIZE", "value": "64"},
                    {"name": "NUM_WORKERS", "value": "2"},
                    {"name": "ACCUM", "value": "4"},
                ],
                "shmSize": "16Gi",
            },
            "pod": {
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
            "runPolicy": {"backoffLimit": 3, "ttlSecondsAfterFinished": 86400},
            "efficiency": {
                "mode": MODES[i % len(MODES)],
                "window": window,
                "thresholds": {"gpuUtilization": 60},
                "actions": ["AdjustConfig"],
                "tunables": {
                    "batchSize": {"env": "BATCH_SIZE", "min": 8, "max": 512},
                    "dataLoaderWorkers": {"env": "NUM_WORKERS", "min": 1, "max": 16},
                    "gradientAccumulationSteps": {"env": "ACCUM", "min": 1, "max": 64},
                    "pinMemory": {"env": "PIN_MEMORY"},
                    "amp": {"env": "AMP"},
                    "keepGlobalBatchSize": True,
                },
            },
            "telemetry": {"instrumentation": "Auto"},
        },
        "status": {
            "phase": "Running",
            "observedGeneration": 1,
            "startTime": started,
            "restarts": 0,
            "conditions": [
                {"type": "Accepted", "reason": "Valid", "message": "The spec is valid.", **condition},
                {"type": "Created", "reason": "JobCreated", "message": f"Job {name} created.", **condition},
                {
                    "type": "Running",
                    "reason": "AllWorkersRunning",
                    "message": f"{workers}/{workers} workers running.",
                    **condition,
                },
            ],
            "workers": [
                {
                    "index": w,
                    "pod": pod_name(name, w),
                    "node": node_name(i, w, workers),
                    "phase": "Running",
                    "restarts": 0,
                }
                for w in range(workers)
            ],
        },
    }


def merge_patch(target: Mapping[str, Any], patch: Mapping[str, Any]) -> JsonDict:
    """A JSON merge patch (RFC 7386) applied as the API server does: a new object, the old one unchanged."""
    merged = dict(target)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = merge_patch(merged[key], value)
        else:
            merged[key] = value
    return merged


class OfflineKube(Kube):
    """The API server as a dict of stored objects: a patch stores a new, merged object and is counted.

    No request is made. The next cycle reads the stored objects, as the watch would deliver them.
    """

    def __init__(self, objects: Iterable[JsonDict]) -> None:  # no API client: nothing to connect to
        self.objects = {(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}
        self.writes: Counter[str] = Counter()

    def bodies(self, kind: str) -> list[JsonDict]:
        return [body for (stored, _, _), body in self.objects.items() if stored == kind]

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> JsonDict | None:
        return self.objects.get((kind, namespace, name))

    async def patch(
        self, api_version: str, kind: str, namespace: str, name: str, body: JsonDict, *, status: bool = False
    ) -> JsonDict | None:
        stored = self.objects.get((kind, namespace, name))
        if stored is None:
            return None
        merged = merge_patch(stored, body)
        merged["metadata"] = {
            **merged["metadata"],
            "resourceVersion": str(int(stored["metadata"]["resourceVersion"]) + 1),
        }
        self.objects[kind, namespace, name] = merged
        self.writes[f"patch {kind}{'/status' if status else ''}"] += 1
        return self.objects[kind, namespace, name]


class GcTime:
    """CPU seconds spent in cyclic garbage collection while running, from the collector's own callbacks."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.by_generation: dict[int, list[float]] = {}  # generation -> [collections, seconds]
        self._started = 0.0

    def __call__(self, phase: str, info: Mapping[str, Any]) -> None:
        if phase == "start":
            self._started = time.process_time()
            return
        spent = time.process_time() - self._started
        self.seconds += spent
        counted = self.by_generation.setdefault(info["generation"], [0, 0.0])
        counted[0] += 1
        counted[1] += spent

    def __enter__(self) -> GcTime:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self)


def queue_events() -> asyncio.Queue[Any]:
    """Where `kopf.info()`/`kopf.warn()` put Events in this process: kopf's own queue, with no poster."""
    events: asyncio.Queue[Any] = asyncio.Queue()
    posting.settings_var.set(kopf.OperatorSettings())
    posting.event_queue_loop_var.set(asyncio.get_running_loop())
    posting.event_queue_var.set(events)
    return events


def drained(events: asyncio.Queue[Any]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    while not events.empty():
        counts[events.get_nowait().reason] += 1
    return dict(sorted(counts.items()))


def status_findings(bodies: Iterable[JsonDict]) -> dict[str, int]:
    kinds = Counter(f["kind"] for body in bodies for f in body["status"].get("findings") or [])
    return dict(sorted(kinds.items()))


def cycles_run(args: argparse.Namespace) -> int:
    """The cycles the measurement runs: `--cycles`, and with `--profile` one more, profiled and not reported."""
    cycles: int = args.cycles
    return cycles + (1 if args.profile else 0)


async def operator_cycles(args: argparse.Namespace) -> dict[str, Any]:
    """`--cycles` evaluation cycles over every job, as the operator runs them, `evaluation_seconds` apart."""
    cycle = CYCLE_SECONDS
    clock = [args.now]
    settings = OperatorSettings(prometheus_url=args.measure, evaluation_seconds=cycle)
    source = Counting(args.measure, timeout=300)
    bodies = [
        trainingjob(i, ns, job, workers=args.workers, now=args.now, window=args.window)
        for i, ns, job in job_names(args.jobs)
    ]
    kube = OfflineKube(bodies)
    del bodies  # from here on, the stored objects are the kube's
    context = ReconcileContext(kube=kube, settings=settings)
    evaluator = Evaluator(source, cycle, parse_duration(args.step), clock=lambda: clock[0])
    runner = build_runner(kube, source, settings)
    events = queue_events()
    logger = logging.getLogger("bench.evaluate")
    window, step = parse_duration(args.window), parse_duration(args.step)
    bodies_rss = rss_mib()
    cycles = []
    for number in range(cycles_run(args)):
        clock[0] = args.now + number * cycle
        queries, writes = len(source.requests), kube.writes.copy()
        wall, cpu = time.perf_counter(), time.process_time()
        jobs = len((await evaluator.snapshot(window, step)).jobs())  # what the first job's timer would fetch
        read_wall, read_cpu = time.perf_counter() - wall, time.process_time() - cpu
        profiler = cProfile.Profile() if number == args.cycles else None  # an extra cycle, not reported
        if profiler is not None:
            profiler.enable()
        wall, cpu = time.perf_counter(), time.process_time()
        bodies = kube.bodies(KIND)  # what the watch delivered: this cycle's bodies
        with GcTime() as collecting:
            for body in bodies:
                await evaluate_job(body, [], bodies, evaluator=evaluator, runner=runner, context=context, logger=logger)
        job_wall, job_cpu = time.perf_counter() - wall, time.process_time() - cpu
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.profile)
            break
        cycles.append(
            {
                "jobs": jobs,
                "queries": len(source.requests) - queries,
                "read_cpu_s": round(read_cpu, 3),
                "per_job_cpu_s": round(job_cpu, 3),
                "per_job_gc_cpu_s": round(collecting.seconds, 3),
                "per_job_gc": {f"gen{g}": [n, round(t, 3)] for g, (n, t) in sorted(collecting.by_generation.items())},
                "cpu_s": round(read_cpu + job_cpu, 3),
                "wall_s": round(read_wall + job_wall, 3),
                "writes": dict(kube.writes - writes),
                "events": drained(events),
            }
        )
    return {
        "rss_with_bodies_mib": round(bodies_rss, 1),
        "cycles": cycles,
        "full_collection": full_collection(),
        "findings": status_findings(kube.bodies(KIND)),
        "diagnosis": diagnosis_only(await evaluator.snapshot(window, step), clock[0]),
    }


def full_collection() -> dict[str, Any]:
    """What a read adds to its cycle when the frozen heap has grown by `FULL_COLLECTION_GROWTH`: a
    full collection over the thawed heap (`gpuwise.prometheus.heap`), measured on the heap as the
    cycles left it; and how many the cycles' reads made (none, in a steady fleet)."""
    made = read_heap.full_collections
    gc.unfreeze()
    cpu = time.process_time()
    gc.collect()
    return {"growth": FULL_COLLECTION_GROWTH, "in_cycles": made, "cpu_s": round(time.process_time() - cpu, 3)}


def diagnosis_only(snapshot: Snapshot, now: float) -> dict[str, Any]:
    """Window + diagnosis for every job of a snapshot, alone: a part of the per-job path, for reference."""
    sustain, when = Sustain(), datetime.fromtimestamp(now, tz=UTC)
    facts = JobFacts(age_seconds=3600.0, cpu_cores=16.0)
    kinds: Counter[str] = Counter()
    cpu = time.process_time()
    for key in snapshot.jobs():
        context = RuleContext(
            window=snapshot.window(key, facts),
            tunables=Tunables(),
            thresholds=DiagnosisThresholds(),
            sustain=sustain,
            now=when,
            active=frozenset(),
            since={},
        )
        kinds.update(finding.kind for finding, _ in diagnose(context))
    return {"cpu_s": round(time.process_time() - cpu, 3), "findings": dict(sorted(kinds.items()))}


def per_job_queries(namespace: str, job: str, window: str, step: float) -> tuple[dict[str, str], dict[str, str]]:
    """What an operator without batching asks for one job: the same 20 quantities, filtered to it."""
    dev = (f'namespace="{namespace}"', f'pod=~"{job}-[0-9]+"')
    proc = (f'namespace="{namespace}"', f'trainingjob="{job}"')
    rate_window = f"{int(max(60.0, 4 * step))}s"  # as batched.worker_step_query
    step_sum = f"rate({sel(catalog.STEP_DURATION, *proc, suffix='_sum')}[{rate_window}])"
    step_count = f"rate({sel(catalog.STEP_DURATION, *proc, suffix='_count')}[{rate_window}])"
    ranged = {
        "gpu_utilization": f"avg({sel(catalog.GPU_UTIL, *dev)})",
        "data_wait_fraction": f"avg({sel(catalog.DATA_WAIT_RATIO, *proc)})",
        "sm_active": f"max({sel(catalog.SM_ACTIVE, *dev)})",
        "clock_events": f"max by (pod) ({sel(catalog.CLOCKS_EVENT_REASONS, *dev)})",
        "worker_step_seconds": f"avg by (worker) ({step_sum} / {step_count})",
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
        "compute_capability": f"min({sel(catalog.COMPUTE_CAPABILITY, *proc)})",
        "last_step": f"max({sel(catalog.LAST_STEP, *proc)})",
        "batch_size": f"max({sel(catalog.BATCH_SIZE, *proc)})",
        "num_workers": f"max({sel(catalog.NUM_WORKERS, *proc)})",
        "pin_memory": f"min({sel(catalog.PIN_MEMORY, *proc)})",
        "autocast": f"min(max_over_time({sel(catalog.AUTOCAST, *proc)}[{window}]))",
        "cuda_reserved_peak_bytes": f"max({sel(catalog.CUDA_RESERVED_PEAK, *proc)})",
    }
    return ranged, instant


def naive_sample(url: str, now: float, window: float, step: float, *, jobs: int, sample: int) -> dict[str, Any]:
    client = Counting(url, timeout=60)
    chosen = list(job_names(jobs))[:: max(1, jobs // sample)][:sample]
    wall, cpu = time.perf_counter(), time.process_time()
    for _, ns, job in chosen:
        ranged, instant = per_job_queries(ns, job, f"{int(window)}s", step)
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
    figures = asyncio.run(operator_cycles(args))
    peak = rss_mib()
    naive = naive_sample(args.measure, args.now, window, step, jobs=args.jobs, sample=args.sample)
    json.dump({"rss_before_mib": round(before, 1), "peak_rss_mib": round(peak, 1), **figures, "naive": naive},
              sys.stdout)  # fmt: skip
    return 0


# --- orchestration ---------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.support.prometheus import running  # the project's launcher; tests/ is on the path from the root

    promtool = shutil.which("promtool")
    if promtool is None:
        raise SystemExit("needs promtool and prometheus (Debian package 'prometheus'; make system-deps)")
    interval, history = int(parse_duration(args.interval)), int(parse_duration(args.history))
    spanned = parse_duration(args.window) + cycles_run(args) * CYCLE_SECONDS
    if history < spanned:
        raise SystemExit(
            f"--history {args.history} is shorter than the window and the cycles span: give {spanned:.0f}s or more"
        )
    end = int(time.time()) // interval * interval
    with tempfile.TemporaryDirectory(prefix="gpuwise-bench-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        text = work / "series.om.txt"
        with text.open("w") as out:
            series, samples = generate(
                out, args.jobs, workers=args.workers, end=end, interval=interval, history=history
            )
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
        # The last cycle reads up to the end of the data, as a running operator reads up to the last
        # scrape: a cycle past it would see every series stop (no rate() without samples).
        first = end - (cycles_run(args) - 1) * CYCLE_SECONDS
        with running(work, {"global": {"scrape_interval": "15s"}}) as server:
            command = [sys.executable, "-m", "bench.evaluate", "--measure", server.url, "--now", str(first)]
            command += ["--jobs", str(args.jobs), "--workers", str(args.workers), "--window", args.window]
            command += ["--step", args.step]
            command += ["--cycles", str(args.cycles), "--sample", str(args.sample)]
            command += ["--profile", str(Path(args.profile).resolve())] if args.profile else []
            child = subprocess.run(command, capture_output=True, text=True, check=False)
            if child.returncode != 0:
                raise SystemExit(f"measurement failed:\n{child.stderr[-4000:]}")
            figures: dict[str, Any] = json.loads(child.stdout)
    figures["setup"] = {
        "jobs": args.jobs,
        "workers_per_job": args.workers,
        "gpus_per_job": args.workers,
        "series": series,
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
    cycles, naive = figures["cycles"], figures["naive"]
    last = cycles[-1]

    def row(label: str, key: str, fmt: str = "{:.2f}") -> tuple[str, ...]:
        return (label, *(fmt.format(c[key]) for c in cycles))

    def count(label: str, key: str) -> tuple[str, ...]:
        return (label, *(str(sum(c[key].values())) for c in cycles))

    rows = [
        ("operator cycle", *(f"cycle {n}{' (cold)' if n == 1 else ''}" for n in range(1, len(cycles) + 1))),
        row("queries", "queries", "{}"),
        row("(a) batched read CPU s", "read_cpu_s"),
        row("(b) per-job path CPU s", "per_job_cpu_s"),
        row("    of which GC", "per_job_gc_cpu_s"),
        row("(c) total CPU s", "cpu_s"),
        row("wall s", "wall_s"),
        count("API writes (not sent)", "writes"),
        count("Events (queued)", "events"),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.append(f"window + diagnosis alone (a part of b): {figures['diagnosis']['cpu_s']:.2f} s CPU")
    lines.append(
        f"peak RSS: {figures['peak_rss_mib']:.0f} MiB (at start {figures['rss_before_mib']:.0f}, "
        f"with the TrainingJob bodies {figures['rss_with_bodies_mib']:.0f})"
    )
    lines.append(
        f"per-job queries instead (from {naive['sampled_jobs']} jobs): {naive['queries']} queries "
        f"({naive['queries'] / last['queries']:.0f}x), {naive['wall_s']:.1f} s wall, "
        f"{naive['cpu_s']:.1f} s CPU for the read alone ({naive['cpu_s'] / last['read_cpu_s']:.1f}x)"
    )
    steady = cycles[1:] or cycles  # the first cycle after a start reads whole windows and writes every status
    most = max(c["cpu_s"] for c in steady)
    full = figures["full_collection"]
    lines.append(
        f"a read collects the whole heap once it has grown by {full['growth']:.0%} (here {full['in_cycles']} times): "
        f"+{full['cpu_s']:.2f} s CPU in that cycle"
    )
    cpu_ok = most <= TARGET_CPU_SECONDS
    rss_ok = figures["peak_rss_mib"] <= TARGET_RSS_MIB
    lines.append(
        f"targets: CPU ≤ {TARGET_CPU_SECONDS:g} s per cycle{' after the first' if len(cycles) > 1 else ''} "
        f"{'met' if cpu_ok else 'MISSED'}, "
        f"RSS ≤ {TARGET_RSS_MIB:g} MiB {'met' if rss_ok else 'MISSED'}"
    )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    cli.add_argument("--jobs", type=int, default=10_000)
    cli.add_argument("--workers", type=int, default=4, help="workers (pods, one GPU each) per job; 3 or more")
    cli.add_argument("--history", default="20m", help="how much synthetic history to backfill")
    cli.add_argument("--interval", default="15s", help="the synthetic scrape interval")
    cli.add_argument("--window", default="15m", help="the evaluation window (TrainingJob default)")
    cli.add_argument("--step", default="15s", help="the range-query step")
    cli.add_argument("--cycles", type=int, default=3)
    cli.add_argument("--sample", type=int, default=200, help="jobs the per-job baseline really queries")
    cli.add_argument("--json-only", action="store_true")
    cli.add_argument("--profile", metavar="FILE", help="write a cProfile of one more cycle's per-job path")
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
