"""The operator's own Prometheus metrics, served on `--metrics-port` for the chart's ServiceMonitor.

Two honest counters, both measured where the work happens without touching the handlers:

* `gpuwise_operator_handler_runs_total{handler, outcome}`: every kopf handler, timer and webhook
  run that kopf reports as succeeded or failed. kopf logs exactly one such line per run (for
  event and timer handlers too); a logging handler counts them.
* `gpuwise_operator_api_requests_total{verb, outcome}`: the API calls the operator makes itself
  (creating Jobs and Services, patching status), with `outcome="error"` when the API server refused.

Plus the prometheus-client process metrics (memory, CPU, open files) of the operator process, the
per-TrainingJob gauges of the metric catalog's `trainingjob` scope (`JobGauges`): what the
latest evaluation of each running job found, for alerts and dashboards; and the actions taken
(`ActionTransitions`), counted where the action runner posts each transition's Event.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from prometheus_client import REGISTRY, Counter, Gauge, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuwise.act.transitions import ACTIONS
from gpuwise.kube.client import ApiError, JsonDict, Kube
from gpuwise.metrics import Metric, catalog

VERSION: Final = "0.1.0"

HANDLER_RUNS: Final = Counter(
    "gpuwise_operator_handler_runs",
    "kopf handler runs of the operator, by handler id and outcome (success, failure).",
    ["handler", "outcome"],
)
API_REQUESTS: Final = Counter(
    "gpuwise_operator_api_requests",
    "Kubernetes API requests the operator made itself, by verb and outcome (ok, error).",
    ["verb", "outcome"],
)
INFO: Final = Gauge("gpuwise_operator_info", "Always 1; the labels say which operator this is.", ["version"])


@dataclass(slots=True)  # not frozen: one is made per job and cycle, and only read
class JobSeries:
    """One job's per-job series, as its latest evaluation left them."""

    gpu_utilization: float | None
    data_wait: float | None
    findings: tuple[tuple[str, float], ...]  # (kind, confidence)
    recommendations: tuple[tuple[str, str], ...]  # (action, finding)
    utilization_threshold: float  # spec.efficiency.thresholds.gpuUtilization
    action_speedups: tuple[tuple[str, str, float], ...] = ()  # (action, "predicted" | "measured", ratio)


