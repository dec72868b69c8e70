"""A job's recent past, and what "sustained" means over it.

`JobWindow` is everything the rules may look at: per-sample series for the quantities that must
hold *over time* (utilization, data wait), and single facts for the rest (the GPU model, the batch
size the job reported). It is filled from Prometheus by the operator and from the in-process
sidecar by `gpuwise run`, so the rules never know where numbers came from, and a quantity that
was not measured is None — never a guessed 0.

Sustained, precisely: a condition holds when at least `hold_fraction` (90 %) of the window's
samples satisfy it, the window is at least `min_coverage` (80 %) full, and the job is past its
start-up `grace`. Once a finding is active it clears only when fewer than `release_fraction`
(50 %) of samples satisfy it — hysteresis, so a job hovering near a threshold does not flap. A
bursty job whose utilization dips below the threshold now and then (well under 10 % of its
samples) gets no finding.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Final, overload

# NVML clock-event reasons (DCGM_FI_DEV_CLOCKS_EVENT_REASONS bits) that mean the SM clocks are held
# down by the GPU's thermal or power protection. Left out on purpose: GPU idle, application or
# user clock settings, sync boost, display clocks, and the software power cap (0x4), which is how
# a fully busy GPU normally runs: drawing its configured power limit is not a fault.
CLOCK_SLOWDOWNS: Final[Mapping[int, str]] = {
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}


def slowdown_bits(reasons: float) -> int:
    """The `CLOCK_SLOWDOWNS` bits of a clock-event reasons mask."""
    return int(reasons) & sum(CLOCK_SLOWDOWNS)


class Points(Sequence[tuple[float, float]]):
    """(unix time, value) pairs held as two arrays of doubles: 16 bytes a point, not a 104-byte tuple.

    At 10,000 jobs of 4 workers the step times are 2 million points a cycle; as tuples of floats
    they were 220 MB of the operator's RSS and most of the read's CPU. Iterating yields the same
    tuples a list of them would; `values` is there for a caller that needs only the values
    (`step_values`). The arrays may be shared between series (a query's grid of times, see
    `gpuwise.prometheus.answers`): never write into them.
    """

    __slots__ = ("times", "values")

    def __init__(self, times: array[float], values: array[float]) -> None:
        self.times, self.values = times, values

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[tuple[float, float]]:
        return zip(self.times, self.values, strict=True)

    @overload
    def __getitem__(self, index: int) -> tuple[float, float]: ...
    @overload
    def __getitem__(self, index: slice) -> list[tuple[float, float]]: ...
    def __getitem__(self, index: int | slice) -> tuple[float, float] | list[tuple[float, float]]:
        if isinstance(index, slice):
            return list(zip(self.times[index], self.values[index], strict=True))
        return self.times[index], self.values[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # equal to a list, so unhashable like one

    def __repr__(self) -> str:
        return repr(list(self))


def step_values(points: Sequence[tuple[float, float]]) -> Sequence[float]:
    """The values of (time, value) pairs: for `Points`, the array it holds, without a tuple per point."""
    return points.values if isinstance(points, Points) else [value for _, value in points]


@dataclass(frozen=True)
class Sustain:
    hold_fraction: float = 0.9
    release_fraction: float = 0.5
    min_coverage: float = 0.8
    grace_seconds: float = 300.0

    def __post_init__(self) -> None:
        if not 0 < self.release_fraction <= self.hold_fraction <= 1:
            raise ValueError("need 0 < release_fraction <= hold_fraction <= 1")


@dataclass(slots=True)
class Reported:
    """What a job's telemetry reported over its window: the measured fields of a `JobWindow`.

    The one list of them: the Prometheus read makes one record per job as its round ends
    (`gpuwise.prometheus.snapshot`), and a window takes its fields by their names
    (`REPORTED_FIELDS`). Not reported: None, an empty series or mapping, or no GPU (`gpus` 0), as
    each default says.
    """

    # Per-sample series over the window (job-wide means at each sample time).
    gpu_utilization: Sequence[float] = ()  # %, 0–100
    data_wait_fraction: Sequence[float] = ()  # 0–1 of step time spent waiting for input
    sm_active: Sequence[float] = ()  # 0–1, the busiest GPU's DCGM_FI_PROF_SM_ACTIVE; empty where unmeasured
    # Facts over the window; None when not measured.
    sm_activity: float | None = None  # 0–1, GPM / DCGM_FI_PROF_SM_ACTIVE
    tensor_activity: float | None = None  # 0–1
    memory_used_mib: float | None = None  # peak framebuffer used on the busiest GPU
    memory_total_mib: float | None = None
    seconds_since_last_step: float | None = None
    gpus: int = 0  # GPUs that reported
    gpu_model: str | None = None
    compute_capability: tuple[int, int] | None = None
    batch_size: int | None = None
    num_workers: int | None = None
    pin_memory: bool | None = None
    autocast: bool | None = None
    # (batch size, peak CUDA memory in MiB) pairs the job reported, for the memory model.
    memory_by_batch: Sequence[tuple[int, float]] = field(default_factory=tuple)
    # Per worker index: (unix time, mean step seconds) samples, for stragglers.
    worker_step_seconds: Mapping[int, Sequence[tuple[float, float]]] = field(default_factory=dict)
    # Their smallest and largest (`straggler.step_extremes`) where the reader took them as it read
    # the series, still in the CPU's cache (a rule taking them later, from memory, took 25 µs a
    # job); None: the rules take them when they need them.
    worker_step_extremes: tuple[float, float] | None = None
    # Per worker index, per sample: the CLOCK_SLOWDOWNS bits set on its most throttled GPU (0: none).
    clock_slowdowns: Mapping[int, Sequence[float]] = field(default_factory=dict)
    # Mean PCIe traffic per GPU over the window, bytes/s (TX: sent by the GPU, RX: received).
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None


REPORTED_FIELDS: Final = tuple(f.name for f in fields(Reported))


@dataclass(slots=True, kw_only=True)
class JobWindow(Reported):
    """What gpuwise observed of one job over its efficiency window: what it reported, and the
    window's and the job's own facts.

    Rules only read it. It is not frozen because a frozen dataclass sets each of its 28 fields
    through object.__setattr__, a third of the cost of cutting 10,000 jobs' windows a cycle.
    """

    window_seconds: float
    sample_interval_seconds: float
    job_age_seconds: float
    # From the job's spec, not from what it reported.
    cpu_cores: float | None = None  # the pod's CPU limit (or request), bounds loader workers
    processes_per_node: int = 1  # training processes sharing those cores (numProcPerNode), each with its loaders
    gradient_accumulation_steps: int | None = None  # what the job runs with (its declared tunable's env value)

    @property
    def expected_samples(self) -> int:
        return max(1, int(self.window_seconds / self.sample_interval_seconds))

    def mean(self, series: Sequence[float]) -> float | None:
        return sum(series) / len(series) if series else None

    @property
    def cores_per_process(self) -> float | None:
        """The pod's CPU shared among its training processes: what one process's DataLoader workers can use."""
        return self.cpu_cores / max(1, self.processes_per_node) if self.cpu_cores else None


def below(limit: float) -> Callable[[float], bool]:
    """The predicate `value < limit`, as float's own comparison: no Python frame per sample.

    `holds` runs a predicate over every sample of every job each cycle (tens of millions of calls
    at 10,000 jobs), where a lambda's call costs more than the comparison.
    """
    return float(limit).__gt__


def at_least(limit: float) -> Callable[[float], bool]:
    """The predicate `value >= limit`, like `below`."""
    return float(limit).__le__


def holds(
    window: JobWindow,
    series: Sequence[float],
    predicate: Callable[[float], bool],
    *,
    active: bool,
    sustain: Sustain,
) -> bool:
    """Whether `predicate` holds over `series` in the sustained sense (see the module docstring)."""
    if window.job_age_seconds < sustain.grace_seconds:
        return False
    if len(series) < sustain.min_coverage * window.expected_samples:
        return active  # too little data to change our mind either way
    fraction = sum(map(predicate, series)) / len(series)
    return fraction >= (sustain.release_fraction if active else sustain.hold_fraction)
