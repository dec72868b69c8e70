"""Why a job underuses its GPUs: one function per reason practitioners know, with evidence.

Each rule reads a `JobWindow`, decides whether its condition is sustained, and returns a
`Finding` (what is wrong, how sure we are, the numbers that show it) with the `Recommendation`
that would fix it — concrete values for the job's declared tunables, within their bounds. Rules
only recommend what the job said it can take (`spec.efficiency.tunables`); a finding without a
matching tunable still explains itself, with an empty change set.
"""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from gpuwise.api.kinds import (
    GPU_CLASS_CHANGE,
    GPU_SHARE_CHANGE,
    IDLE_SECONDS_CHANGE,
    MIG_PROFILE_CHANGE,
    MIG_RESOURCE_CHANGE,
    SHARE_CHANGE,
    TIME_SLICING,
    ActionKind,
    FindingKind,
)
from gpuwise.api.trainingjob import Finding, IntTunable, Recommendation, Tunables
from gpuwise.diagnose.gpu_classes import SizedGpuClass, smallest_fitting
from gpuwise.diagnose.straggler import (
    PeerRatios,
    StragglerPolicy,
    episodes_in,
    job_peer_ratios,
    recovered,
    steadily_slow,
    step_extremes,
    still_slow,
)
from gpuwise.diagnose.window import CLOCK_SLOWDOWNS, JobWindow, Sustain, at_least, below, holds
from gpuwise.hardware.compute_capability import amp_speedup_bound, tensor_core_gain
from gpuwise.hardware.gpu_specs import MIB_PER_GB, gpu_spec
from gpuwise.hardware.mig_profiles import COMPUTE_SLICES, GpuModel, MigProfile, UnknownGpuModelError, gpu_model

# One recommendation raises the batch at most this many times: a larger step changes the
# optimisation (learning rate, convergence) and the memory model is fitted to what was seen.
MAX_BATCH_FACTOR: Final = 4
# Findings whose fix makes the GPU's own work faster: no help to a job that waits for its input.
COMPUTE_SIDE: Final = frozenset({FindingKind.SMALL_BATCH, FindingKind.NO_MIXED_PRECISION})
# A share above this leaves no room for a second job as light: the job needs its GPU.
MAX_GPU_SHARE = 0.5
# OversizedGPU's remedies that keep the job on the GPU it has: either listed, it gets no Reschedule.
SLICE_REMEDIES: Final = frozenset({ActionKind.MIG_REPARTITION, ActionKind.PACK})
STRAGGLERS: Final = StragglerPolicy()
# Kinds one rule names as the evidence tips one way or the other: they share hysteresis, so a
# finding that changes its name (more workers would help / no CPU is left for them) keeps its hold.
INPUT_SIDE: Final = frozenset({FindingKind.INPUT_BOUND, FindingKind.CPU_BOUND_INPUT})
FAMILIES: Final[tuple[frozenset[str], ...]] = (INPUT_SIDE,)
_FAMILY_OF: Final = {kind: family for family in FAMILIES for kind in family}


@dataclass(frozen=True)
class DiagnosisThresholds:
    gpu_utilization: float = 50.0  # % below which a GPU is underused (spec.efficiency.thresholds)
    data_wait_fraction: float = 0.2  # above this share of step time, input is the bottleneck
    memory_headroom: float = 0.5  # below this share of GPU memory used, the batch can grow
    safe_memory_fraction: float = 0.85  # grow the batch up to this share of GPU memory
    idle_seconds: float = 600.0  # GPUs allocated but no step for this long
    suspend_after_seconds: float = 3600.0  # Suspend frees an Idle job's GPUs once idle this long (spec.efficiency.idle)
    tensor_activity: float = 0.1  # below this, tensor cores are not being used
    persistent_slowdown: float = 1.1  # a worker steadily this much slower than its peers is worth a note
    oversized_activity: float = 0.3  # below this compute activity (0-1) a whole GPU is more than the job needs
    mig_fill: float = 0.8  # size a MIG slice so the job's compute fills at most this share of it
    mig_memory_margin: float = 0.2  # and its memory holds the peak plus this share
    # A smaller GPU class may make steps at most this much longer, by a conservative bound (`gpu_classes`).
    class_slowdown: float = 0.1
    collective_pcie_bytes: float = 50e6  # PCIe traffic (B/s per GPU, each way) below which nothing is exchanged
    collective_symmetry: float = 2.0  # sent and received within this factor of each other: collectives
    # Hysteresis for a condition read from one figure (a window's mean or peak), where there are no
    # samples to count: an active finding clears only once the figure is this share past its limit.
    release_margin: float = 0.2


@dataclass(slots=True)  # not frozen, like JobWindow: one is made per job and cycle, and rules only read it
class RuleContext:
    window: JobWindow
    tunables: Tunables
    thresholds: DiagnosisThresholds
    sustain: Sustain
    now: datetime
    active: frozenset[str]  # kinds of the findings already active (for hysteresis)
    since: dict[str, datetime]  # when each active finding first appeared
    # The active findings as last published, by kind, for a rule whose hysteresis needs more than
    # the kind: which worker a Straggler is, and its baseline before it slowed.
    previous: Mapping[str, Finding] = field(default_factory=dict)
    # The actions the job lets gpuwise take (spec.efficiency.actions), where a finding has two
    # remedies and only one of them may be taken: OversizedGPU's MIG slice by repartitioning, or
    # by packing onto slices other nodes have free.
    actions: frozenset[str] = frozenset()
    # The GPU classes the platform declares (the operator's actions.gpuClasses), where OversizedGPU
    # may recommend moving a job with Reschedule; none outside the operator.
    gpu_classes: tuple[SizedGpuClass, ...] = ()

    def is_active(self, kind: str) -> bool:
        """Whether `kind`, or a kind of its family (`FAMILIES`), is active: its hysteresis applies."""
        return kind in self.active or (
            (family := _FAMILY_OF.get(kind)) is not None and not family.isdisjoint(self.active)
        )

    def sustained(self, kind: str, series: Sequence[float], predicate: Callable[[float], bool]) -> bool:
        return holds(self.window, series, predicate, active=self.is_active(kind), sustain=self.sustain)

    def eased(self, kind: str) -> float:
        """How far an active `kind`'s limits on one figure move in its favour: 1 + `release_margin`,
        and 1 for a kind not active. Limits read from a window's mean or peak have no samples to
        count, so this is their hysteresis."""
        return 1 + self.thresholds.release_margin if self.is_active(kind) else 1

    def under(self, kind: str, value: float, limit: float) -> bool:
        """`value < limit`, and for an active `kind` until `value` is `release_margin` past the limit."""
        return value < limit * self.eased(kind)

    def finding(self, kind: str, confidence: float, message: str, **evidence: object) -> Finding:
        """A finding of `kind`, active since it first appeared; an int `worker` in the evidence is
        also the finding's worker."""
        worker = evidence.get("worker")
        return Finding(
            kind=kind,
            confidence=round(min(1.0, max(0.0, confidence)), 2),
            since=self.since.get(kind, self.now),
            message=message,
            worker=worker if isinstance(worker, int) else None,
            evidence={key: _show(value) for key, value in evidence.items() if value is not None},
        )


