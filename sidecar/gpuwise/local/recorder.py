"""What `gpuwise run` remembers of a run: every step's breakdown and the GPUs' timeline.

The sidecar keeps only totals (that is all Prometheus needs); a local report also wants the
shape of the run, so the recorder listens to each step increment and each device sample and
keeps them, up to a bound, for the live view and the report. It computes the summary both show.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from gpuwise.metrics import catalog
from gpuwise.sidecar import device_trace
from gpuwise.sidecar.sampler import Snapshot
from gpuwise.sidecar.steps import ProcessSteps, StepDelta

MAX_STEPS: Final = 50_000
MAX_TRACE: Final = 50_000


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One step event's increment. `count` > 1 when datagrams were lost in between."""

    t: float  # seconds since the run started, when its last step ended
    rank: int
    step: int  # the rank's step count after this record
    count: int
    seconds: float
    wait_seconds: float
    samples: int | None
    last_seconds: float  # the duration of the record's last step, known exactly

    def durations(self) -> list[float]:
        if self.count == 1:
            return [self.seconds]
        others = max(self.seconds - self.last_seconds, 0.0) / (self.count - 1)
        return [others] * (self.count - 1) + [self.last_seconds]


@dataclass(frozen=True)
class Summary:
    """The measured breakdown of a run: what the live view, the report and the demo show."""

    steps: int
    samples: int | None
    step_seconds: float
    wait_seconds: float
    ranks: int
    span_seconds: float | None  # wall time from the first step's start to the last step's end
    step_times: list[float]
    setup: dict[str, Any]
    gpus: list[dict[str, Any]] = field(default_factory=list)

    @property
    def wait_ratio(self) -> float | None:
        return self.wait_seconds / self.step_seconds if self.step_seconds > 0 else None

    @property
    def mean_step(self) -> float | None:
        return self.step_seconds / self.steps if self.steps else None

    def percentile(self, q: float) -> float | None:
        if len(self.step_times) < 2:
            return self.step_times[0] if self.step_times else None
        return statistics.quantiles(self.step_times, n=100, method="inclusive")[round(q * 100) - 1]

    @property
    def steps_per_second(self) -> float | None:
        """Per rank: how fast one training process steps."""
        return self.steps / self.ranks / self.span_seconds if self.span_seconds else None

    @property
    def samples_per_second(self) -> float | None:
        """All ranks together."""
        return self.samples / self.span_seconds if self.samples is not None and self.span_seconds else None

    def findings(self) -> list[str]:
        """The measured breakdown in words (diagnosis proper is the efficiency engine's job)."""
        if not self.steps:
            return ["No training step was observed: the command used neither a torch optimizer nor gpuwise.instrument."]
        ratio = self.wait_ratio or 0.0
        lines = [
            f"{ratio * 100:.0f} % of step time waiting for input, {(1 - ratio) * 100:.0f} % computing "
            f"(mean step {(self.mean_step or 0.0) * 1000:.1f} ms over {self.steps} steps)."
        ]
        for gpu in self.gpus:
            if gpu["mean_util"] is not None:
                lines.append(f"GPU {gpu['gpu']} ({gpu['model']}): {gpu['mean_util']:.0f} % utilized on average.")
        return lines


def training_span(steps: list[StepRecord]) -> tuple[float, float] | None:
    """From the first step's start to the last step's end, in seconds since the run started: the
    part of a run that is judged and summarised (model set-up and shutdown are not training)."""
    if not steps:
        return None
    return steps[0].t - steps[0].seconds / steps[0].count, steps[-1].t


