"""The efficiency engine's findings for a local run: what the recorder saw, as a `JobWindow`.

The operator fills a `JobWindow` from Prometheus; `gpuwise run` fills it from its embedded
sidecar, over the span the command was training (start-up and shutdown are not the job's
steady state), and asks the same rules, with no start-up grace. A local run has no TrainingJob
declaring which environment variables tune it, so its tunables are named after the settings
themselves (`num_workers`, `pin_memory`, `batch_size`, `autocast`): a recommendation then
reads as the change to make in the script.
"""

from __future__ import annotations

import datetime
import os
import statistics
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Final

from gpuwise.diagnose.window import JobWindow, slowdown_bits
from gpuwise.hardware.compute_capability import capability
from gpuwise.local.recorder import Recorder, Summary, training_span
from gpuwise.metrics import catalog
from gpuwise.sidecar.steps import ProcessSteps

if TYPE_CHECKING:
    from gpuwise.api.trainingjob import Recommendation
    from gpuwise.diagnose.rules import Diagnosis

MIB = 1024 * 1024
# gpuwise run's grace is counted in steps and samples, not wall time: a 30 s run of 3,000 steps
# has evidence, and so has a slow job's 15 s of 50 steps (measured on an H200, bench.gpu_recommendations:
# 15 s of a starved conv net is 53 steps); a minute of 15 steps has little. The first steps
# (compilation, allocator and autotuner warm-up, the first batch's prefetch) are not judged.
WARM_UP_STEPS: Final = 5
MIN_JUDGED_STEPS: Final = 20
MIN_GPU_SAMPLES: Final = 5


def judged_span(recorder: Recorder) -> tuple[float, float] | None:
    """The span the engine judges: from the end of the warm-up steps to the last step's end."""
    steps = recorder.steps()
    span = training_span(steps)
    if span is None:
        return None
    counted = 0
    for record in steps:
        counted += record.count
        if counted >= WARM_UP_STEPS:
            return record.t, span[1]
    return span


def not_judged(recorder: Recorder, summary: Summary) -> str | None:
    """Why the run is too short to judge, or None: too few steps past the warm-up, or too few GPU
    samples while they ran (where there is a GPU to sample)."""
    judged = summary.steps - WARM_UP_STEPS
    if judged < MIN_JUDGED_STEPS:
        return (
            f"Too short to judge: {summary.steps} steps, and the engine needs {MIN_JUDGED_STEPS} after the first "
            f"{WARM_UP_STEPS} (warm-up). Run more steps."
        )
    span = judged_span(recorder)
    trace = recorder.trace()
    if trace and span is not None:
        samples = len({record["t"] for record in trace if span[0] <= record["t"] <= span[1]})
        if samples < MIN_GPU_SAMPLES:
            return (
                f"Too short to judge the GPU: {samples} samples while the steps ran, and the engine needs "
                f"{MIN_GPU_SAMPLES}. Run longer, or sample more often (--interval)."
            )
    return None


def diagnoses(recorder: Recorder, summary: Summary, processes: list[ProcessSteps], interval: float) -> list[Diagnosis]:
    """The engine's findings and recommendations on the run, most confident first."""
    from gpuwise.api.trainingjob import IntTunable, SwitchTunable, Tunables
    from gpuwise.diagnose.rules import DiagnosisThresholds, RuleContext, diagnose
    from gpuwise.diagnose.window import Sustain

    cores = len(os.sched_getaffinity(0))
    tunables = Tunables(
        batch_size=IntTunable(env="batch_size", min=1, max=1 << 16),
        data_loader_workers=IntTunable(env="num_workers", min=0, max=max(cores, 1)),
        pin_memory=SwitchTunable(env="pin_memory"),
        amp=SwitchTunable(env="autocast"),
    )
    context = RuleContext(
        window=window(recorder, summary, processes, interval),
        tunables=tunables,
        thresholds=DiagnosisThresholds(),
        sustain=Sustain(grace_seconds=0.0),  # the grace is the warm-up steps (judged_span)
        now=datetime.datetime.now(datetime.UTC),
        active=frozenset(),
        since={},
    )
    return diagnose(context)


def findings(
    recorder: Recorder, summary: Summary, processes: list[ProcessSteps], interval: float
) -> list[dict[str, Any]]:
    """The engine's findings, most confident first, as plain data for the report."""
    return [
        {
            "kind": finding.kind,
            "confidence": finding.confidence,
            "message": finding.message,
            "evidence": finding.evidence,
            "recommendation": _advice(recommendation) if recommendation else None,
            # What to set, and what the engine expects of it: `bench/gpu_recommendations.py` applies the one and
            # measures the other.
            "changes": dict(recommendation.changes) if recommendation else {},
            "expected_effect": recommendation.expected_effect if recommendation else None,
        }
        for finding, recommendation in diagnoses(recorder, summary, processes, interval)
    ]


