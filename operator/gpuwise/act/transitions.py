"""`gpuwise_action_transitions_total`: the actions taken, counted where the runner posts each Event;
and `gpuwise_action_evictions_total`: the pods node-side actions evicted, counted at each eviction.

The counters belong to the code that acts; the operator serves them on its `/metrics` with its
other metrics (`gpuwise.operator.metrics`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from gpuwise.metrics import catalog

# How long a job's action counts outlive its latest transition (a deleted job's go then too).
ACTION_SERIES_RETENTION_SECONDS: Final = 7 * 24 * 3600.0


class ActionTransitions(Collector):
    """`gpuwise_action_transitions_total{namespace, trainingjob, action, state}`.

    One count per transition of an action record (each one the runner posts an Event for), by the
    state it entered. A job's series end `retention` seconds after its latest transition, so a
    long-running operator does not keep the series of every job it ever acted on; should the job
    act again, its series start anew from zero, as after an operator restart.
    """

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, retention: float = ACTION_SERIES_RETENTION_SECONDS
    ) -> None:
        self._clock = clock
        self._retention = retention
        self._lock = threading.Lock()
        # job -> (time of its latest transition, (action, state) -> count)
        self._jobs: dict[tuple[str, str], tuple[float, dict[tuple[str, str], int]]] = {}

    def count(self, namespace: str, name: str, action: str, state: str) -> None:
        with self._lock:
            counts = self._current().get((namespace, name), (0.0, {}))[1]
            counts[action, state] = counts.get((action, state), 0) + 1
            self._jobs[namespace, name] = (self._clock(), counts)

    def _current(self) -> dict[tuple[str, str], tuple[float, dict[tuple[str, str], int]]]:
        since = self._clock() - self._retention
        for key in [key for key, (latest, _) in self._jobs.items() if latest <= since]:
            del self._jobs[key]
        return self._jobs

    def collect(self) -> Iterator[CounterMetricFamily]:
        metric = catalog.ACTION_TRANSITIONS
        family = CounterMetricFamily(metric.name, metric.help, labels=metric.labels)
        with self._lock:
            shown = sorted((job, sorted(counts.items())) for job, (_, counts) in self._current().items())
        for (namespace, name), counts in shown:
            for (action, state), n in counts:
                family.add_metric([namespace, name, action, state], n)
        yield family


ACTIONS: Final = ActionTransitions()


EVICTIONS: Final = Counter(
    catalog.ACTION_EVICTIONS.name.removesuffix("_total"),
    catalog.ACTION_EVICTIONS.help,
    list(catalog.ACTION_EVICTIONS.labels),
)
