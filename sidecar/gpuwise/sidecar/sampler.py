"""The sampling thread: asks the backend for a sample every interval and keeps the latest.

The latest sample is an immutable `Snapshot` published by swapping one reference, so a scrape
reads it without a lock and without ever calling into NVML: a slow or wedged driver delays the
next snapshot, never a scrape. Failures are counted here, across samples, by device, metric and
reason; a backend that raises outright is counted too and sampling goes on.

A snapshot holds only the pod's devices (`pod_gpus`): a backend sees the whole node, and what is
not the pod's is dropped here, before anything is counted or exported.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gpuwise.sidecar import backend
from gpuwise.sidecar.backend import Backend, Device, Sample
from gpuwise.sidecar.pod_gpus import Attribution, PodGpus, visible

log = logging.getLogger(__name__)

FailureKey = tuple[Device | None, str, str]  # device, metric name, reason


@dataclass(frozen=True, slots=True)
class Snapshot:
    sample: Sample
    taken_at: float  # unix time
    duration: float  # seconds the backend took
    rounds: int
    failures: Mapping[FailureKey, int]  # running totals
    pod_gpus: Attribution  # which devices are the pod's, and how the sidecar knows; `sample` holds only those


class Sampler:
    def __init__(
        self,
        source: Backend,
        interval: float,
        *,
        on_sample: Callable[[Snapshot], None] | None = None,
        pod_gpus: PodGpus | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """`pod_gpus`: which devices to keep; None keeps every device the backend sees."""
        self.backend = source
        self.pod_gpus = pod_gpus
        self.interval = interval
        self._on_sample = on_sample
        self._wall = wall
        self._failures: Counter[FailureKey] = Counter()
        self._rounds = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.snapshot: Snapshot | None = None

    def sample_once(self) -> Snapshot:
        started = time.perf_counter()
        try:
            sample = self.backend.sample()
        except Exception:
            log.exception("the %s backend failed to sample", self.backend.name)
            sample = Sample(())
            self._failures[None, "sample", backend.EXCEPTION] += 1
        attribution = self.pod_gpus.attribute(sample) if self.pod_gpus is not None else visible(sample)
        sample = attribution.keep(sample)
        for failure in sample.failures:
            self._failures[failure.device, failure.metric.name, failure.reason] += 1
        self._rounds += 1
        snapshot = Snapshot(
            sample=sample,
            taken_at=self._wall(),
            duration=time.perf_counter() - started,
            rounds=self._rounds,
            failures=MappingProxyType(dict(self._failures)),
            pod_gpus=attribution,
        )
        self.snapshot = snapshot
        if self._on_sample is not None:
            self._on_sample(snapshot)
        return snapshot

    def start(self) -> None:
        self.sample_once()  # the first scrape already has data
        self._thread = threading.Thread(target=self._run, name="gpuwise-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        deadline = time.monotonic()
        while True:
            deadline += self.interval
            # Fixed rate; after a stall, skip the missed rounds rather than rush through them.
            deadline = max(deadline, time.monotonic())
            if self._stop.wait(deadline - time.monotonic()):
                return
            self.sample_once()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(self.interval, 1.0) + 5.0)
