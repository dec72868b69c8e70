"""What a GPU backend is: something that, asked for a sample, says what it could read and why not.

Two implementations share this interface: NVML for real GPUs and a simulated one for tests and
demos. A backend returns readings already in the catalog's units, and for every value it could
not read a failure with a short reason. The exposition leaves a failed series out (never a fake
zero) and counts the failure, so a missing series always has an explanation next to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from gpuwise.metrics import Metric

# Why a reading is missing: the `reason` label of gpuwise_sample_errors_total.
NOT_SUPPORTED: Final = "not_supported"  # this GPU or driver does not have it
MIG_UNSUPPORTED: Final = "mig_unsupported"  # not available with MIG enabled (e.g. utilization)
GPU_LOST: Final = "gpu_lost"  # the GPU fell off the bus
NO_PERMISSION: Final = "no_permission"
NOT_FOUND: Final = "not_found"
TIMEOUT: Final = "timeout"
UNAVAILABLE: Final = "unavailable"  # the driver's NVML lacks the function: too old
NVML_ERROR: Final = "nvml_error"  # any other NVML return code
EXCEPTION: Final = "exception"  # anything else; the sidecar logs it


@dataclass(frozen=True, slots=True)
class Device:
    """A GPU, or a MIG instance of one, identified the way dcgm-exporter labels it.

    For a MIG instance, `index`, `uuid`, `pci_bus_id` and `minor` are its parent GPU's (as
    dcgm-exporter does) and `mig_profile`/`mig_instance` tell the instances apart. `mig_uuid` and
    `mig_slot` (its index among the GPU's MIG devices) are how the device plugin names an instance
    it hands a pod (`MIG-...`, or `<gpu>:<slot>`); they are no labels, and None where not known.
    """

    index: int
    uuid: str
    pci_bus_id: str
    model: str
    minor: int | None = None
    mig_profile: str | None = None
    mig_instance: int | None = None
    mig_uuid: str | None = None
    mig_slot: int | None = None

    @property
    def is_mig(self) -> bool:
        return self.mig_instance is not None

    def instance(self, profile: str, instance: int, *, uuid: str | None = None, slot: int | None = None) -> Device:
        return Device(self.index, self.uuid, self.pci_bus_id, self.model, self.minor, profile, instance, uuid, slot)


@dataclass(frozen=True, slots=True)
class Reading:
    metric: Metric
    device: Device
    value: float
    extra: tuple[tuple[str, str], ...] = ()  # the metric's extra labels, e.g. (("pid", "4242"),)


@dataclass(frozen=True, slots=True)
class Failure:
    metric: Metric
    device: Device | None
    reason: str


@dataclass(frozen=True, slots=True)
class Sample:
    readings: tuple[Reading, ...]
    failures: tuple[Failure, ...] = ()


class Backend(Protocol):
    """A source of device samples. `sample` is called from one thread, never concurrently."""

    @property
    def name(self) -> str: ...  # "nvml" or "simulated"

    @property
    def scenario(self) -> str: ...  # what a simulated backend plays; "" for real GPUs

    @property
    def simulated(self) -> bool: ...

    def sample(self) -> Sample: ...

    def close(self) -> None: ...


class BackendUnavailable(RuntimeError):
    """The backend cannot start here; the message says why and what to do instead."""


class SampleBuilder:
    """Collects one sample's readings and failures."""

    __slots__ = ("failures", "readings")

    def __init__(self) -> None:
        self.readings: list[Reading] = []
        self.failures: list[Failure] = []

    def add(self, metric: Metric, device: Device, value: float, **extra: str) -> None:
        self.readings.append(Reading(metric, device, value, tuple(extra.items())))

    def fail(self, metric: Metric, device: Device | None, reason: str) -> None:
        self.failures.append(Failure(metric, device, reason))

    def build(self) -> Sample:
        return Sample(tuple(self.readings), tuple(self.failures))