class Recorder:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time
    ) -> None:
        self._clock = clock
        self.started = clock()
        self._started_at = wall_clock()  # the same moment in unix time, which step events carry
        self._lock = threading.Lock()
        self._steps: list[StepRecord] = []
        self._trace: list[dict[str, Any]] = []
        self._models: dict[int, str] = {}
        self._counts: dict[int, int] = {}
        self.truncated = False

    @classmethod
    def replayed(
        cls, steps: list[StepRecord], trace: list[dict[str, Any]], models: dict[int, str], elapsed: float
    ) -> Recorder:
        """A finished run's recording as a saved report holds it (`gpuwise diagnose --report`)."""
        recorder = cls(clock=lambda: elapsed, wall_clock=lambda: 0.0)
        recorder.started = 0.0
        recorder._steps, recorder._trace, recorder._models = list(steps), list(trace), dict(models)
        return recorder

    def on_step(self, delta: StepDelta) -> None:
        """Called from the sidecar's receiver thread. A step is timed when it ended, not when its
        datagram arrived: the totals owed at exit can arrive long after the last step."""
        t = delta.ended_at - self._started_at
        with self._lock:
            step = self._counts[delta.rank] = self._counts.get(delta.rank, 0) + delta.steps
            if len(self._steps) >= MAX_STEPS:
                self.truncated = True
                return
            record = StepRecord(
                t,
                delta.rank,
                step,
                delta.steps,
                delta.seconds,
                delta.wait_seconds,
                delta.samples,
                delta.last_step_seconds,
            )
            self._steps.append(record)

    def on_sample(self, snapshot: Snapshot) -> None:
        """Called from the sidecar's sampler thread."""
        records = list(device_trace.records(snapshot.sample, self._clock() - self.started))
        with self._lock:
            for reading in snapshot.sample.readings:
                self._models.setdefault(reading.device.index, reading.device.model)
            if len(self._trace) + len(records) > MAX_TRACE:
                self.truncated = True
                return
            self._trace.extend(records)

    def elapsed(self) -> float:
        """Seconds since the recording started."""
        return self._clock() - self.started

    def model(self, gpu: int) -> str:
        return self._models.get(gpu, "")

    def steps(self) -> list[StepRecord]:
        with self._lock:
            return list(self._steps)

    def trace(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._trace)

    def summary(self, processes: list[ProcessSteps]) -> Summary:
        steps = self.steps()
        known = [p.samples for p in processes if p.samples is not None]
        latest = max(processes, key=lambda p: p.last_step_at, default=None)
        bounds = training_span(steps)
        span = bounds[1] - bounds[0] if bounds else None
        return Summary(
            steps=sum(p.steps for p in processes),
            samples=sum(known) if known else None,
            step_seconds=sum(p.step_seconds for p in processes),
            wait_seconds=sum(p.wait_seconds for p in processes),
            ranks=max(len(processes), 1),
            span_seconds=span,
            step_times=[duration for record in steps for duration in record.durations()],
            setup={
                "num_workers": latest.num_workers if latest else None,
                "pin_memory": latest.pin_memory if latest else None,
                "batch_size": latest.batch_size if latest else None,
                "autocast": latest.autocast if latest else None,
            },
            gpus=self._gpus(self.trace(), training_span(steps)),
        )

    def _gpus(self, records: list[dict[str, Any]], span: tuple[float, float] | None) -> list[dict[str, Any]]:
        """Each GPU's figures over the training span (the whole run where no step was seen); a GPU
        sampled only outside it is listed with no figures."""
        per_gpu: dict[int, list[dict[str, float]]] = {}
        for record in records:
            values = per_gpu.setdefault(record["gpu"], [])
            if span is None or span[0] <= record["t"] <= span[1]:
                values.append(record["values"])
        summaries = []
        for gpu, values in sorted(per_gpu.items()):
            utils = [v[catalog.GPU_UTIL.name] for v in values if catalog.GPU_UTIL.name in v]
            used = [v[catalog.FB_USED.name] for v in values if catalog.FB_USED.name in v]
            summaries.append(
                {
                    "gpu": gpu,
                    "model": self._models.get(gpu, ""),
                    "mean_util": statistics.fmean(utils) if utils else None,
                    "max_fb_used_mib": max(used) if used else None,
                }
            )
        return summaries
