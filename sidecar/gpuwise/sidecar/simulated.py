"""The simulated backend: modelled GPUs playing a scenario or replaying a trace.

It produces the NVML backend's device metrics (not the per-process ones: there is no process),
with the same names, units and labels, so tests and demos exercise the real exposition. Every
series it feeds carries `simulated="true"`, and `gpuwise_sidecar_info` says `backend="simulated"`,
so simulated numbers can never pass for a real GPU's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from gpuwise.hardware.compute_capability import as_gauge
from gpuwise.metrics import BY_NAME, catalog
from gpuwise.sidecar import backend
from gpuwise.sidecar.backend import Device, Sample, SampleBuilder
from gpuwise.sidecar.device_trace import Trace
from gpuwise.sidecar.scenarios import SCENARIOS, Activity, noise


@dataclass(frozen=True)
class GpuModel:
    """The datasheet numbers a scenario's fractions are scaled by."""

    name: str
    memory_mib: int
    reserved_mib: int
    idle_watts: float
    max_watts: float
    max_sm_mhz: float
    memory_mhz: float
    idle_celsius: float
    hot_celsius: float
    pcie_bytes_per_s: float
    compute_capability: tuple[int, int]


H100: Final = GpuModel(
    name="NVIDIA H100 80GB HBM3",
    memory_mib=81559,
    reserved_mib=512,
    idle_watts=70.0,
    max_watts=700.0,
    max_sm_mhz=1980.0,
    memory_mhz=2619.0,
    idle_celsius=31.0,
    hot_celsius=72.0,
    pcie_bytes_per_s=63e9,
    compute_capability=(9, 0),
)

L4: Final = GpuModel(
    name="NVIDIA L4",  # no MIG: a light job on one shares it by time-slicing (gpuwise's Pack action)
    memory_mib=23034,
    reserved_mib=434,
    idle_watts=16.0,
    max_watts=72.0,
    max_sm_mhz=2040.0,
    memory_mhz=6251.0,
    idle_celsius=30.0,
    hot_celsius=75.0,
    pcie_bytes_per_s=32e9,
    compute_capability=(8, 9),
)
MODELS: Final = {"H100": H100, "L4": L4}
"""The GPUs the simulated backend can be, by the short name `gpuwise sidecar --model` takes."""


class SimulatedBackend:
    name = "simulated"
    simulated = True

    def __init__(
        self,
        scenario: str = "steady",
        gpus: int = 1,
        *,
        trace: Trace | None = None,
        seed: int = 0,
        model: GpuModel = H100,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if trace is None and scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
        self.scenario = "trace" if trace is not None else scenario
        self._play = SCENARIOS.get(scenario, SCENARIOS["steady"])
        self._trace = trace
        self._model = model
        self._clock = clock
        self._start = clock()
        count = trace.gpus if trace is not None else gpus
        self.devices = [_device(index, seed, model) for index in range(count)]
        # Energy since "boot", integrated from the simulated power draw.
        self._energy_mj = [1e9 * (2.0 + noise(seed, index)) for index in range(count)]
        self._last: float | None = None

    def sample(self) -> Sample:
        now = self._clock()
        t = now - self._start
        elapsed = 0.0 if self._last is None else now - self._last
        self._last = now
        builder = SampleBuilder()
        for device in self.devices:
            if self._trace is not None:
                values = dict(self._trace.at(t, device.index))
            else:
                activity = self._play(t, device.index, len(self.devices))
                values = self._values(activity)
                self._faults(builder, device, activity, values)
            watts = values.get(catalog.POWER_USAGE.name)
            if watts is not None:
                self._energy_mj[device.index] += watts * elapsed * 1000.0
                values.setdefault(catalog.TOTAL_ENERGY.name, self._energy_mj[device.index])
            for name, value in values.items():
                builder.add(BY_NAME[name], device, value)
        return builder.build()

    @staticmethod
    def _faults(builder: SampleBuilder, device: Device, activity: Activity, values: dict[str, float]) -> None:
        """What the `faulty` scenario reports: XID events, and readings that fail (left out, counted)."""
        if activity.xid_count:
            values[catalog.XID_LAST.name] = activity.xid
            builder.add(catalog.XID_EVENTS, device, activity.xid_count, xid=str(activity.xid))
        for name in activity.failing:
            del values[name]
            builder.fail(BY_NAME[name], device, backend.TIMEOUT)

    def _values(self, activity: Activity) -> dict[str, float]:
        model = self._model
        used = round(activity.memory * (model.memory_mib - model.reserved_mib))
        watts = model.idle_watts + activity.power * (model.max_watts - model.idle_watts)
        return {
            catalog.GPU_UTIL.name: round(activity.busy * 100.0),
            catalog.MEM_COPY_UTIL.name: round(activity.dram * 100.0),
            catalog.FB_USED.name: used,
            catalog.FB_FREE.name: model.memory_mib - model.reserved_mib - used,
            catalog.FB_RESERVED.name: model.reserved_mib,
            catalog.POWER_USAGE.name: round(watts, 3),
            catalog.GPU_TEMP.name: round(
                model.idle_celsius + activity.power * (model.hot_celsius - model.idle_celsius) + activity.heat
            ),
            catalog.SM_CLOCK.name: round(model.max_sm_mhz * activity.clock),
            catalog.MEM_CLOCK.name: model.memory_mhz,
            catalog.CLOCKS_EVENT_REASONS.name: activity.clock_events,
            catalog.PCIE_TX.name: round(activity.pcie * model.pcie_bytes_per_s),
            catalog.PCIE_RX.name: round(activity.pcie * model.pcie_bytes_per_s * 1.4),
            catalog.PCIE_REPLAY.name: 0.0,
            catalog.XID_LAST.name: 0.0,
            catalog.MIG_ENABLED.name: 0.0,
            catalog.COMPUTE_CAPABILITY.name: as_gauge(model.compute_capability),
            catalog.GR_ENGINE_ACTIVE.name: activity.busy,
            catalog.SM_ACTIVE.name: activity.sm_active,
            catalog.SM_OCCUPANCY.name: activity.occupancy,
            catalog.TENSOR_ACTIVE.name: activity.tensor,
            catalog.DRAM_ACTIVE.name: activity.dram,
        }

    def close(self) -> None:
        pass


def _device(index: int, seed: int, model: GpuModel) -> Device:
    digits = "".join(f"{int((noise(seed, index, part) + 1.0) * 2**31):08x}" for part in range(4))
    uuid = f"GPU-{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:32]}"
    return Device(
        index=index,
        uuid=uuid,
        pci_bus_id=f"00000000:{(0x18 + 0x10 * index) % 0x100:02X}:00.0",
        model=model.name,
        minor=index,
    )
