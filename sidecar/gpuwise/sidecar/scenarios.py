"""Scripted GPU behaviour for the simulated backend: the shapes the diagnosis must tell apart.

A scenario maps (seconds since start, GPU index, GPU count) to an `Activity`, a handful of 0..1
fractions; the simulated backend turns those into DCGM readings of a modelled GPU. Everything is
a pure function of its arguments (the noise too), so a test sees the same numbers on every run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from gpuwise.metrics import catalog


@dataclass(frozen=True, slots=True)
class Activity:
    busy: float  # share of time a kernel ran (DCGM_FI_DEV_GPU_UTIL / 100)
    sm_active: float
    occupancy: float
    tensor: float
    dram: float
    memory: float  # share of framebuffer used
    power: float  # 0 = idle draw, 1 = board power limit
    pcie: float  # share of PCIe bandwidth
    clock: float = 1.0  # SM clock as a share of its maximum (below 1: throttled)
    heat: float = 0.0  # extra degrees C above what power explains
    clock_events: int = 0  # NVML clock-event reasons bitmask (DCGM_FI_DEV_CLOCKS_EVENT_REASONS)
    # Faults: the XID the driver reported last and how many of it so far, and the readings
    # (catalog names) that fail this round (NVML timed out).
    xid: int = 0
    xid_count: int = 0
    failing: tuple[str, ...] = ()


def noise(*keys: int) -> float:
    """A deterministic pseudo-random number in [-1, 1) for these keys (splitmix64)."""
    x = 0x9E3779B97F4A7C15
    for key in keys:
        x = (x ^ (key & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        x = (x ^ (x >> 31)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
    return ((x ^ (x >> 29)) / 2.0**63) - 1.0


def _jitter(activity: Activity, t: float, gpu: int, amount: float) -> Activity:
    tick = int(t)

    def wobble(value: float, salt: int) -> float:
        return min(max(value * (1.0 + amount * noise(gpu, tick, salt)), 0.0), 1.0)

    return replace(
        activity,
        busy=wobble(activity.busy, 1),
        sm_active=wobble(activity.sm_active, 2),
        tensor=wobble(activity.tensor, 3),
        dram=wobble(activity.dram, 4),
        power=wobble(activity.power, 5),
        pcie=wobble(activity.pcie, 6),
    )


# NVML clock-event reasons the scenarios report.
GPU_IDLE: Final = 0x1
SW_THERMAL: Final = 0x20
HW_THERMAL: Final = 0x40

IDLE: Final = Activity(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, clock=0.17, clock_events=GPU_IDLE)
# A well-fed mixed-precision training step: the GPU is busy and its tensor cores are used.
STEADY: Final = Activity(0.97, 0.82, 0.45, 0.38, 0.55, 0.78, 0.85, 0.05)


def idle(t: float, gpu: int, gpus: int) -> Activity:
    return IDLE


def steady(t: float, gpu: int, gpus: int) -> Activity:
    return _jitter(STEADY, t, gpu, 0.02)


def data_starved(t: float, gpu: int, gpus: int) -> Activity:
    """Short compute bursts between long waits for input: low, ragged utilization."""
    starved = Activity(0.29, 0.22, 0.3, 0.09, 0.15, 0.55, 0.3, 0.02)
    return _jitter(starved, t, gpu, 0.25)


def bursty(t: float, gpu: int, gpus: int) -> Activity:
    """Busy for 20 s, then nearly idle for 20 s (evaluation, checkpointing, a synchronous step)."""
    busy = math.fmod(t, 40.0) < 20.0
    return _jitter(STEADY if busy else replace(IDLE, memory=STEADY.memory, busy=0.04), t, gpu, 0.05)


def memory_light(t: float, gpu: int, gpus: int) -> Activity:
    """Busy but using a tenth of the memory: the batch could be several times larger."""
    light = Activity(0.9, 0.55, 0.2, 0.3, 0.35, 0.09, 0.6, 0.04)
    return _jitter(light, t, gpu, 0.03)


def straggler(t: float, gpu: int, gpus: int) -> Activity:
    """The last GPU runs hot and throttled; the others finish early and wait for it."""
    if gpu == gpus - 1:
        hot = replace(STEADY, busy=0.99, clock=0.55, heat=14.0, clock_events=SW_THERMAL | HW_THERMAL)
        return _jitter(hot, t, gpu, 0.02)
    return _jitter(replace(STEADY, busy=0.62, sm_active=0.5, tensor=0.24, power=0.55), t, gpu, 0.04)


def throttled(t: float, gpu: int, gpus: int) -> Activity:
    """Every GPU too hot: thermal slowdown holds the SM clocks at 60 %, so steps take longer."""
    hot = replace(STEADY, busy=0.98, sm_active=0.7, clock=0.6, heat=18.0, clock_events=SW_THERMAL | HW_THERMAL)
    return _jitter(hot, t, gpu, 0.02)


# An application fault (graphics engine exception), not the hardware's: warning, not critical.
FAULT_XID: Final = 13
FAULT_EVERY_SECONDS: Final = 10
# A reading that fails every third second: no dashboard or rule needs it to be there.
FAULTY_READING: Final = catalog.MEM_CLOCK.name


def faulty(t: float, gpu: int, gpus: int) -> Activity:
    """Steady training on a GPU 0 with faults: an XID 13 every 10 s (from the start) and a memory
    clock reading that times out every third second. For the exporter-health panels and alerts."""
    if gpu != 0:
        return steady(t, gpu, gpus)
    tick = int(t)
    return replace(
        steady(t, gpu, gpus),
        xid=FAULT_XID,
        xid_count=tick // FAULT_EVERY_SECONDS + 1,
        failing=(FAULTY_READING,) if tick % 3 == 0 else (),
    )


Scenario = Callable[[float, int, int], Activity]

SCENARIOS: Final[dict[str, Scenario]] = {
    "idle": idle,
    "steady": steady,
    "data-starved": data_starved,
    "bursty": bursty,
    "memory-light": memory_light,
    "straggler": straggler,
    "throttled": throttled,
    "faulty": faulty,
}