def _show(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


Diagnosis = tuple[Finding, Recommendation | None]


def idle(ctx: RuleContext) -> Diagnosis | None:
    """GPUs allocated, no training step and no GPU activity for a long time: the job holds hardware
    it does not use.

    A job that never made a step has no last-step series at all (the sidecar exports it from the
    first step on), nor any other series a step makes (data wait, step times): it is idle once it
    has been running `idle_seconds`, its sidecars report its GPUs, and their utilization stayed
    under the job's threshold over the window. The utilization keeps a job whose trainer does not
    report steps (instrumentation `Disabled`, or `Manual` without the call) but trains from being
    called idle, and a job that stopped stepping but keeps its GPUs busy (an evaluation pass, a
    long save) too. Start-up is not idleness: `grace_seconds` after the job started, and without
    GPUs reported, nothing is said.

    The recommendation is `Suspend`: in Enforce mode, with the action listed, gpuwise takes it once
    the job has been idle for `spec.efficiency.idle.after` (`suspend_after_seconds`). Only for a job
    that has made steps: one that never did may be waiting on its first rendezvous or loading its
    dataset, which no figure tells apart from a stuck one.
    """
    w, t = ctx.window, ctx.thresholds
    if w.job_age_seconds < ctx.sustain.grace_seconds:
        return None
    quiet = w.seconds_since_last_step
    if quiet is None and (w.data_wait_fraction or w.worker_step_seconds):
        return None  # it steps (a last-step series missing from an older sidecar)
    if not w.gpus or not ctx.sustained(FindingKind.IDLE, w.gpu_utilization, below(t.gpu_utilization)):
        return None  # no GPU reported, or they are busy
    if quiet is None:
        quiet = w.job_age_seconds
        what = f"No training step since the job started {quiet / 60:.0f} minutes ago"
    else:
        what = f"No training step for {quiet / 60:.0f} minutes"
    if quiet < t.idle_seconds:
        return None
    finding = ctx.finding(
        FindingKind.IDLE,
        0.9,
        f"{what} while {w.gpus} GPU(s) stay allocated.",
        secondsSinceLastStep=w.seconds_since_last_step,
        secondsSinceStartNoStep=quiet if w.seconds_since_last_step is None else None,
        gpus=w.gpus,
        gpuUtilization=w.mean(w.gpu_utilization),
    )
    if w.seconds_since_last_step is None:
        return finding, None  # never stepped: start-up (rendezvous, data, compilation) or stuck, for a human to tell
    left = t.suspend_after_seconds - quiet
    minutes = f"{left / 60:.0f}"
    when = "now" if left <= 0 else "in under a minute" if left < 60 else f"in {minutes} minute{'s' * (minutes != '1')}"
    recommendation = Recommendation(
        action=ActionKind.SUSPEND,
        finding=FindingKind.IDLE,
        message=f"Suspend the job to give its {w.gpus} GPU(s) back, after a checkpoint; it resumes from it when "
        f"spec.runPolicy.suspend is set back to false. Idle jobs are suspended after "
        f"{t.suspend_after_seconds / 60:.0f} minutes (spec.efficiency.idle.after): this one would be {when}.",
        changes={IDLE_SECONDS_CHANGE: f"{quiet:.0f}"},
        expected_effect=f"{w.gpus} GPU(s) free for other jobs",
    )
    return finding, recommendation


def input_bound(ctx: RuleContext) -> Diagnosis | None:
    """The GPU waits for data: more DataLoader workers, pinned memory and prefetching make input keep up.

    DataLoader workers belong to one training process: the `numProcPerNode` processes of a pod
    each run their own, on the pod's one CPU allowance. So a process gets the pod's cores ÷ its
    processes, less one core for the process itself, and more workers than that only contend.
    When even those are in use the input is CPU-bound (`CPUBoundInput`); the two names are one
    finding for hysteresis (`FAMILIES`), so a job at that edge does not flap between them.
    """
    w, t = ctx.window, ctx.thresholds
    if not ctx.sustained(FindingKind.INPUT_BOUND, w.data_wait_fraction, at_least(t.data_wait_fraction)):
        return None
    # Waiting for input is measured by the steps themselves: a job whose GPU utilization was not
    # measured (no GPU telemetry, a CPU run) still waits, and says so; a measured busy GPU does not.
    measured = bool(w.gpu_utilization)
    if measured and not ctx.sustained(FindingKind.INPUT_BOUND, w.gpu_utilization, below(t.gpu_utilization)):
        return None
    wait, util = w.mean(w.data_wait_fraction) or 0.0, w.mean(w.gpu_utilization) or 0.0
    # From what was measured: hiding the wait entirely leaves the compute, 1 - wait of the step.
    speedup = 1 / max(1 - wait, 0.05)
    changes: dict[str, str] = {}
    workers = ctx.tunables.data_loader_workers
    current = w.num_workers or 0
    cores = w.cores_per_process
    spare = int(cores) - 1 if cores is not None else None  # loader workers a process has cores for
    if workers is not None:
        # Enough workers to hide the wait, never more than the process's share of cores allows,
        # and never fewer than the tunable's min: the job said it runs with that many.
        wanted = max(current + 1, math.ceil(max(current, 1) / max(1 - wait, 0.05)))
        proposal = max(workers.min, min(wanted, workers.max, spare if spare is not None else workers.max))
        if proposal > current:
            changes[workers.env] = str(proposal)
    if ctx.tunables.pin_memory is not None and w.pin_memory is False:
        changes[ctx.tunables.pin_memory.env] = "1"
    cpu_bound = spare is not None and current >= spare
    message = f"{wait:.0%} of step time is spent waiting for input" + (
        f" while GPU utilization is {util:.0f}%." if measured else "; GPU utilization was not measured."
    )
    if cpu_bound:
        share = "The pod" if w.processes_per_node <= 1 else f"Each of the pod's {w.processes_per_node} processes"
        message += f" {share} has no spare CPU for more loader workers: preprocessing is CPU-bound."
    finding = ctx.finding(
        FindingKind.CPU_BOUND_INPUT if cpu_bound and not changes else FindingKind.INPUT_BOUND,
        (0.5 if measured else 0.4) + wait / 2,
        message,
        dataWaitFraction=wait,
        gpuUtilization=util if measured else None,
        numWorkers=w.num_workers,
        pinMemory=w.pin_memory,
        cpuCores=w.cpu_cores,
        processesPerNode=w.processes_per_node if w.processes_per_node > 1 else None,
    )
    prefetch = "raise the DataLoader's prefetch_factor (batches each worker loads ahead; 2 by default)"
    if changes:
        # Say only what would change: pinning is no advice to a job whose memory is pinned already.
        steps = [
            *(["Raise DataLoader workers"] if workers is not None and workers.env in changes else []),
            *(["pin host memory"] if w.pin_memory is not True else []),
        ]
        # Never empty: a change of workers lists the workers, pinning (only when unpinned) the pinning.
        advice = f"{' and '.join(steps)}; {prefetch}; move heavy augmentation off the step path."
        advice = advice[0].upper() + advice[1:]
    elif cpu_bound:
        advice = "Give the pod more CPU or move preprocessing offline; no declared tunable can fix this."
    else:
        advice = (
            f"Use more DataLoader workers{f' (up to {spare} per process)' if spare else ''}"
            f"{' and pin_memory=True' if w.pin_memory is not True else ''}; "
            f"{prefetch}. Declare spec.efficiency.tunables.dataLoaderWorkers so gpuwise can set the workers."
        )
    recommendation = Recommendation(
        action=ActionKind.ADJUST_CONFIG,
        finding=finding.kind,
        message=advice,
        changes=changes,
        expected_effect=f"up to {speedup:.1f}x steps per second: {wait:.0%} of step time is input wait"
        + (f", and up to {min(100.0, util * speedup):.0f}% GPU utilization" if measured else ""),
        expected_speedup=round(speedup, 2),
    )
    return finding, recommendation


def fit_memory(points: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """Least-squares memory ≈ a + b·batch from (batch, MiB) points; with one point, a = 0 (safe)."""
    distinct = {batch: mib for batch, mib in points if batch > 0 and mib > 0}
    if not distinct:
        return None
    if len(distinct) == 1:
        ((batch, mib),) = distinct.items()
        return 0.0, mib / batch  # all memory per sample: the smallest batch it could predict
    n = len(distinct)
    mean_b = sum(distinct) / n
    mean_m = sum(distinct.values()) / n
    # The slope over pairs of points, not deviations from the means: a mean of MiB is rounded,
    # and memory flat across batches would get a slope of rounding noise (1e-30) that fits any batch.
    pairs = list(itertools.combinations(distinct.items(), 2))
    var = sum((b1 - b2) ** 2 for (b1, _), (b2, _) in pairs)
    slope = sum((b1 - b2) * (m1 - m2) for (b1, m1), (b2, m2) in pairs) / var
    if slope <= 0:
        return None
    return max(0.0, mean_m - slope * mean_b), slope


def larger_batch(
    batch: int, fits: int, *, tunable: IntTunable, accumulation: IntTunable | None, steps: int | None, keep: bool
) -> tuple[int, int | None] | str:
    """The batch size to raise to, and the gradient accumulation to go with it; or a reason there is none.

    `fits` is the largest batch the memory model allows; no proposal is more than
    `MAX_BATCH_FACTOR` times today's, nor under the tunable's min (AdjustConfig would clamp it up,
    past what fits). Without `keep` (keepGlobalBatchSize), the largest power of two that fits, or
    the tunable's max where that is smaller (a max of 60 is proposed as 60, not 32). With it, the
    global batch — batch × accumulation × world size — must stay exactly what it is; the world size
    does not change, so batch × accumulation must not either: the new batch is the largest divisor
    of that product that fits, is larger than today's, and leaves an accumulation within its
    tunable's bounds. That needs the accumulation tunable and the value the job runs with (`steps`).
    """
    if not keep:
        largest = min(fits, batch * MAX_BATCH_FACTOR)
        proposal = min(tunable.max, 2 ** int(math.log2(largest))) if largest >= 1 else 0
        if batch < proposal < tunable.min:  # AdjustConfig would clamp it up, past what fits
            return f"{proposal}, the largest power of two that fits, is under the tunable's min ({tunable.min})"
        if proposal > batch:
            return proposal, None
        return f"{batch} is already the largest that fits, or that the tunable's max ({tunable.max}) allows"
    upper = min(fits, tunable.max, batch * MAX_BATCH_FACTOR)
    if accumulation is None or steps is None:
        return (
            "keeping the global batch needs spec.efficiency.tunables.gradientAccumulationSteps and its variable "
            "set in the trainer's env"
        )
    per_process = batch * steps
    for proposal in range(min(upper, per_process), max(batch, tunable.min - 1), -1):
        if per_process % proposal == 0 and accumulation.min <= per_process // proposal <= accumulation.max:
            return proposal, per_process // proposal
    return (
        f"no larger batch keeps batch × accumulation at {per_process} within the tunables' bounds "
        f"(batch {batch} × accumulation {steps})"
    )


def small_batch(ctx: RuleContext) -> Diagnosis | None:
    """Low memory use and low utilization: a larger batch keeps the GPU busier per step.

    The batch that fits comes from a memory model fitted to what the job reported (`fit_memory`),
    up to `safe_memory_fraction` of the GPU; with keepGlobalBatchSize the gradient accumulation
    goes down as the batch goes up (`larger_batch`).
    """
    w, t = ctx.window, ctx.thresholds
    if w.memory_used_mib is None or not w.memory_total_mib or w.batch_size is None:
        return None
    used = w.memory_used_mib / w.memory_total_mib
    if not ctx.under(FindingKind.SMALL_BATCH, used, t.memory_headroom):
        return None
    if not ctx.sustained(FindingKind.SMALL_BATCH, w.gpu_utilization, below(t.gpu_utilization)):
        return None
    model = fit_memory(w.memory_by_batch or [(w.batch_size, w.memory_used_mib)])
    changes: dict[str, str] = {}
    growth: float | None = None  # the proposed batch over today's
    tunable, accumulation = ctx.tunables.batch_size, ctx.tunables.gradient_accumulation_steps
    if tunable is None:
        advice = "Raise the batch size; declare spec.efficiency.tunables.batchSize so gpuwise can compute it."
    else:  # declared, but memory did not grow with the batches reported: nothing tells what fits
        advice = (
            "Raise the batch size by hand: the GPU memory reported did not grow with the batch size, so gpuwise "
            "cannot tell which batch fits."
        )
    if model is not None and tunable is not None:
        fixed, per_sample = model
        room = (t.safe_memory_fraction * w.memory_total_mib - fixed) / per_sample
        fits = int(room) if math.isfinite(room) else 0  # a memory size that is no number fits nothing
        keep = ctx.tunables.keep_global_batch_size
        chosen = larger_batch(
            w.batch_size,
            fits,
            tunable=tunable,
            accumulation=accumulation,
            steps=w.gradient_accumulation_steps,
            keep=keep,
        )
        if isinstance(chosen, str):
            advice = f"No larger batch size to recommend: {chosen}."
        else:
            proposal, steps = chosen
            changes[tunable.env] = str(proposal)
            growth = proposal / w.batch_size
            advice = f"Raise the batch size to {proposal} (fits in {t.safe_memory_fraction:.0%} of GPU memory)"
            if steps is not None and accumulation is not None:
                changes[accumulation.env] = str(steps)
                advice += (
                    f" and gradient accumulation from {w.gradient_accumulation_steps} to {steps}: batch × "
                    f"accumulation stays {proposal * steps}, so the global batch does not change"
                )
                advice += "."
            else:
                advice += (
                    ". The global batch grows with it, which changes the optimisation: scale the learning rate "
                    "with the batch (with a warm-up), or declare keepGlobalBatchSize and gradientAccumulationSteps "
                    "so that gpuwise keeps the global batch."
                )
    util = w.mean(w.gpu_utilization) or 0.0
    finding = ctx.finding(
        FindingKind.SMALL_BATCH,
        0.4 + (t.memory_headroom - used),
        f"Only {used:.0%} of GPU memory is used at batch size {w.batch_size} while utilization is {util:.0f}%.",
        memoryUsedFraction=used,
        batchSize=w.batch_size,
        gradientAccumulationSteps=w.gradient_accumulation_steps,
        gpuUtilization=util,
        memoryModel=f"{model[0]:.0f} MiB + {model[1]:.1f} MiB/sample" if model else None,
    )
    recommendation = Recommendation(
        action=ActionKind.ADJUST_CONFIG,
        finding=FindingKind.SMALL_BATCH,
        message=advice,
        changes=changes,
        # Measured, not assumed: samples/s can grow at most with the batch, and at most until the GPU is busy.
        expected_effect=(
            f"at most {min(growth, 100 / max(util, 1.0)):.1f}x samples/s: the GPU is {util:.0f}% busy at batch "
            f"{w.batch_size}, and a batch {growth:.1f}x larger fills it no further than that"
            if growth
            else None
        ),
        expected_speedup=round(min(growth, 100 / max(util, 1.0)), 2) if growth else None,
    )
    return finding, recommendation


def no_mixed_precision(ctx: RuleContext) -> Diagnosis | None:
    """FP32 on a tensor-core GPU (compute capability ≥ 7.0) leaves most of its throughput unused."""
    w = ctx.window
    if w.autocast is not False or w.compute_capability is None or w.compute_capability < (7, 0):
        return None
    if w.tensor_activity is not None and not ctx.under(
        FindingKind.NO_MIXED_PRECISION, w.tensor_activity, ctx.thresholds.tensor_activity
    ):
        return None  # tensor cores busy anyway (e.g. TF32 matmuls or a manual half model)
    if w.job_age_seconds < ctx.sustain.grace_seconds:
        return None
    dtype = "bf16" if w.compute_capability >= (8, 0) else "fp16"
    major, minor = w.compute_capability
    finding = ctx.finding(
        FindingKind.NO_MIXED_PRECISION,
        0.8 if w.tensor_activity is not None else 0.6,
        f"Training runs without autocast on a tensor-core GPU (compute capability {major}.{minor}).",
        gpuModel=w.gpu_model,
        computeCapability=f"{major}.{minor}",
        tensorActivity=w.tensor_activity,
    )
    changes = {ctx.tunables.amp.env: "1"} if ctx.tunables.amp is not None else {}
    util, gain = w.mean(w.gpu_utilization), tensor_core_gain(w.compute_capability)
    bound = amp_speedup_bound(gain, util / 100) if util is not None and gain is not None else None
    recommendation = Recommendation(
        action=ActionKind.ADJUST_CONFIG,
        finding=FindingKind.NO_MIXED_PRECISION,
        message=f"Enable automatic mixed precision with {dtype}.",
        changes=changes,
        # Measured, with the hardware's bound: only the share of time the GPU computes gets faster.
        expected_effect=(
            f"at most {bound:.1f}x steps per second: the GPU computes {util:.0f}% of the time, and its {dtype} "
            f"tensor cores do that math up to {gain:.0f}x faster than fp32; about half the activation memory"
            if bound is not None and util is not None and gain is not None
            else "faster matmuls on the tensor cores and about half the activation memory"
        ),
        expected_speedup=round(bound, 2) if bound is not None else None,
    )
    return finding, recommendation


def straggler(ctx: RuleContext) -> Diagnosis | None:
    """One worker's steps slowed against its own past and its peers, or a minority group's together,
    and still slow now.

    Synchronous training waits for the slowest worker every step, so the whole job runs at its
    pace; replacing its pod away from its node usually restores it (a noisy neighbour, a
    throttled or failing GPU, a slow NIC). Workers that slowed together by a smaller factor
    (`StragglerPolicy.min_group_slowdown`) hold the job back as much: the finding names the worst
    of them (its node is the one to leave first) and the group in its evidence. Steady
    per-worker differences are not stragglers.

    A straggler slow for longer than the window leaves the detector nothing to compare with: the
    window then shows a worker that has always been slow. So an active Straggler stays until that
    worker recovers against the baseline it had before it slowed, carried in the finding's
    evidence (`baselineRatio`) from cycle to cycle, not until the window forgets it; a group's
    worker by the exit rule its episodes have (`StragglerPolicy.group_member`).
    """
    series = ctx.window.worker_step_seconds
    if len(series) < 3 or ctx.window.job_age_seconds < ctx.sustain.grace_seconds:
        return None
    held = ctx.previous.get(FindingKind.STRAGGLER) if FindingKind.STRAGGLER in ctx.active else None
    spread = min(math.sqrt(STRAGGLERS.least_slowdown(len(series))), _slow_worker_limit(ctx))
    if held is None and steps_alike(series, spread, ctx.window.worker_step_extremes):
        return None
    ratios = job_peer_ratios(series)
    if not ratios:
        return None
    latest = max(points[-1][0] for points in ratios.values())
    recent = 3 * ctx.window.sample_interval_seconds
    ongoing = [e for e in episodes_in(ratios, STRAGGLERS) if e.end >= latest - recent]
    if ongoing:
        worst = max(ongoing, key=lambda e: e.peak_slowdown)
        return _straggler(ctx, worst.worker, worst.peak_slowdown, worst.baseline, worst.start, group=worst.group)
    if held is not None and held.worker in ratios:
        worker, baseline = held.worker, _number(held.evidence.get("baselineRatio"), 1.0)
        group = _workers(held.evidence.get("group"))
        if still_slow(ratios[worker], baseline, STRAGGLERS.group_member if group else STRAGGLERS):
            peak = max(_number(held.evidence.get("peakSlowdown"), 1.0), ratios[worker][-1][1] / baseline)
            since = _number(held.evidence.get("slowSinceUnixSeconds"), 0)
            return _straggler(ctx, worker, peak, baseline, since, group=group)
    return slow_worker(ctx, ratios)


def steps_alike(
    series: Mapping[int, Sequence[tuple[float, float]]], spread: float, extremes: tuple[float, float] | None = None
) -> bool:
    """Whether every step time in the window is within `spread` of every other.

    Then every peer ratio lies within [1/spread, spread]: no worker's median reaches `spread`,
    and no ratio is `spread`² times a baseline made of other ratios. With `spread` at most the
    SlowWorker limit and √min_slowdown, neither rule can find anything, and the per-sample
    work (peer medians, baselines) is skipped for the many jobs whose workers keep in step.
    `extremes`: the series' `step_extremes`, where the caller has them already.
    The spread is a quotient, as the peer ratios are: `spread * low` may round up past a step
    time whose ratio is `spread`.
    """
    low, high = extremes or step_extremes(series) or (math.nan, math.nan)
    return low > 0 and high / low < spread


def _slow_worker_limit(ctx: RuleContext) -> float:
    """The slowdown against its peers from which a worker is a SlowWorker (lower while it is one)."""
    return 1 + (ctx.thresholds.persistent_slowdown - 1) / ctx.eased(FindingKind.SLOW_WORKER)


def _number(text: str | None, default: float) -> float:
    try:
        return float(text) if text is not None else default
    except ValueError:
        return default


def _workers(text: str | None) -> tuple[int, ...]:
    """A group's workers from a finding's evidence ("2,5,7"); () for none or anything else."""
    try:
        return tuple(int(worker) for worker in text.split(",")) if text else ()
    except ValueError:
        return ()


def _straggler(
    ctx: RuleContext, worker: int, peak: float, baseline: float, start: float, *, group: tuple[int, ...] = ()
) -> Diagnosis:
    if group:
        names = ", ".join(map(str, group[:-1])) + f" and {group[-1]}"
        message = (
            f"Workers {names} slowed together against the rest of the job, worker {worker} {peak:.2f}x "
            "against its own baseline; every step of the job waits for them."
        )
    else:
        message = (
            f"Worker {worker} runs {peak:.1f}x slower than its own baseline against its peers; "
            "every step of the job waits for it."
        )
    finding = ctx.finding(
        FindingKind.STRAGGLER,
        min(0.95, 0.5 + (peak - 1) / 2),
        message,
        worker=worker,
        group=",".join(map(str, group)) if group else None,
        peakSlowdown=peak,
        baselineRatio=f"{baseline:.4f}",
        slowSinceUnixSeconds=int(start) if start else None,
    )
    recommendation = Recommendation(
        action=ActionKind.RESCHEDULE,
        finding=FindingKind.STRAGGLER,
        message=f"Replace worker {worker}'s pod on another node (after a checkpoint).",
        changes={},
        expected_effect=f"up to {peak:.1f}x faster steps for the whole job",
        expected_speedup=round(peak, 2),
    )
    return finding, recommendation


def slow_worker(ctx: RuleContext, ratios: PeerRatios) -> Diagnosis | None:
    """A worker steadily slower than its peers (another GPU model, a busier node): milder, no action.

    It has always been so, so there is no episode to react to; it still costs the whole job its
    slowdown on every step, which is worth knowing when placing the next run. Slower in the
    median of the window and still slower now: a straggler that just recovered is not steadily
    slow for the rest of a window that remembers it. An active finding holds until the
    slowdown's excess over 1 falls `release_margin` under the threshold's.
    """
    limit = _slow_worker_limit(ctx)
    slow = {w: s for w, s in steadily_slow(ratios, limit).items() if not recovered(ratios[w], limit, STRAGGLERS)}
    if not slow:
        return None
    worker, slowdown = max(slow.items(), key=lambda item: item[1])
    finding = ctx.finding(
        FindingKind.SLOW_WORKER,
        0.3,
        f"Worker {worker} has been {slowdown:.2f}x slower than its peers for the whole window.",
        worker=worker,
        slowdown=slowdown,
    )
    return finding, None


def compute_activity(window: JobWindow) -> tuple[Sequence[float], str]:
    """Per sample, how much of its GPU the job keeps computing (0-1), and which metric says so.

    SM activity where the GPU measures it; otherwise GPU utilization, which is an upper bound (a
    kernel on a single SM counts as busy), so a rule reading it errs towards "busy".
    """
    if window.sm_active:
        return window.sm_active, "smActivity"
    return [u / 100 for u in window.gpu_utilization], "gpuUtilization"


def _percentile(values: Sequence[float], share: float) -> float:
    """The smallest value that at least `share` of `values` do not exceed."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def mig_table(model: str | None) -> GpuModel | None:
    """The MIG profile table of the job's GPU model; None for an unknown model or one without MIG."""
    try:
        return gpu_model(model) if model is not None else None
    except UnknownGpuModelError:
        return None


def smallest_mig_profile(table: GpuModel, slices: int, memory_mib: float, now_mib: float) -> MigProfile | None:
    """The smallest profile with `slices` compute slices and `memory_mib`, smaller than what the
    job has now: short of the whole GPU, and with less memory than `now_mib`, so a job already on
    a slice is not sent to the same one. Profile memory steps by halves and a name rounds its size
    down (a 1g.10gb instance holds a little more than 10 GB), so "less" is under three quarters
    of `now_mib`.
    """
    fitting = [
        p
        for p in table.profiles
        if slices <= p.compute_slices < COMPUTE_SLICES and memory_mib <= p.memory_gb * MIB_PER_GB < 0.75 * now_mib
    ]
    return min(fitting, key=lambda p: (p.compute_slices, p.memory_slices)) if fitting else None


def oversized_gpu(ctx: RuleContext) -> Diagnosis | None:
    """Low compute and low memory for the whole window: a share of the GPU would do, and free the rest.

    What the job needs is sized from what it used: its compute for the 90th percentile of its
    activity, filled to at most `mig_fill`, and its memory for its peak plus `mig_memory_margin`
    (eased while the finding holds: `_memory_margins`).
    On a GPU with MIG that is the smallest slice holding both (MigRepartition, or Pack onto free
    slices when the job allows Pack and not MigRepartition); on one without
    MIG, or of a model gpuwise has no MIG table for, it is a time-sliced share of the GPU (Pack),
    the larger of the two fractions — time-slicing isolates no memory, so the job's memory must fit
    its share too. Only for one GPU per worker (a share serves one process, and shares have no
    peer-to-peer), and not while the job waits on input: fixed input needs more compute, so that
    comes first. Where a figure read is a window's mean or peak (the input wait, the memory), an
    active finding holds until it is `release_margin` past its limit.

    A job that lists Reschedule and neither MigRepartition nor Pack is moved instead to the
    smallest of the platform's GPU classes that holds it (`_to_smaller_class`), where one does; the
    slice or share stays the remedy otherwise. The slice and the share come first because they keep
    the job on the GPU its step time was measured on; a smaller class's speed is an estimate.
    """
    w, t = ctx.window, ctx.thresholds
    if w.memory_used_mib is None or not w.memory_total_mib or w.gpus != max(1, len(w.worker_step_seconds)):
        return None
    used = w.memory_used_mib / w.memory_total_mib
    if not ctx.under(FindingKind.OVERSIZED_GPU, used, t.memory_headroom):
        return None
    activity, metric = compute_activity(w)
    if not activity:
        return None
    if (wait := w.mean(w.data_wait_fraction)) is not None and not ctx.under(
        FindingKind.OVERSIZED_GPU, wait, t.data_wait_fraction
    ):
        return None
    if not ctx.sustained(FindingKind.OVERSIZED_GPU, activity, below(t.oversized_activity)):
        return None
    needed = _percentile(activity, ctx.sustain.hold_fraction)
    slices = max(1, math.ceil(needed * COMPUTE_SLICES / t.mig_fill))
    wanted = [w.memory_used_mib * (1 + margin) for margin in _memory_margins(ctx)]
    table = mig_table(w.gpu_model)
    if table is not None:
        slices_that_hold = (
            (profile, mib)
            for mib in wanted
            if (profile := smallest_mig_profile(table, slices, mib, w.memory_total_mib)) is not None
        )
        if (sized := next(slices_that_hold, None)) is None:
            return None  # no smaller slice holds it: the job needs what it has
        profile, wanted_mib = sized
        finding = _oversized_finding(ctx, needed, metric, f"a MIG slice {profile.name} would do", profile.name)
        slice_changes = {MIG_PROFILE_CHANGE: profile.name, MIG_RESOURCE_CHANGE: profile.resource_name}
        if (move := _to_smaller_class(ctx, wanted_mib)) is not None:
            return finding, move
        if ActionKind.PACK in ctx.actions and ActionKind.MIG_REPARTITION not in ctx.actions:
            return finding, Recommendation(
                action=ActionKind.PACK,
                finding=FindingKind.OVERSIZED_GPU,
                message=f"Run each worker on a free MIG slice {profile.name} (request {profile.resource_name}: 1) "
                "on a node that has one, instead of a whole GPU.",
                changes=slice_changes,
                expected_effect=f"its whole GPU free for other jobs, on {profile.compute_slices} of "
                f"{COMPUTE_SLICES} compute slices elsewhere",
            )
        recommendation = Recommendation(
            action=ActionKind.MIG_REPARTITION,
            finding=FindingKind.OVERSIZED_GPU,
            message=f"Run each worker on a MIG slice {profile.name}: request {profile.resource_name}: 1 "
            "instead of a whole GPU.",
            changes=slice_changes,
            expected_effect=f"frees {COMPUTE_SLICES - profile.compute_slices} of {COMPUTE_SLICES} compute "
            "slices of each GPU for other jobs at the same step time",
        )
        return finding, recommendation
    shares = ((math.ceil(100 * max(needed / t.mig_fill, mib / w.memory_total_mib)) / 100, mib) for mib in wanted)
    if (shared := next(((share, mib) for share, mib in shares if share <= MAX_GPU_SHARE), None)) is None:
        return None  # no second job as light fits beside it: the job needs what it has
    share, wanted_mib = shared
    why_not = f"{w.gpu_model} has no MIG profiles" if w.gpu_model else "the GPU model is not known"
    fix = f"a {share:.0%} share of a time-sliced GPU would do; {why_not}"
    finding = _oversized_finding(ctx, needed, metric, fix, f"none: {why_not}", gpuShare=share)
    if (move := _to_smaller_class(ctx, wanted_mib)) is not None:
        return finding, move
    recommendation = Recommendation(
        action=ActionKind.PACK,
        finding=FindingKind.OVERSIZED_GPU,
        message=f"Run each worker on a time-sliced share of a GPU (at least {share:.0%} of one, compute and "
        "memory) next to other light jobs, instead of a whole GPU.",
        changes={SHARE_CHANGE: TIME_SLICING, GPU_SHARE_CHANGE: f"{share:.2f}"},
        expected_effect=f"about {1 - share:.0%} of each GPU free for other jobs",
    )
    return finding, recommendation


def _memory_margins(ctx: RuleContext) -> tuple[float, ...]:
    """The margins over its memory peak that OversizedGPU sizes a job's slice or share with, in turn.

    `mig_memory_margin`; for an active finding then that margin eased by `release_margin`, as
    `_slow_worker_limit` eases its excess, so that a peak hovering at a slice's edge keeps its
    finding rather than losing and regaining it every cycle. The eased margin is tried only where
    the full one fits nothing, so the slice recommended does not move while the finding holds.
    """
    margin = ctx.thresholds.mig_memory_margin
    if ctx.is_active(FindingKind.OVERSIZED_GPU):
        return margin, margin / ctx.eased(FindingKind.OVERSIZED_GPU)
    return (margin,)


def _to_smaller_class(ctx: RuleContext, wanted_mib: float) -> Recommendation | None:
    """Reschedule to the smallest declared GPU class that holds the job (`gpu_classes`), for a job
    that lists Reschedule and neither MigRepartition nor Pack; None otherwise, or where none does.

    The compute bound needs the GPU's time-busy share (GPU utilization, its 90th percentile as
    `oversized_gpu` sizes compute) and the datasheet figures of the GPU the job has now: without
    either, nothing is said. SM activity is not enough: it is the SMs' average share, below the
    share of the time a kernel runs at all, and the bound is one of time.
    """
    w, t = ctx.window, ctx.thresholds
    if ActionKind.RESCHEDULE not in ctx.actions or not ctx.actions.isdisjoint(SLICE_REMEDIES):
        return None
    current = gpu_spec(w.gpu_model)
    if not ctx.gpu_classes or current is None or not w.gpu_utilization:
        return None
    busy = _percentile(w.gpu_utilization, ctx.sustain.hold_fraction) / 100
    fit = smallest_fitting(current, ctx.gpu_classes, wanted_mib, busy, t.class_slowdown)
    if fit is None:
        return None
    target = fit.gpu_class
    peak_gb = (w.memory_used_mib or 0.0) / MIB_PER_GB
    where = ", ".join(f"{key}={value}" for key, value in sorted(target.node_selector.items()))
    return Recommendation(
        action=ActionKind.RESCHEDULE,
        finding=FindingKind.OVERSIZED_GPU,
        message=f"Move the job to GPU class {target.name} ({target.spec.model}, {target.spec.memory_gb:g} GB"
        + (f"; nodes {where}" if where else "")
        + f") and restart it from a checkpoint: its memory peak of {peak_gb:.1f} GB plus "
        f"{t.mig_memory_margin:.0%} fits, and its GPU computes {busy:.1%} of the time.",
        changes={GPU_CLASS_CHANGE: target.name},
        expected_effect=f"frees {w.gpus} {current.model} GPU(s) for jobs that need them; steps at most "
        f"{fit.step_slowdown - 1:.0%} longer on the {target.spec.model} by a conservative estimate (the GPU "
        f"busy {busy:.1%} of the time, its work up to {fit.work_ratio:.1f}x longer by the datasheets' "
        f"{fit.basis} peaks); measured after the move",
    )


def _oversized_finding(
    ctx: RuleContext, needed: float, metric: str, fix: str, mig_profile: str, **evidence: object
) -> Finding:
    """The OversizedGPU finding: what the job used, and `fix`, the share that would do."""
    w, t = ctx.window, ctx.thresholds
    peak, total = w.memory_used_mib or 0.0, w.memory_total_mib or 1.0  # both known: oversized_gpu checked
    return ctx.finding(
        FindingKind.OVERSIZED_GPU,
        0.4 + (t.oversized_activity - needed) + (0.1 if metric == "smActivity" else 0.0),
        f"The GPU computes under {t.oversized_activity:.0%} of the time ({needed:.0%} in 90% of samples, "
        f"{'SM activity' if metric == 'smActivity' else 'GPU utilization'}) and memory peaks at "
        f"{peak / 1024:.1f} GiB ({peak / total:.0%}): {fix}.",
        **{f"{metric}P90": needed},
        memoryPeakMiB=f"{peak:.0f}",
        gpuModel=w.gpu_model,
        migProfile=mig_profile,
        **evidence,
    )


def throttling(ctx: RuleContext) -> Diagnosis | None:
    """A worker's GPU runs with its SM clocks held down by thermal or power protection, sustained.

    Read from the clock-event reasons NVML reports (DCGM_FI_DEV_CLOCKS_EVENT_REASONS), only the
    bits in `CLOCK_SLOWDOWNS`: a GPU merely at its software power cap is busy, not faulty. Where the
    series is absent (an older sidecar, dcgm-exporter without the field) there is no finding. The
    cause is the node (cooling, power delivery), so the fix is to run elsewhere.
    """
    # A series with no slowdown at any sample never holds, unless the finding is active and the
    # series too short to change our mind (`holds`): most GPUs' series are skipped unread.
    active = ctx.is_active(FindingKind.THROTTLING)
    throttled = {
        worker: series
        for worker, series in ctx.window.clock_slowdowns.items()
        if (active or any(series)) and ctx.sustained(FindingKind.THROTTLING, series, at_least(1.0))
    }
    if not throttled:
        return None
    shares = {worker: sum(map(bool, series)) / len(series) for worker, series in throttled.items()}
    worker = max(shares, key=lambda w: shares[w])
    series = throttled[worker]
    masks = collections.Counter(map(int, series))  # a mask takes a few values, each over many samples
    reasons = [
        name
        for bit, name in CLOCK_SLOWDOWNS.items()
        if sum(n for mask, n in masks.items() if mask & bit) * 2 >= len(series)
    ]
    if shares[worker]:
        what = (
            f"Worker {worker}'s GPU clocks were held down in {shares[worker]:.0%} of samples "
            f"({', '.join(reasons) or 'changing reasons'})"
        )
    else:  # an active finding the window has too few samples to clear (`holds`)
        what = (
            f"Worker {worker}'s GPU clocks were held down; its {len(series)} samples since show no slowdown, "
            "too few to tell that it is over"
        )
    finding = ctx.finding(
        FindingKind.THROTTLING,
        0.6 + shares[worker] / 4,
        what + ("; every synchronous step of the job waits for it." if len(ctx.window.clock_slowdowns) > 1 else "."),
        worker=worker,
        throttledShare=shares[worker],
        reasons=", ".join(reasons) or None,
        throttledWorkers=len(throttled),
    )
    recommendation = Recommendation(
        action=ActionKind.RESCHEDULE,
        finding=FindingKind.THROTTLING,
        message=f"Restart the job away from worker {worker}'s node (after a checkpoint) and have its cooling "
        "or power delivery checked.",
        changes={},
        expected_effect="full clock speed on every worker",
    )
    return finding, recommendation


def communication_bound(ctx: RuleContext) -> Diagnosis | None:
    """A multi-node job whose steps are spent neither computing nor waiting for input, while its
    GPUs exchange data: the all-reduce between nodes is the bottleneck.

    A finding needs all of these over the job's window, and nothing else is read:

    - at least two workers report step times (gradients cross nodes every step);
    - compute activity (SM activity where measured, else GPU utilization) is under the job's
      utilization threshold, sustained;
    - the data-wait fraction is under its threshold, sustained: the step does not wait for input;
    - the GPUs' PCIe traffic (mean per GPU) is at least `collective_pcie_bytes` each way and
      symmetric, sent and received within `collective_symmetry` of each other. Collectives send
      what they receive; input loading mostly receives and checkpointing mostly sends. Both are
      window means, so an active finding holds until they are `release_margin` off either limit.

    Not read, because no metric shows it yet: step time against the number of workers (a run
    has one count), NVLink traffic, NCCL's own timings. Known miss: GPU utilization counts NCCL
    kernels waiting for the network as busy, so without SM activity an NCCL job may look busy
    and get no finding; it never gets a false one from that.
    """
    w, t = ctx.window, ctx.thresholds
    tx, rx = w.pcie_tx_bytes_per_second, w.pcie_rx_bytes_per_second
    # Both figures are means over the window: an active finding holds until they are clearly off.
    eased = ctx.eased(FindingKind.COMMUNICATION_BOUND)
    if len(w.worker_step_seconds) < 2 or tx is None or rx is None or min(tx, rx) * eased < t.collective_pcie_bytes:
        return None
    if max(tx, rx) > t.collective_symmetry * eased * min(tx, rx):
        return None
    activity, metric = compute_activity(w)
    if not ctx.sustained(FindingKind.COMMUNICATION_BOUND, activity, below(t.gpu_utilization / 100)):
        return None
    if not ctx.sustained(FindingKind.COMMUNICATION_BOUND, w.data_wait_fraction, below(t.data_wait_fraction)):
        return None
    computing, waiting = w.mean(activity) or 0.0, w.mean(w.data_wait_fraction) or 0.0
    elsewhere = max(0.0, 1 - computing - waiting)
    finding = ctx.finding(
        FindingKind.COMMUNICATION_BOUND,
        0.45 + (0.1 if metric == "smActivity" else 0.0),
        f"{len(w.worker_step_seconds)} workers spend about {elsewhere:.0%} of each step neither computing "
        f"({computing:.0%}) nor waiting for input ({waiting:.0%}), while their GPUs send and receive "
        f"{tx / 1e9:.2g}/{rx / 1e9:.2g} GB/s over PCIe: the exchange between nodes holds the steps.",
        workers=len(w.worker_step_seconds),
        **{metric: computing},
        dataWaitFraction=waiting,
        outsideComputeAndInput=elsewhere,
        pcieTxBytesPerSecond=tx,
        pcieRxBytesPerSecond=rx,
    )
    # One all-reduce per optimizer step: accumulating over twice the micro-batches halves them per
    # sample, at twice the global batch, so not when the job must keep its global batch.
    accumulation, current = ctx.tunables.gradient_accumulation_steps, w.gradient_accumulation_steps
    changes: dict[str, str] = {}
    if accumulation is not None and current is not None and not ctx.tunables.keep_global_batch_size:
        changes = (
            {accumulation.env: str(proposal)} if (proposal := min(accumulation.max, 2 * current)) > current else {}
        )
    recommendation = Recommendation(
        action=ActionKind.ADJUST_CONFIG,
        finding=FindingKind.COMMUNICATION_BOUND,
        message="Accumulate gradients over twice the micro-batches (under DDP's no_sync()): half the all-reduces "
        "per sample."
        if changes
        else "Accumulate gradients over more micro-batches (fewer all-reduces per sample) unless the global batch "
        "must stay; raise DDP's bucket_cap_mb and overlap communication with the backward pass.",
        changes=changes,
        expected_effect="half the all-reduces per sample" if changes else None,
    )
    return finding, recommendation


RULES: tuple[Callable[[RuleContext], Diagnosis | None], ...] = (
    idle,
    input_bound,
    small_batch,
    no_mixed_precision,
    straggler,
    oversized_gpu,
    throttling,
    communication_bound,
)


def diagnose(ctx: RuleContext) -> list[Diagnosis]:
    """Every rule's finding, most confident first. An idle job gets only the Idle finding: the
    other rules are not asked about steps it does not take."""
    if (idling := idle(ctx)) is not None:
        return [idling]
    found = [d for rule in RULES if rule is not idle and (d := rule(ctx)) is not None]
    if any(finding.kind in INPUT_SIDE for finding, _ in found):
        # The GPU waits for its input: a larger batch or a faster step cannot make it wait less.
        found = [d for d in found if d[0].kind not in COMPUTE_SIDE]
    return sorted(found, key=lambda d: -d[0].confidence)
