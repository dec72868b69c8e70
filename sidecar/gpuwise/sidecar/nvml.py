"""The NVML backend: real GPUs through `nvidia-ml-py` (import `pynvml`).

Devices and MIG instances are enumerated once, at start-up: MIG is only repartitioned on an idle
GPU, after the operator has moved pods away, so the sidecar restarts with its pod anyway.

Every reading is its own NVML call with its own error handling, so one unsupported field costs
exactly its series: utilization has no value on MIG, reserved memory needs a newer driver, a lost
GPU answers nothing. Each such gap is reported as a failure with its reason, never as a zero.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuwise.hardware.compute_capability import as_gauge
from gpuwise.metrics import Metric, catalog
from gpuwise.sidecar import backend, nvml_errors
from gpuwise.sidecar.backend import BackendUnavailable, Device, Sample, SampleBuilder
from gpuwise.sidecar.gpm import METRICS as GPM_METRICS
from gpuwise.sidecar.gpm import GpmReader
from gpuwise.sidecar.xid import XidWatcher

log = logging.getLogger(__name__)

MIB = 1024 * 1024
_MIG_PROFILE = re.compile(r"\b(\d+g\.\d+gb(?:\+\w+)?)\b", re.IGNORECASE)


@dataclass
class _Instance:
    device: Device
    handle: Any
    gpm: GpmReader | None


@dataclass
class _Gpu:
    device: Device
    handle: Any
    mig: bool
    gpm: GpmReader | None
    gpm_missing: str  # why `gpm` is None: profiling is per MIG instance, or not supported
    compute_capability: tuple[int, int] | None = None  # (major, minor); None where NVML has none
    instances: list[_Instance] = field(default_factory=list)
    utilization_seen: int = 0  # NVML timestamp (µs) of the latest per-process sample read


class NvmlBackend:
    name = "nvml"
    scenario = ""
    simulated = False

    def __init__(self, nvml: Any = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        """`nvml` is the pynvml module, or a stand-in with its surface (tests)."""
        self._nvml: Any = nvml if nvml is not None else _import_pynvml()
        self._clock = clock
        self._logged: set[tuple[str, str]] = set()
        try:
            self._nvml.nvmlInit()
            count = self._nvml.nvmlDeviceGetCount()
        except Exception as exc:
            raise BackendUnavailable(
                f"NVML did not initialise ({exc}): no NVIDIA driver is visible here. On Kubernetes, "
                "request an nvidia.com/gpu resource; without a GPU, use --backend simulated."
            ) from exc
        self._gpus = [gpu for index in range(count) if (gpu := self._enumerate(index)) is not None]
        self._xid = XidWatcher(self._nvml, [(gpu.device, gpu.handle) for gpu in self._gpus])

    @property
    def devices(self) -> list[Device]:
        return [device for gpu in self._gpus for device in (gpu.device, *(i.device for i in gpu.instances))]

    # --- enumeration ---------------------------------------------------------------------------

    def _enumerate(self, index: int) -> _Gpu | None:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            device = Device(
                index=index,
                uuid=nvml_errors.text(nvml.nvmlDeviceGetUUID(handle)),
                pci_bus_id=nvml_errors.text(nvml.nvmlDeviceGetPciInfo(handle).busId),
                model=nvml_errors.text(nvml.nvmlDeviceGetName(handle)),
                minor=self._optional(nvml.nvmlDeviceGetMinorNumber, handle),
            )
        except Exception as exc:
            log.error("GPU %d is not usable and will not be reported: %s", index, exc)
            return None
        mode = self._optional(nvml.nvmlDeviceGetMigMode, handle)
        mig = bool(mode is not None and mode[0] == nvml.NVML_DEVICE_MIG_ENABLE)
        gpm_supported = self._gpm_supported(handle)
        gpm = None if mig or not gpm_supported else self._gpm(handle, None)
        gpu = _Gpu(
            device,
            handle,
            mig,
            gpm,
            backend.MIG_UNSUPPORTED if mig and gpm_supported else backend.NOT_SUPPORTED,
            self._capability(handle),
        )
        if mig:
            gpu.instances = self._instances(gpu, gpm_supported)
        return gpu

    def _capability(self, handle: Any) -> tuple[int, int] | None:
        """The GPU's compute capability, read once: it is the chip's, and never changes."""
        found = self._optional(self._nvml.nvmlDeviceGetCudaComputeCapability, handle)
        if found is None:
            return None
        major, minor = (int(part) for part in found)
        return (major, minor) if major > 0 else None

    def _instances(self, gpu: _Gpu, gpm_supported: bool) -> list[_Instance]:
        nvml = self._nvml
        found = []
        for slot in range(self._optional(nvml.nvmlDeviceGetMaxMigDeviceCount, gpu.handle) or 0):
            try:
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, slot)
                instance = int(nvml.nvmlDeviceGetGpuInstanceId(handle))
                name = nvml_errors.text(nvml.nvmlDeviceGetName(handle))
            except Exception:  # NOT_FOUND: an empty slot
                continue
            match = _MIG_PROFILE.search(name)
            uuid = self._optional(nvml.nvmlDeviceGetUUID, handle)
            device = gpu.device.instance(
                match.group(1) if match else name,
                instance,
                uuid=nvml_errors.text(uuid) if uuid is not None else None,
                slot=slot,
            )
            gpm = self._gpm(gpu.handle, instance) if gpm_supported else None
            found.append(_Instance(device, handle, gpm))
        return found

    def _gpm_supported(self, handle: Any) -> bool:
        support = self._optional(self._nvml.nvmlGpmQueryDeviceSupport, handle)
        return bool(support is not None and support.isSupportedDevice)

    def _gpm(self, handle: Any, instance: int | None) -> GpmReader | None:
        try:
            return GpmReader(self._nvml, handle, instance)
        except Exception as exc:
            log.warning("GPM is not available (%s); profiling metrics will be absent", exc)
            return None

    def _optional(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except Exception:
            return None

    # --- sampling ------------------------------------------------------------------------------

    def sample(self) -> Sample:
        builder = SampleBuilder()
        now = self._clock()
        for gpu in self._gpus:
            self._sample_gpu(builder, gpu, now)
            for instance in gpu.instances:
                self._sample_memory(builder, instance.device, instance.handle)
                builder.fail(catalog.GPU_UTIL, instance.device, backend.MIG_UNSUPPORTED)
                self._sample_gpm(builder, instance.device, instance.gpm, now, backend.NOT_SUPPORTED)
        return builder.build()

    def _sample_gpu(self, builder: SampleBuilder, gpu: _Gpu, now: float) -> None:
        nvml, device, handle = self._nvml, gpu.device, gpu.handle
        read = self._reader(builder, device)
        builder.add(catalog.MIG_ENABLED, device, 1.0 if gpu.mig else 0.0)
        if gpu.compute_capability is not None:
            builder.add(catalog.COMPUTE_CAPABILITY, device, as_gauge(gpu.compute_capability))
        if gpu.mig:
            for metric in (catalog.GPU_UTIL, catalog.MEM_COPY_UTIL):
                builder.fail(metric, device, backend.MIG_UNSUPPORTED)
        elif (
            rates := read((catalog.GPU_UTIL, catalog.MEM_COPY_UTIL), nvml.nvmlDeviceGetUtilizationRates, handle)
        ) is not None:
            builder.add(catalog.GPU_UTIL, device, rates.gpu)
            builder.add(catalog.MEM_COPY_UTIL, device, rates.memory)
        self._sample_memory(builder, device, handle)
        if (milliwatts := read(catalog.POWER_USAGE, nvml.nvmlDeviceGetPowerUsage, handle)) is not None:
            builder.add(catalog.POWER_USAGE, device, milliwatts / 1000.0)
        if (energy := read(catalog.TOTAL_ENERGY, nvml.nvmlDeviceGetTotalEnergyConsumption, handle)) is not None:
            builder.add(catalog.TOTAL_ENERGY, device, energy)
        if (
            celsius := read(catalog.GPU_TEMP, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
        ) is not None:
            builder.add(catalog.GPU_TEMP, device, celsius)
        for metric, clock in (
            (catalog.SM_CLOCK, nvml.NVML_CLOCK_SM),
            (catalog.MEM_CLOCK, nvml.NVML_CLOCK_MEM),
        ):
            if (mhz := read(metric, nvml.nvmlDeviceGetClockInfo, handle, clock)) is not None:
                builder.add(metric, device, mhz)
        if (reasons := read(catalog.CLOCKS_EVENT_REASONS, self._clock_event_reasons, handle)) is not None:
            builder.add(catalog.CLOCKS_EVENT_REASONS, device, reasons)
        for metric, counter in (
            (catalog.PCIE_TX, nvml.NVML_PCIE_UTIL_TX_BYTES),
            (catalog.PCIE_RX, nvml.NVML_PCIE_UTIL_RX_BYTES),
        ):
            if (kib_per_s := read(metric, nvml.nvmlDeviceGetPcieThroughput, handle, counter)) is not None:
                builder.add(metric, device, kib_per_s * 1024.0)
        if (replays := read(catalog.PCIE_REPLAY, nvml.nvmlDeviceGetPcieReplayCounter, handle)) is not None:
            builder.add(catalog.PCIE_REPLAY, device, replays)
        self._xid.report(builder, device)
        self._sample_processes(builder, gpu)
        self._sample_gpm(builder, device, gpu.gpm, now, gpu.gpm_missing)

    def _clock_event_reasons(self, handle: Any) -> int:
        """Why the clocks are where they are (a bitmask). Drivers before R535 call these throttle reasons."""
        nvml = self._nvml
        try:
            return int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
        except Exception as exc:
            if nvml_errors.reason(nvml, exc) != backend.UNAVAILABLE:
                raise
        return int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))

    def _sample_memory(self, builder: SampleBuilder, device: Device, handle: Any) -> None:
        nvml = self._nvml
        fields = (catalog.FB_USED, catalog.FB_FREE, catalog.FB_RESERVED)
        try:
            memory = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
        except Exception as exc:  # drivers before 510 have no v2: used and free, but no reserved
            if nvml_errors.reason(nvml, exc) not in (backend.UNAVAILABLE, backend.NOT_SUPPORTED):
                self._failed(builder, fields, device, exc)
                return
            builder.fail(catalog.FB_RESERVED, device, nvml_errors.reason(nvml, exc))
            if (memory := self._reader(builder, device)(fields[:2], nvml.nvmlDeviceGetMemoryInfo, handle)) is None:
                return
        else:
            builder.add(catalog.FB_RESERVED, device, memory.reserved // MIB)
        builder.add(catalog.FB_USED, device, memory.used // MIB)
        builder.add(catalog.FB_FREE, device, memory.free // MIB)

    def _sample_processes(self, builder: SampleBuilder, gpu: _Gpu) -> None:
        nvml = self._nvml
        instances = {instance.device.mig_instance: instance.device for instance in gpu.instances}
        read = self._reader(builder, gpu.device)
        for process in read(catalog.PROCESS_GPU_MEMORY, nvml.nvmlDeviceGetComputeRunningProcesses, gpu.handle) or ():
            if process.usedGpuMemory is None:  # NVML_VALUE_NOT_AVAILABLE: e.g. no permission to see it
                continue
            where = instances.get(getattr(process, "gpuInstanceId", None), gpu.device)
            builder.add(catalog.PROCESS_GPU_MEMORY, where, process.usedGpuMemory, pid=str(process.pid))
        if gpu.mig:
            builder.fail(catalog.PROCESS_SM_UTIL, gpu.device, backend.MIG_UNSUPPORTED)
            return
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(gpu.handle, gpu.utilization_seen)
        except Exception as exc:
            if nvml_errors.reason(nvml, exc) != backend.NOT_FOUND:  # NOT_FOUND: no process ran since
                self._failed(builder, (catalog.PROCESS_SM_UTIL,), gpu.device, exc)
            return
        # NVML returns every sample in its buffer newer than the last one read: a process can have
        # several. One series per pid, with its newest sample.
        newest: dict[int, Any] = {}
        for entry in samples:
            gpu.utilization_seen = max(gpu.utilization_seen, int(entry.timeStamp))
            kept = newest.get(entry.pid)
            if kept is None or int(entry.timeStamp) > int(kept.timeStamp):
                newest[entry.pid] = entry
        for pid, entry in newest.items():
            builder.add(catalog.PROCESS_SM_UTIL, gpu.device, entry.smUtil / 100.0, pid=str(pid))

    def _sample_gpm(
        self, builder: SampleBuilder, device: Device, gpm: GpmReader | None, now: float, missing: str
    ) -> None:
        if gpm is None:
            for metric, _ in GPM_METRICS:
                builder.fail(metric, device, missing)
            return
        try:
            results = gpm.read(now)
        except Exception as exc:
            self._failed(builder, [metric for metric, _ in GPM_METRICS], device, exc)
            return
        for metric, value in results:
            if isinstance(value, BaseException):
                self._failed(builder, (metric,), device, value)
            else:
                builder.add(metric, device, value)

    def _reader(self, builder: SampleBuilder, device: Device) -> Callable[..., Any]:
        """A caller of NVML functions that turns an error into failures of the given metrics."""

        def read(metrics: Metric | Sequence[Metric], call: Callable[..., Any], *args: Any) -> Any:
            try:
                return call(*args)
            except Exception as exc:
                self._failed(builder, (metrics,) if isinstance(metrics, Metric) else metrics, device, exc)
                return None

        return read

    def _failed(self, builder: SampleBuilder, metrics: Sequence[Metric], device: Device, error: BaseException) -> None:
        reason = nvml_errors.reason(self._nvml, error)
        if reason == backend.EXCEPTION and (key := (metrics[0].name, type(error).__name__)) not in self._logged:
            self._logged.add(key)
            log.exception("reading %s failed unexpectedly", metrics[0].name, exc_info=error)
        for metric in metrics:
            builder.fail(metric, device, reason)

    def close(self) -> None:
        self._xid.close()
        for gpu in self._gpus:
            for gpm in (gpu.gpm, *(instance.gpm for instance in gpu.instances)):
                if gpm is not None:
                    gpm.close()
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()


def _import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:
        raise BackendUnavailable("the NVML backend needs the nvidia-ml-py package (pip install nvidia-ml-py)") from exc
    return pynvml
