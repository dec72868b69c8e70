"""The operator's own Prometheus metrics, served on `--metrics-port` for the chart's ServiceMonitor.

Two honest counters, both measured where the work happens without touching the handlers:

* `gpuwise_operator_handler_runs_total{handler, outcome}`: every kopf handler, timer and webhook
  run that kopf reports as succeeded or failed. kopf logs exactly one such line per run (for
  event and timer handlers too); a logging handler counts them.
* `gpuwise_operator_api_requests_total{verb, outcome}`: the API calls the operator makes itself
  (creating Jobs and Services, patching status), with `outcome="error"` when the API server refused.

Plus the prometheus-client process metrics (memory, CPU, open files) of the operator process.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from typing import Final

from prometheus_client import Counter, Gauge, start_http_server

from gpuwise.operator.kube import ApiError, JsonDict, Kube

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