class JobGauges(Collector):
    """`gpuwise_job_*`: per running TrainingJob, what its latest evaluation found.

    A series exists only while what it stands for holds: a cleared finding or recommendation, or an
    unmeasured quantity, has no series (never a 0). `forget()` drops a job that stopped running;
    a job that is not published again within its `ttl` (deleted, so its timer stopped, or
    Prometheus unreachable) is dropped at the next scrape, so no series outlives its job.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, str], tuple[float, JobSeries]] = {}  # key -> (expiry, series)

    def publish(self, namespace: str, name: str, series: JobSeries, ttl: float) -> None:
        with self._lock:
            self._jobs[(namespace, name)] = (self._clock() + ttl, series)

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._jobs.pop((namespace, name), None)

    def jobs(self) -> dict[tuple[str, str], JobSeries]:
        """The jobs with live series, expired ones dropped."""
        now = self._clock()
        with self._lock:
            for key in [key for key, (expiry, _) in self._jobs.items() if expiry <= now]:
                del self._jobs[key]
            return {key: series for key, (_, series) in self._jobs.items()}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        def family(metric: Metric) -> GaugeMetricFamily:
            return GaugeMetricFamily(metric.name, metric.help, labels=metric.labels)

        finding, recommendation = family(catalog.JOB_FINDING), family(catalog.JOB_RECOMMENDATION)
        utilization, wait = family(catalog.JOB_GPU_UTIL), family(catalog.JOB_DATA_WAIT)
        threshold = family(catalog.JOB_GPU_UTIL_THRESHOLD)
        speedup = family(catalog.JOB_ACTION_SPEEDUP)
        for (namespace, name), series in sorted(self.jobs().items()):
            for kind, confidence in series.findings:
                finding.add_metric([namespace, name, kind], confidence)
            for action, cause in series.recommendations:
                recommendation.add_metric([namespace, name, action, cause], 1.0)
            if series.gpu_utilization is not None:
                utilization.add_metric([namespace, name], series.gpu_utilization)
            if series.data_wait is not None:
                wait.add_metric([namespace, name], series.data_wait)
            threshold.add_metric([namespace, name], series.utilization_threshold)
            for action, basis, ratio in series.action_speedups:
                speedup.add_metric([namespace, name, action, basis], ratio)
        yield from (finding, recommendation, utilization, wait, threshold, speedup)


class ReclaimedGpuSeconds(Collector):
    """`gpuwise_reclaimed_gpu_seconds_total{namespace, trainingjob}`: GPUs x seconds suspended.

    The reconciler says when a job that gpuwise suspended for idleness is suspended (`holding`)
    and when it is not (`released`, also when it is deleted); the count grows with the clock in
    between, so a scrape sees the seconds up to now, and the job's series stays (at its total)
    after it resumes. An operator restarted meanwhile counts from its start.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._counted: dict[tuple[str, str], float] = {}
        self._held: dict[tuple[str, str], tuple[float, int]] = {}  # since, GPUs

    def holding(self, namespace: str, name: str, gpus: int) -> None:
        with self._lock:
            self._counted.setdefault((namespace, name), 0.0)
            self._held.setdefault((namespace, name), (self._clock(), gpus))

    def released(self, namespace: str, name: str, *, forget: bool = False) -> None:
        with self._lock:
            key = (namespace, name)
            if key in self._held:
                since, gpus = self._held.pop(key)
                self._counted[key] = self._counted.get(key, 0.0) + (self._clock() - since) * gpus
            if forget:
                self._counted.pop(key, None)

    def totals(self) -> dict[tuple[str, str], float]:
        now = self._clock()
        with self._lock:
            held = {key: (now - since) * gpus for key, (since, gpus) in self._held.items()}
            return {key: total + held.get(key, 0.0) for key, total in self._counted.items()}

    def collect(self) -> Iterator[CounterMetricFamily]:
        metric = catalog.RECLAIMED_GPU_SECONDS
        family = CounterMetricFamily(metric.name, metric.help, labels=metric.labels)
        for (namespace, name), total in sorted(self.totals().items()):
            family.add_metric([namespace, name], total)
        yield family


JOBS: Final = JobGauges()
REGISTRY.register(JOBS)
RECLAIMED: Final = ReclaimedGpuSeconds()
REGISTRY.register(RECLAIMED)

REGISTRY.register(ACTIONS)

# kopf: "Handler 'reconcile' succeeded." / "Timer 'resync' failed with an exception. Will retry."
_OUTCOME: Final = re.compile(r"^(?:Handler|Timer|Daemon|Webhook) '(?P<id>[^']+)' (?P<verb>succeeded|failed)\b")


class HandlerOutcomes(logging.Handler):
    """Count kopf's per-run outcome log lines."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            match = _OUTCOME.match(record.getMessage())
        except Exception:  # a record whose arguments do not format is not ours to count
            return
        if match:
            outcome = "success" if match["verb"] == "succeeded" else "failure"
            HANDLER_RUNS.labels(handler=match["id"], outcome=outcome).inc()


class MeteredKube(Kube):
    """`Kube` that counts its requests and the API server's refusals."""

    async def create(self, body: JsonDict) -> JsonDict | None:
        with _counted("create"):
            return await super().create(body)

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> JsonDict | None:
        with _counted("get"):
            return await super().get(api_version, kind, namespace, name)

    async def patch(
        self, api_version: str, kind: str, namespace: str, name: str, body: JsonDict, *, status: bool = False
    ) -> JsonDict | None:
        with _counted("patch"):
            return await super().patch(api_version, kind, namespace, name, body, status=status)


@contextlib.contextmanager
def _counted(verb: str) -> Iterator[None]:
    try:
        yield
    except ApiError:
        API_REQUESTS.labels(verb=verb, outcome="error").inc()
        raise
    API_REQUESTS.labels(verb=verb, outcome="ok").inc()


def serve(port: int, address: str = "0.0.0.0") -> None:
    """Start the /metrics server in a thread and begin counting kopf's handler outcomes."""
    INFO.labels(version=VERSION).set(1)
    logging.getLogger("kopf").addHandler(HandlerOutcomes())
    start_http_server(port, addr=address)
