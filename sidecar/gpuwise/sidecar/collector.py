"""The prometheus-client collector: metric families built from the sidecar's cached state.

A scrape reads the sampler's latest snapshot and a copy of the step book; it never calls the
backend. Families for the devices are rebuilt only when a new snapshot arrives, so scrapes
between two samples cost the step metrics and the text encoding, nothing more.
Names, types, help and label names all come from the metric catalog.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Final

from prometheus_client.metrics_core import Metric as Family
from prometheus_client.registry import Collector

from gpuwise.metrics import Metric, Scope, catalog, scope_labels
from gpuwise.sidecar.backend import Device
from gpuwise.sidecar.exposition import format_value
from gpuwise.sidecar.identity import Identity
from gpuwise.sidecar.receiver import Receiver
from gpuwise.sidecar.sampler import Sampler, Snapshot
from gpuwise.sidecar.steps import BOUNDS, ProcessSteps, StepBook

Labels = dict[str, str]
VERSION: Final = "0.1.0"
_BUCKET_BOUNDS: Final = (*(format_value(bound) for bound in BOUNDS), "+Inf")
_ORDER: Final = {metric: position for position, metric in enumerate(catalog.CATALOG)}


class Families:
    """Metric families under construction, keyed by catalog entry, in catalog order on output."""

    def __init__(self) -> None:
        self._families: dict[Metric, Family] = {}

    def add(self, metric: Metric, labels: Labels, value: float, suffix: str = "") -> None:
        family = self._families.get(metric)
        if family is None:
            family = self._families[metric] = Family(metric.name, metric.help, metric.kind.value)
        family.add_sample(metric.name + suffix, labels, value)

    def __iter__(self) -> Iterator[Family]:
        return iter([family for _, family in sorted(self._families.items(), key=lambda item: _ORDER[item[0]])])


class Labeller:
    """Label values, picked for each series by the label names its catalog entry lists.

    The label set of a scope is computed once per device; empty values are left out.
    """

    def __init__(self, identity: Identity, simulated: bool) -> None:
        self._common = {
            "namespace": identity.namespace,
            "pod": identity.pod,
            "container": identity.container,  # only device series list it (the GPU's user)
            "trainingjob": identity.trainingjob,
            "worker": identity.worker,
            "Hostname": identity.hostname,
            "simulated": "true" if simulated else "",
        }
        self._cache: dict[tuple[Scope, Device | None], Labels] = {}

    def __call__(self, metric: Metric, device: Device | None = None, /, **extra: str) -> Labels:
        key = (metric.scope, device)
        labels = self._cache.get(key)
        if labels is None:
            values = self._common if device is None else {**self._common, **_device_values(device)}
            labels = self._cache[key] = {name: values[name] for name in scope_labels(metric.scope) if values.get(name)}
        return {**labels, **extra} if extra else labels


def _device_values(device: Device) -> Labels:
    return {
        "gpu": str(device.index),
        "UUID": device.uuid,
        "pci_bus_id": device.pci_bus_id,
        "device": "" if device.minor is None else f"nvidia{device.minor}",
        "modelName": device.model,
        "GPU_I_PROFILE": device.mig_profile or "",
        "GPU_I_ID": "" if device.mig_instance is None else str(device.mig_instance),
    }


class SidecarCollector(Collector):
    def __init__(
        self,
        identity: Identity,
        sampler: Sampler | None,
        book: StepBook,
        receiver: Receiver | None = None,
        *,
        backend: str,
        scenario: str = "",
        simulated: bool = False,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._sampler = sampler
        self._book = book
        self._receiver = receiver
        self._labels = Labeller(identity, simulated)
        about = {"backend": backend, "scenario": scenario, "version": VERSION}
        self._info = self._labels(catalog.SIDECAR_INFO, **{name: value for name, value in about.items() if value})
        self._wall = wall
        self._cached: tuple[Snapshot | None, list[Family]] = (None, [])

    def collect(self) -> Iterable[Family]:
        snapshot = self._sampler.snapshot if self._sampler is not None else None
        cached_for, device_families = self._cached
        if snapshot is not cached_for:
            device_families = list(self._device_families(snapshot)) if snapshot is not None else []
            self._cached = (snapshot, device_families)
        yield from device_families
        yield from self._step_families(self._book.processes())
        yield from self._sidecar_families(snapshot)

    def _device_families(self, snapshot: Snapshot) -> Families:
        families = Families()
        for reading in snapshot.sample.readings:
            families.add(
                reading.metric, self._labels(reading.metric, reading.device, **dict(reading.extra)), reading.value
            )
        for (device, field, reason), count in snapshot.failures.items():
            families.add(
                catalog.SAMPLE_ERRORS, self._labels(catalog.SAMPLE_ERRORS, device, field=field, reason=reason), count
            )
        return families

    def _step_families(self, processes: list[ProcessSteps]) -> Families:
        families = Families()
        now = self._wall()
        for process in processes:
            labels = self._labels(catalog.STEPS, local_rank=str(process.rank))
            families.add(catalog.STEPS, labels, process.steps)
            if process.samples is not None:
                families.add(catalog.SAMPLES, labels, process.samples)
            cumulative = 0
            for bound, count in zip(_BUCKET_BOUNDS, process.bucket_counts, strict=True):
                cumulative += count
                families.add(catalog.STEP_DURATION, {**labels, "le": bound}, cumulative, "_bucket")
            families.add(catalog.STEP_DURATION, labels, process.steps, "_count")
            families.add(catalog.STEP_DURATION, labels, process.step_seconds, "_sum")
            families.add(catalog.DATA_WAIT, labels, process.wait_seconds)
            families.add(catalog.LAST_STEP, labels, process.last_step_at)
            families.add(catalog.INSTRUMENT_DROPPED, labels, process.dropped)
            optional: Mapping[Metric, float | None] = {
                catalog.DATA_WAIT_RATIO: process.wait_ratio(now),
                catalog.BATCH_SIZE: process.batch_size,
                catalog.NUM_WORKERS: process.num_workers,
                catalog.PIN_MEMORY: _flag(process.pin_memory),
                catalog.AUTOCAST: _flag(process.autocast),
                catalog.CUDA_ALLOCATED_PEAK: process.cuda_allocated_peak,
                catalog.CUDA_RESERVED_PEAK: process.cuda_reserved_peak,
            }
            for metric, value in optional.items():
                if value is not None:
                    families.add(metric, labels, value)
        return families

    def _sidecar_families(self, snapshot: Snapshot | None) -> Families:
        families = Families()
        job = self._labels(catalog.SAMPLE_ROUNDS)
        families.add(catalog.SIDECAR_INFO, self._info, 1.0)
        if snapshot is not None:
            families.add(catalog.SAMPLE_ROUNDS, job, snapshot.rounds)
            families.add(catalog.SAMPLE_DURATION, job, snapshot.duration)
            families.add(catalog.LAST_SAMPLE, job, snapshot.taken_at)
            families.add(catalog.POD_GPUS, {**job, "source": snapshot.pod_gpus.source}, len(snapshot.pod_gpus.devices))
        if self._receiver is not None:
            families.add(catalog.EVENTS_RECEIVED, job, self._receiver.received)
            for reason, count in sorted(self._receiver.dropped.items()):
                families.add(catalog.EVENTS_DROPPED, {**job, "reason": reason}, count)
            for request_id, at, path in self._receiver.acks.latest():
                families.add(catalog.CHECKPOINT_ACK, {**job, "request_id": request_id, "path": path}, at)
        return families


def _flag(value: bool | None) -> float | None:
    return None if value is None else float(value)