def window(recorder: Recorder, summary: Summary, processes: list[ProcessSteps], interval: float) -> JobWindow:
    steps = recorder.steps()
    elapsed = recorder.elapsed()
    start, end = judged_span(recorder) or (0.0, elapsed)
    steps = [record for record in steps if record.t > start] or steps[-1:]
    utilization: defaultdict[float, list[float]] = defaultdict(list)
    sm_active: defaultdict[float, list[float]] = defaultdict(list)  # the busiest GPU at each time
    slowdowns: defaultdict[float, list[int]] = defaultdict(list)  # the most throttled GPU at each time
    per_metric: defaultdict[str, list[float]] = defaultdict(list)
    busiest: tuple[float, float] | None = None  # (used, total) MiB of the fullest GPU sample
    gpus: set[int] = set()
    capabilities: list[float] = []  # what NVML reported of each GPU, whenever in the run it was sampled
    for record in recorder.trace():
        if catalog.COMPUTE_CAPABILITY.name in record["values"]:
            capabilities.append(record["values"][catalog.COMPUTE_CAPABILITY.name])
        if not start <= record["t"] <= end:
            continue
        values, gpus = record["values"], gpus | {record["gpu"]}
        if catalog.GPU_UTIL.name in values:
            utilization[record["t"]].append(values[catalog.GPU_UTIL.name])
        if catalog.SM_ACTIVE.name in values:
            sm_active[record["t"]].append(values[catalog.SM_ACTIVE.name])
        if catalog.CLOCKS_EVENT_REASONS.name in values:
            slowdowns[record["t"]].append(slowdown_bits(values[catalog.CLOCKS_EVENT_REASONS.name]))
        for metric in (catalog.SM_ACTIVE, catalog.TENSOR_ACTIVE, catalog.PCIE_TX, catalog.PCIE_RX):
            if metric.name in values:
                per_metric[metric.name].append(values[metric.name])
        memory = [values.get(m.name) for m in (catalog.FB_USED, catalog.FB_FREE, catalog.FB_RESERVED)]
        if memory[0] is not None and memory[1] is not None:
            total = memory[0] + memory[1] + (memory[2] or 0.0)
            busiest = max(busiest or (0.0, total), (memory[0], total))
    waits: defaultdict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for step in steps:
        bucket = waits[int(step.t // interval)]
        bucket[0] += step.seconds
        bucket[1] += step.wait_seconds
    setup = summary.setup
    peaks = [
        (p.batch_size, p.cuda_allocated_peak / MIB)
        for p in processes
        if p.batch_size is not None and p.cuda_allocated_peak is not None
    ]
    models = sorted({recorder.model(gpu) for gpu in gpus} - {""})
    return JobWindow(
        window_seconds=max(end - start, interval),
        sample_interval_seconds=interval,
        job_age_seconds=elapsed,
        gpu_utilization=[statistics.fmean(values) for _, values in sorted(utilization.items())],
        data_wait_fraction=[wait / seconds for seconds, wait in waits.values() if seconds > 0],
        sm_activity=_mean(per_metric[catalog.SM_ACTIVE.name]),
        sm_active=[max(values) for _, values in sorted(sm_active.items())],
        clock_slowdowns={0: [float(max(bits)) for _, bits in sorted(slowdowns.items())]} if slowdowns else {},
        pcie_tx_bytes_per_second=_mean(per_metric[catalog.PCIE_TX.name]),
        pcie_rx_bytes_per_second=_mean(per_metric[catalog.PCIE_RX.name]),
        tensor_activity=_mean(per_metric[catalog.TENSOR_ACTIVE.name]),
        memory_used_mib=busiest[0] if busiest else None,
        memory_total_mib=busiest[1] if busiest else None,
        seconds_since_last_step=elapsed - steps[-1].t if steps else None,
        gpus=max(len(gpus), 1),
        gpu_model=models[0] if models else None,
        compute_capability=capability(min(capabilities, default=None), models[0] if models else None),
        cpu_cores=float(len(os.sched_getaffinity(0))),
        processes_per_node=max(1, len(processes)),  # the ranks that reported share this machine's cores
        batch_size=setup.get("batch_size"),
        num_workers=setup.get("num_workers"),
        pin_memory=setup.get("pin_memory"),
        autocast=setup.get("autocast"),
        memory_by_batch=tuple(peaks),
    )


def _advice(recommendation: Recommendation) -> str:
    """AdjustConfig's changes are the script's own settings here: say which to try. Other actions'
    changes (a MIG profile, a time-sliced share) are for the operator; their message says it all."""
    from gpuwise.api.kinds import ActionKind

    if recommendation.action is not ActionKind.ADJUST_CONFIG or not recommendation.changes:
        return recommendation.message
    settings = ", ".join(f"{name}={value}" for name, value in recommendation.changes.items())
    return f"{recommendation.message} Try: {settings}."


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None
