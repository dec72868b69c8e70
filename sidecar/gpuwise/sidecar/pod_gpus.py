"""Which of the node's GPUs this sidecar exports: the pod's, and only those.

The sidecar requests no GPU, so it sees the whole node (`NVIDIA_VISIBLE_DEVICES=all`): on a shared
8-GPU node, exporting what it sees would give a 2-GPU pod eight GPUs, other tenants' work and a
wrong utilization. What is the pod's, in order:

1. The devices the pod's trainer named (`gpuwise.instrument.pod_gpus`: its container's visible
   devices as the device plugin set them), matched by GPU UUID or host index; a MIG device by its
   `MIG-` UUID or `<gpu>:<slot>` index. A named GPU brings its MIG instances; a named MIG instance
   comes alone, without its parent GPU's series, whose memory, power and activity are shared with
   the other instances' pods.
2. Before any trainer named one: every GPU, when the node has exactly as many as the pod requested
   (`--requested-gpus`, the GPU container's `nvidia.com/gpu`) and none is in MIG mode.
3. Otherwise none: no device series at all, rather than another tenant's under this pod's name.
   `gpuwise_sidecar_pod_gpus{source="unknown"}` says so, and the log says why, once.

The kubelet's PodResources API would know the devices of any pod, instrumented or not, but it is a
hostPath socket, which the Pod Security `restricted` profile refuses; the README says more.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gpuwise.instrument import pod_gpus as named_by_trainers
from gpuwise.metrics import catalog
from gpuwise.sidecar.backend import Device, Sample

log = logging.getLogger(__name__)

# How the sidecar knows its pod's GPUs: the `source` label of gpuwise_sidecar_pod_gpus.
TRAINER: Final = "trainer"  # a trainer container named them
REQUEST: Final = "request"  # the node has exactly the GPUs the pod requested
UNKNOWN: Final = "unknown"  # it does not know them, and exports none
VISIBLE: Final = "visible"  # no pod to scope to (`gpuwise run`, a sidecar run by hand): every GPU it sees

# The pre-R470 MIG device UUID: `MIG-<parent GPU UUID>/<GPU instance>/<compute instance>`.
_LEGACY_MIG: Final = re.compile(r"MIG-(GPU-[0-9A-Fa-f-]+)/(\d+)/\d+")


@dataclass(frozen=True, slots=True)
class Attribution:
    """The devices of one sample that are the pod's, and how the sidecar knows."""

    source: str
    devices: frozenset[Device]

    def keep(self, sample: Sample) -> Sample:
        """`sample` without the readings and failures of devices that are not the pod's."""
        return Sample(
            tuple(reading for reading in sample.readings if reading.device in self.devices),
            tuple(failure for failure in sample.failures if failure.device is None or failure.device in self.devices),
        )


def devices_of(sample: Sample) -> frozenset[Device]:
    """Every device a sample speaks of, read or failed."""
    found = {reading.device for reading in sample.readings}
    found.update(failure.device for failure in sample.failures if failure.device is not None)
    return frozenset(found)


def visible(sample: Sample) -> Attribution:
    """Everything: what a sidecar without a pod exports."""
    return Attribution(VISIBLE, devices_of(sample))


def names(device: Device) -> set[str]:
    """The ids the device plugin may give this device, normalised like `_normalise`."""
    if not device.is_mig:
        return {device.uuid, str(device.index)}
    found = {f"{device.uuid}/{device.mig_instance}"}
    if device.mig_uuid:
        found.add(device.mig_uuid)
    if device.mig_slot is not None:
        found.add(f"{device.index}:{device.mig_slot}")
    return found


def _normalise(device_id: str) -> str:
    legacy = _LEGACY_MIG.fullmatch(device_id)
    return f"{legacy[1]}/{legacy[2]}" if legacy else device_id


def _parent(device: Device) -> Device:
    return Device(device.index, device.uuid, device.pci_bus_id, device.model, device.minor)


def named(devices: Iterable[Device], ids: Iterable[str]) -> frozenset[Device]:
    """The devices `ids` name: a named GPU with its MIG instances, a named MIG instance alone."""
    wanted = {_normalise(device_id) for device_id in ids}
    return frozenset(
        device for device in devices if names(device) & wanted or (device.is_mig and names(_parent(device)) & wanted)
    )


def _has_mig(sample: Sample, devices: Iterable[Device]) -> bool:
    return any(device.is_mig for device in devices) or any(
        reading.metric is catalog.MIG_ENABLED and reading.value > 0 for reading in sample.readings
    )


class PodGpus:
    """Decides, sample by sample, which devices are the pod's (see the module's docstring).

    `directory` is where trainers name their devices (`gpuwise.wiring.POD_GPUS_DIR`); it is read at
    every sample, as a trainer may start, or restart, at any time. `requested` is how many whole
    GPUs the pod requested, or None where that is not known.
    """

    def __init__(self, directory: Path, requested: int | None = None) -> None:
        self.directory = directory
        self.requested = requested
        self._said: tuple[str, frozenset[str], frozenset[Device]] | None = None

    def prepare(self) -> None:
        """Create the directory, writable by a trainer running as another user (sticky, as /tmp)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o1777)

    def attribute(self, sample: Sample) -> Attribution:
        devices = devices_of(sample)
        ids = self._claims()
        if ids:
            kept = named(devices, ids)
            known = {name for device in devices for name in names(device)}
            self._say(TRAINER, frozenset(i for i in ids if _normalise(i) not in known), kept)
            return Attribution(TRAINER, kept)
        whole = [device for device in devices if not device.is_mig]
        if self.requested is not None and len(whole) == self.requested and not _has_mig(sample, devices):
            self._say(REQUEST, frozenset(), devices)
            return Attribution(REQUEST, devices)
        self._say(UNKNOWN, frozenset(), frozenset(), node=len(whole))
        return Attribution(UNKNOWN, frozenset())

    def _claims(self) -> frozenset[str]:
        try:
            return named_by_trainers.read(os.fspath(self.directory))
        except OSError:
            return frozenset()

    def _say(self, source: str, unmatched: frozenset[str], kept: frozenset[Device], node: int = 0) -> None:
        """Log each change of how the pod's GPUs are known, once."""
        if self._said == (source, unmatched, kept):
            return
        self._said = (source, unmatched, kept)
        gpus = ", ".join(sorted({_describe(device) for device in kept})) or "none"
        if source == TRAINER:
            log.info("exporting the GPUs the trainer named: %s", gpus)
            if unmatched:
                log.warning("the trainer named devices this node does not show: %s", ", ".join(sorted(unmatched)))
        elif source == REQUEST:
            log.info("exporting all %d GPUs of the node: the pod requested as many (%s)", len(kept), gpus)
        else:
            requested = "an unknown number" if self.requested is None else str(self.requested)
            log.warning(
                "the pod's GPUs are unknown: no trainer has named them yet (in %s), and the node has %d GPUs "
                "where the pod requested %s%s; exporting no GPU series until a trainer names them",
                self.directory,
                node,
                requested,
                " (MIG in use)" if node == self.requested else "",
            )


def _describe(device: Device) -> str:
    if device.is_mig:
        return f"{device.index} (MIG {device.mig_profile}, GPU instance {device.mig_instance})"
    return f"{device.index} ({device.uuid})"
