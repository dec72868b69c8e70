"""A stand-in for the `pynvml` module surface the NVML backend uses, driven by test data.

Error classes and constants are the real pynvml's, so the backend's error handling is tested
against the real codes; the functions answer from `FakeGpu` records instead of a driver. A GPU
can be told to lose itself, to refuse any function with NVML_ERROR_NOT_SUPPORTED, to run MIG
instances, to support GPM, and to raise XID events.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

NVMLError = pynvml.NVMLError
_CONSTANTS = {
    name: getattr(pynvml, name)
    for name in dir(pynvml)
    if name.startswith(("NVML_", "nvml")) and isinstance(getattr(pynvml, name), int)
}


@dataclass
class FakeInstance:
    gi: int
    profile: str
    used_mib: int = 1000
    total_mib: int = 9984
    gpm: dict[int, float] = field(default_factory=dict)


@dataclass
class FakeGpu:
    index: int
    name: str = "NVIDIA H100 80GB HBM3"
    capability: tuple[int, int] = (9, 0)  # nvmlDeviceGetCudaComputeCapability
    util: tuple[int, int] = (87, 41)
    total_mib: int = 81559
    used_mib: int = 40000
    reserved_mib: int = 512
    power_mw: int = 312_500
    energy_mj: int = 9_000_000
    temp_c: int = 61
    sm_mhz: int = 1755
    mem_mhz: int = 2619
    pcie_kib: tuple[int, int] = (1000, 3000)
    clock_events: int = 0x4  # NVML clock-event reasons: at the software power cap, as a busy GPU is
    replays: int = 2
    processes: list[tuple[int, int | None, int | None]] = field(default_factory=list)  # pid, bytes, GI
    process_util: list[tuple[int, int, int]] = field(default_factory=list)  # pid, sm %, timestamp µs
    instances: list[FakeInstance] | None = None  # None: MIG disabled
    mig_capable: bool = True
    gpm: dict[int, float] | None = None  # metric id -> percent; None: GPM unsupported
    unsupported: set[str] = field(default_factory=set)  # function names answering NOT_SUPPORTED
    broken: set[str] = field(default_factory=set)  # function names raising RuntimeError
    missing: set[str] = field(default_factory=set)  # functions the driver lacks (FUNCTION_NOT_FOUND)
    xid_supported: bool = True
    lost: bool = False

    @property
    def uuid(self) -> str:
        return f"GPU-00000000-0000-0000-0000-{self.index:012d}"


def mig_uuid(gpu: int, gi: int) -> str:
    """The UUID NVML gives GPU instance `gi` of GPU `gpu` (R470 and later: `MIG-` and a UUID of its own)."""
    return f"MIG-00000000-0000-0000-{gi:04d}-{gpu:012d}"


@dataclass(frozen=True)
class Handle:
    gpu: FakeGpu
    instance: FakeInstance | None = None


class _Request:
    """c_nvmlGpmMetricsGet_t, as plain attributes."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(16)]


