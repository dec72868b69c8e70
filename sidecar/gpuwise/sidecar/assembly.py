"""One sidecar, assembled: instrumentation copy, step receiver, sampler, collector, HTTP server.

`gpuwise sidecar` runs one on its own; `gpuwise run` embeds one next to the command it runs.
Start-up order is what makes `/healthz` meaningful: the HTTP server comes up first and answers
503, and only when the instrumentation is copied, the step socket bound and a first sample
taken does it answer 200.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from gpuwise.sidecar import instrument_dir
from gpuwise.sidecar.backend import Backend
from gpuwise.sidecar.collector import SidecarCollector
from gpuwise.sidecar.identity import Identity
from gpuwise.sidecar.pod_gpus import PodGpus
from gpuwise.sidecar.receiver import Receiver
from gpuwise.sidecar.sampler import Sampler, Snapshot
from gpuwise.sidecar.server import MetricsServer
from gpuwise.sidecar.steps import StepBook, StepDelta

log = logging.getLogger(__name__)


class Sidecar:
    def __init__(
        self,
        *,
        backend: Backend | None,
        identity: Identity,
        socket_path: Path,
        interval: float = 1.0,
        instrument_path: Path | None = None,
        address: str = "127.0.0.1",
        port: int | None = None,
        on_sample: Callable[[Snapshot], None] | None = None,
        on_step: Callable[[StepDelta], None] | None = None,
        pod_gpus: PodGpus | None = None,
        started_at: float | None = None,
    ) -> None:
        """`pod_gpus` narrows the export to the pod's GPUs; without it, every GPU the backend sees.
        `started_at` (unix time, default now) is when it started listening: a process with more step
        time than that was counted by a sidecar before this one (`StepBook`)."""
        self.backend = backend
        self.pod_gpus = pod_gpus
        self.identity = identity
        self.book = StepBook(started_at=time.time() if started_at is None else started_at)
        self.registry = CollectorRegistry(auto_describe=False)
        self.sampler = (
            Sampler(backend, interval, on_sample=on_sample, pod_gpus=pod_gpus) if backend is not None else None
        )
        self.receiver: Receiver | None = None
        self._socket_path = socket_path
        self._instrument_path = instrument_path
        self._on_step = on_step
        self._ready = False
        self.server = MetricsServer(self.registry, address, port, lambda: self._ready) if port is not None else None

    @property
    def ready(self) -> bool:
        return self._ready

    def start(self) -> None:
        """Start everything; raise (with a message saying what to fix) if something cannot."""
        if self.server is not None:
            self.server.start()
        try:
            if self._instrument_path is not None:
                instrument_dir.install(self._instrument_path)
            if self.pod_gpus is not None:
                self.pod_gpus.prepare()
            self.receiver = Receiver(self._socket_path, self.book, on_step=self._on_step)
            self.receiver.start()
            if self.sampler is not None:
                self.sampler.start()
        except BaseException:
            self.stop()
            raise
        self.registry.register(
            SidecarCollector(
                self.identity,
                self.sampler,
                self.book,
                self.receiver,
                backend=self.backend.name if self.backend is not None else "none",
                scenario=self.backend.scenario if self.backend is not None else "",
                simulated=self.backend.simulated if self.backend is not None else False,
            )
        )
        ProcessCollector(registry=self.registry)
        self._ready = True

    def stop(self) -> None:
        self._ready = False
        if self.sampler is not None:
            self.sampler.stop()
        if self.receiver is not None:
            self.receiver.stop()
        if self.server is not None:
            self.server.stop()
        if self.backend is not None:
            self.backend.close()