class FakeNvml:
    c_nvmlGpmMetricsGet_t = _Request

    def __init__(self, gpus: list[FakeGpu], *, init_error: int | None = None) -> None:
        self.__dict__.update(_CONSTANTS)
        self.NVMLError = NVMLError
        self.gpus = gpus
        self.init_error = init_error
        self.events: queue.Queue[SimpleNamespace] = queue.Queue()
        self.calls: list[str] = []
        self.shut_down = threading.Event()

    # --- helpers -------------------------------------------------------------------------------
    def _check(self, function: str, handle: Handle) -> FakeGpu:
        self.calls.append(function)
        gpu = handle.gpu
        if gpu.lost:
            raise NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if function in gpu.unsupported:
            raise NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if function in gpu.broken:
            raise RuntimeError(f"{function} broke")
        if function in gpu.missing:
            raise NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return gpu

    def xid(self, gpu: int, code: int) -> None:
        handle = Handle(self.gpus[gpu])
        self.events.put(
            SimpleNamespace(
                device=handle, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=code, gpuInstanceId=0
            )
        )

    # --- library -------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shut_down.set()

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        return Handle(self.gpus[index])

    # --- identity ------------------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, handle: Handle) -> str:
        gpu = self._check("nvmlDeviceGetUUID", handle)
        return gpu.uuid if handle.instance is None else mig_uuid(gpu.index, handle.instance.gi)

    def nvmlDeviceGetName(self, handle: Handle) -> bytes:
        gpu = self._check("nvmlDeviceGetName", handle)
        name = gpu.name if handle.instance is None else f"{gpu.name} MIG {handle.instance.profile}"
        return name.encode()  # older bindings return bytes: the backend must cope

    def nvmlDeviceGetPciInfo(self, handle: Handle) -> SimpleNamespace:
        gpu = self._check("nvmlDeviceGetPciInfo", handle)
        return SimpleNamespace(busId=f"00000000:{0x18 + gpu.index:02X}:00.0")

    def nvmlDeviceGetMinorNumber(self, handle: Handle) -> int:
        return self._check("nvmlDeviceGetMinorNumber", handle).index

    def nvmlDeviceGetCudaComputeCapability(self, handle: Handle) -> tuple[int, int]:
        return self._check("nvmlDeviceGetCudaComputeCapability", handle).capability

    # --- MIG -----------------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, device: Handle) -> list[int]:
        gpu = self._check("nvmlDeviceGetMigMode", device)
        if not gpu.mig_capable:
            raise NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.instances is not None else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Handle) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Handle, index: int) -> Handle:
        gpu = self._check("nvmlDeviceGetMigDeviceHandleByIndex", device)
        if gpu.instances is None or index >= len(gpu.instances):
            raise NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return Handle(gpu, gpu.instances[index])

    def nvmlDeviceGetGpuInstanceId(self, device: Handle) -> int:
        assert device.instance is not None
        return device.instance.gi

    # --- readings ------------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: Handle) -> SimpleNamespace:
        gpu = self._check("nvmlDeviceGetUtilizationRates", handle)
        if gpu.instances is not None:
            raise NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=gpu.util[0], memory=gpu.util[1])

    def nvmlDeviceGetMemoryInfo(self, handle: Handle, version: int | None = None) -> SimpleNamespace:
        gpu = self._check("nvmlDeviceGetMemoryInfo" if version is None else "nvmlDeviceGetMemoryInfo_v2", handle)
        mib = 1024 * 1024
        if handle.instance is not None:
            used, total, reserved = handle.instance.used_mib, handle.instance.total_mib, 0
        else:
            used, total, reserved = gpu.used_mib, gpu.total_mib, gpu.reserved_mib
        free = total - used - reserved
        if version is None:
            return SimpleNamespace(total=total * mib, used=(used + reserved) * mib, free=free * mib)
        return SimpleNamespace(total=total * mib, used=used * mib, free=free * mib, reserved=reserved * mib)

    def nvmlDeviceGetPowerUsage(self, handle: Handle) -> int:
        return self._check("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Handle) -> int:
        return self._check("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj

    def nvmlDeviceGetTemperature(self, handle: Handle, sensor: int) -> int:
        return self._check("nvmlDeviceGetTemperature", handle).temp_c

    def nvmlDeviceGetClockInfo(self, handle: Handle, type: int) -> int:
        gpu = self._check("nvmlDeviceGetClockInfo", handle)
        return gpu.sm_mhz if type == pynvml.NVML_CLOCK_SM else gpu.mem_mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Handle) -> int:
        return self._check("nvmlDeviceGetCurrentClocksEventReasons", handle).clock_events

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Handle) -> int:
        return self._check("nvmlDeviceGetCurrentClocksThrottleReasons", handle).clock_events

    def nvmlDeviceGetPcieThroughput(self, device: Handle, counter: int) -> int:
        gpu = self._check("nvmlDeviceGetPcieThroughput", device)
        return gpu.pcie_kib[0] if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else gpu.pcie_kib[1]

    def nvmlDeviceGetPcieReplayCounter(self, handle: Handle) -> int:
        return self._check("nvmlDeviceGetPcieReplayCounter", handle).replays

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Handle) -> list[SimpleNamespace]:
        gpu = self._check("nvmlDeviceGetComputeRunningProcesses", handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=gi) for pid, used, gi in gpu.processes]

    def nvmlDeviceGetProcessUtilization(self, handle: Handle, timeStamp: int) -> list[SimpleNamespace]:
        gpu = self._check("nvmlDeviceGetProcessUtilization", handle)
        samples = [
            SimpleNamespace(pid=pid, smUtil=sm, timeStamp=ts) for pid, sm, ts in gpu.process_util if ts > timeStamp
        ]
        if not samples:
            raise NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return samples

    # --- GPM -----------------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, device: Handle) -> SimpleNamespace:
        gpu = self._check("nvmlGpmQueryDeviceSupport", device)
        return SimpleNamespace(isSupportedDevice=int(gpu.gpm is not None))

    def nvmlGpmSampleAlloc(self) -> SimpleNamespace:
        return SimpleNamespace(values=None)

    def nvmlGpmSampleFree(self, gpmSample: SimpleNamespace) -> None:
        pass

    def nvmlGpmSampleGet(self, device: Handle, gpmSample: SimpleNamespace) -> SimpleNamespace:
        gpu = self._check("nvmlGpmSampleGet", device)
        gpmSample.values = dict(gpu.gpm or {})
        return gpmSample

    def nvmlGpmMigSampleGet(self, device: Handle, gpuInstanceId: int, gpmSample: SimpleNamespace) -> SimpleNamespace:
        gpu = self._check("nvmlGpmMigSampleGet", device)
        instance = next(i for i in gpu.instances or [] if i.gi == gpuInstanceId)
        gpmSample.values = dict(instance.gpm)
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: _Request) -> _Request:
        for slot in range(metricsGet.numMetrics):
            entry = metricsGet.metrics[slot]
            value = metricsGet.sample2.values.get(entry.metricId)
            entry.nvmlReturn, entry.value = (pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0) if value is None else (0, value)
        return metricsGet

    # --- events --------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, handle: Handle, eventTypes: int, eventSet: object) -> None:
        if not handle.gpu.xid_supported:
            raise NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlEventSetWait_v2(self, eventSet: object, timeoutms: int) -> SimpleNamespace:
        try:
            return self.events.get(timeout=min(timeoutms, 50) / 1000)
        except queue.Empty:
            raise NVMLError(pynvml.NVML_ERROR_TIMEOUT) from None

    def nvmlEventSetFree(self, eventSet: object) -> None:
        pass
