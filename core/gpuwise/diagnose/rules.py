"""Why a job underuses its GPUs: one function per reason practitioners know, with evidence.

Each rule reads a `JobWindow`, decides whether its condition is sustained, and returns a
`Finding` (what is wrong, how sure we are, the numbers that show it) with the `Recommendation`
that would fix it — concrete values for the job's declared tunables, within their bounds. Rules
only recommend what the job said it can take (`spec.efficiency.tunables`); a finding without a
matching tunable still explains itself, with an empty change set.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuwise.api.trainingjob import ActionKind, Finding, Recommendation, Tunables
from gpuwise.decide.mig_profiles import COMPUTE_SLICES, GpuModel, MigProfile, UnknownGpuModelError, gpu_model
from gpuwise.diagnose.straggler import detect_stragglers, persistent_slow_workers
from gpuwise.diagnose.window import CLOCK_SLOWDOWNS, JobWindow, Sustain, at_least, below, holds

# The recommendations' `changes` keys the actions read (gpuwise.act.mig and gpuwise.act.pack
# import them: one name on both sides). The MIG profile a job fits, e.g. 1g.10gb...
MIG_PROFILE_CHANGE = "migProfile"
# ...and the extended resource a worker requests for it (the device plugin's `mixed` strategy).
MIG_RESOURCE_CHANGE = "resource"
# How Pack shares a GPU (TIME_SLICING), and the share of one GPU the job needs, 0-1.
SHARE_CHANGE = "share"
GPU_SHARE_CHANGE = "gpuShare"
TIME_SLICING = "time-slicing"
# A share above this leaves no room for a second job as light: the job needs its GPU.
MAX_GPU_SHARE = 0.5
MIB_PER_GB = 1000**3 / 2**20


@dataclass(frozen=True)
class DiagnosisThresholds:
    gpu_utilization: float = 50.0  # % below which a GPU is underused (spec.efficiency.thresholds)
    data_wait_fraction: float = 0.2  # above this share of step time, input is the bottleneck
    memory_headroom: float = 0.5  # below this share of GPU memory used, the batch can grow
    safe_memory_fraction: float = 0.85  # grow the batch up to this share of GPU memory
    idle_seconds: float = 600.0  # GPUs allocated but no step for this long
    tensor_activity: float = 0.1  # below this, tensor cores are not being used
    persistent_slowdown: float = 1.1  # a worker steadily this much slower than its peers is worth a note
    oversized_activity: float = 0.3  # below this compute activity (0-1) a whole GPU is more than the job needs
    mig_fill: float = 0.8  # size a MIG slice so the job's compute fills at most this share of it
    mig_memory_margin: float = 0.2  # and its memory holds the peak plus this share
    collective_pcie_bytes: float = 50e6  # PCIe traffic (B/s per GPU, each way) below which nothing is exchanged
    collective_symmetry: float = 2.0  # sent and received within this factor of each other: collectives


@dataclass(frozen=True)
class Context:
    window: JobWindow
    tunables: Tunables
    thresholds: DiagnosisThresholds
    sustain: Sustain
    now: datetime
    active: frozenset[str]  # kinds of the findings already active (for hysteresis)
    since: dict[str, datetime]  # when each active finding first appeared

    def sustained(self, kind: str, series: Sequence[float], predicate: Callable[[float], bool]) -> bool:
        return holds(self.window, series, predicate, active=kind in self.active, sustain=self.sustain)

    def finding(self, kind: str, confidence: float, message: str, **evidence: object) -> Finding:
        return Finding(
            kind=kind,
            confidence=round(min(1.0, max(0.0, confidence)), 2),
            since=self.since.get(kind, self.now),
            message=message,
            evidence={key: _show(value) for key, value in evidence.items() if value is not None},
        )


def _show(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


Diagnosis = tuple[Finding, Recommendation | None]


def idle(ctx: Context) -> Diagnosis | None:
    """GPUs allocated, no training step for a long time: the job holds hardware it does not use."""
    quiet = ctx.window.seconds_since_last_step
    if quiet is None or quiet < ctx.thresholds.idle_seconds or ctx.window.job_age_seconds < ctx.sustain.grace_seconds:
        return None
    minutes = quiet / 60
    finding = ctx.finding(
        "Idle",
        0.9,
        f"No training step for {minutes:.0f} minutes while {ctx.window.gpus} GPU(s) stay allocated.",
        secondsSinceLastStep=quiet,
        gpus=ctx.window.gpus,
    )
    return finding, None


def input_bound(ctx: Context) -> Diagnosis | None:
    """The GPU waits for data: many DataLoader workers or pinned memory make input keep up."""
    w, t = ctx.window, ctx.thresholds
    waiting = ctx.sustained("InputBound", w.data_wait_fraction, at_least(t.data_wait_fraction))
    underused = ctx.sustained("InputBound", w.gpu_utilization, below(t.gpu_utilization))
    if not (waiting and underused):
        return None
    wait, util = w.mean(w.data_wait_fraction) or 0.0, w.mean(w.gpu_utilization) or 0.0
    changes: dict[str, str] = {}
    workers = ctx.tunables.data_loader_workers
    current = w.num_workers or 0
    if workers is not None:
        # Enough workers to hide the wait, never more than the pod's cores leave for the trainer.
        wanted = max(current + 1, math.ceil(max(current, 1) / max(1 - wait, 0.05)))
        cores_cap = int(w.cpu_cores) - 1 if w.cpu_cores else workers.max
        proposal = min(wanted, workers.max, max(cores_cap, workers.min))
        if proposal > current:
            changes[workers.env] = str(proposal)
    if ctx.tunables.pin_memory is not None and w.pin_memory is False:
        changes[ctx.tunables.pin_memory.env] = "1"
    cpu_bound = w.cpu_cores is not None and current >= int(w.cpu_cores) - 1
    message = f"{wait:.0%} of step time is spent waiting for input while GPU utilization is {util:.0f}%."
    if cpu_bound:
        message += " The pod has no spare CPU for more loader workers: preprocessing is CPU-bound."
    finding = ctx.finding(
        "CPUBoundInput" if cpu_bound and not changes else "InputBound",
        0.5 + wait / 2,
        message,
        dataWaitFraction=wait,
        gpuUtilization=util,
        numWorkers=w.num_workers,
        pinMemory=w.pin_memory,
        cpuCores=w.cpu_cores,
    )
    recommendation = Recommendation(
        action=ActionKind.ADJUST_CONFIG,
        finding=finding.kind,
        message="Raise DataLoader workers and pin host memory; move heavy augmentation off the step path."
        if changes
        else "Give the pod more CPU or move preprocessing offline; no declared tunable can fix this.",
        changes=changes,
        expected_effect=f"up to {min(100.0, util / max(1 - wait, 0.05)):.0f}% GPU utilization",
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
    var = sum((b - mean_b) ** 2 for b in distinct)
    slope = sum((b - mean_b) * (m - mean_m) for b, m in distinct.items()) / var
    if slope <= 0:
        return None
    return max(0.0, mean_m - slope * mean_b), slope


def small_batch(ctx: Context) -> Diagnosis | None:
    """Low memory use and low utilization: a larger batch keeps the GPU busier per step."""
    w, t = ctx.window, ctx.thresholds
    if w.memory_used_mib is None or not w.memory_total_mib or w.batch_size is None:
        return None
    used = w.memory_used_mib / w.memory_total_mib
    if used >= t.memory_headroom:
        return None
    if not ctx.sustained("SmallBatch", w.gpu_utilization, below(t.gpu_utilization)):
        return None
    model = fit_memory(w.memory_by_batch or [(w.batch_size, w.memory_used_mib)])
    changes: dict[str, str] = {}
    tunable = ctx.tunables.batch_size
    proposal = None
    if model is not None and tunable is not None:
        fixed, per_sample = model
        fits = int((t.safe_memory_fraction * w.memory_total_mib - fixed) / per_sample)
        proposal = min(tunable.max, 2 ** int(math.log2(fits)) if fits >= 1 else 0)
        if proposal > w.batch_size:
            changes[tunable.env] = str(proposal)
            accumulation = ctx.tunables.gradient_accumulation_steps
            if ctx.tunables.keep_global_batch_size and accumulation is not None:
                steps = max(1, round((w.gradient_accumulation_steps or 1) * w.batch_size / proposal))
                changes[accumulation.env] = str(max(accumulation.min, min(accumulation.max, steps)))
    util = w.mean(w.gpu_utilization) or 0.0
    finding = ctx.finding(
        "SmallBatch",
        0.4 + (t.memory_headroom - used),
        f"Only {used:.0%} of GPU memory is used at batch size {w.batch_size} while utilization is {util:.0f}%.",
        memoryUsedFraction=used,
        batchSize=w.batch_size,
        gpuUtilization=util,
        memoryModel=f"{model[0]:.0f} MiB + {model[1]:.1f} MiB/sample" if model else None,
    )
    recommendation = Recommendation(
        action=ActionKind.ADJUST_CONFIG,
        finding="SmallBatch",
        message=f"Raise the batch size to {proposal} (fits in {t.safe_memory_fraction:.0%} of GPU memory)."
        if changes
        else "Raise the batch size; declare spec.efficiency.tunables.batchSize so gpuwise can compute it.",
        changes=changes,
        expected_effect="fewer, fuller kernels per sample" if changes else None,
    )
    return finding, recommendation


def no_mixed_precision(ctx: Context) -> Diagnosis | None:
    """FP32 on a tensor-core GPU (compute capability ≥ 7.0) leaves most of its throughput unused."""
    w = ctx.window
    if w.autocast is not False or w.compute_capability is None or w.compute_capability < (7, 0):
        return None
    if w.tensor_activity is not None and w.tensor_activity >= ctx.thresholds.tensor_activity:
        return None  # tensor cores busy anyway (e.g. TF32 matmuls or a manual half model)
    if w.job_age_seconds < ctx.sustain.grace_seconds:
        return None
    dtype = "bf16" if w.compute_capability >= (8, 0) else "fp16"
    major, minor = w.compute_capability
    finding = ctx.finding(
        "NoMixedPrecision",
        0.8 if w.tensor_activity is not None else 0.6,
        f"Training runs without autocast on a tensor-core GPU (compute capability {major}.{minor}).",
        gpuModel=w.gpu_model,
        computeCapability=f"{major}.{minor}",
        tensorActivity=w.tensor_activity,
    )
    changes = {ctx.tunables.amp.env: "1"} if ctx.tunables.amp is not None else {}
    recommendation = Recommendation(
        action=ActionKind.ADJUST_CONFIG,
        finding="NoMixedPrecision",
        message=f"Enable automatic mixed precision with {dtype}.",
        changes=changes,
        expected_effect="typically 1.5-3x faster steps and half the activation memory",
    )
    return finding, recommendation


def straggler(ctx: Context) -> Diagnosis | None:
    """One worker's steps slowed against its own past and its peers, and still slow now.

    Synchronous training waits for the slowest worker every step, so the whole job runs at its
    pace; replacing its pod away from its node usually restores it (a noisy neighbour, a
    throttled or failing GPU, a slow NIC). Steady per-worker differences are not stragglers.
    """
    series = ctx.window.worker_step_seconds
    if len(series) < 3 or ctx.window.job_age_seconds < ctx.sustain.grace_seconds:
        return None
    samples = [(t, worker, seconds) for worker, points in series.items() for t, seconds in points]
    latest = max(t for t, _, _ in samples)
    recent = 3 * ctx.window.sample_interval_seconds
    ongoing = [e for e in detect_stragglers(samples) if e.end >= latest - recent]
    if not ongoing:
        return slow_worker(ctx, samples)
    worst = max(ongoing, key=lambda e: e.peak_slowdown)
    finding = ctx.finding(
        "Straggler",
        min(0.95, 0.5 + (worst.peak_slowdown - 1) / 2),
        f"Worker {worst.worker} runs {worst.peak_slowdown:.1f}x slower than its own baseline against its peers; "
        "every step of the job waits for it.",
        worker=worst.worker,
        peakSlowdown=worst.peak_slowdown,
        slowSinceUnixSeconds=worst.start,
    )
    finding = finding.model_copy(update={"worker": worst.worker})
    recommendation = Recommendation(
        action=ActionKind.RESCHEDULE,
        finding="Straggler",
        message=f"Replace worker {worst.worker}'s pod on another node (after a checkpoint).",
        changes={},
        expected_effect=f"up to {worst.peak_slowdown:.1f}x faster steps for the whole job",
    )
    return finding, recommendation


def slow_worker(ctx: Context, samples: list[tuple[float, int, float]]) -> Diagnosis | None:
    """A worker steadily slower than its peers (another GPU model, a busier node): milder, no action.

    It has always been so, so there is no episode to react to; it still costs the whole job its
    slowdown on every step, which is worth knowing when placing the next run.
    """
    slow = persistent_slow_workers(samples, min_slowdown=ctx.thresholds.persistent_slowdown)
    if not slow:
        return None
    worker, slowdown = max(slow.items(), key=lambda item: item[1])
    finding = ctx.finding(
        "SlowWorker",
        0.3,
        f"Worker {worker} has been {slowdown:.2f}x slower than its peers for the whole window.",
        worker=worker,
        slowdown=slowdown,
    )
    return finding.model_copy(update={"worker": worker}), None


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


def oversized_gpu(ctx: Context) -> Diagnosis | None:
    """Low compute and low memory for the whole window: a share of the GPU would do, and free the rest.

    What the job needs is sized from what it used: its compute for the 90th percentile of its
    activity, filled to at most `mig_fill`, and its memory for its peak plus `mig_memory_margin`.
    On a GPU with MIG that is the smallest slice holding both (MigRepartition); on one without
    MIG, or of a model gpuwise has no MIG table for, it is a time-sliced share of the GPU (Pack),
    the larger of the two fractions — time-slicing isolates no memory, so the job's memory must fit
    its share too. Only for one GPU per worker (a share serves one process, and shares have no
    peer-to-peer), and not while the job waits on input: fixed input needs more compute, so that
    comes first.
    """
    w, t = ctx.window, ctx.thresholds
    if w.memory_used_mib is None or not w.memory_total_mib or w.gpus != max(1, len(w.worker_step_seconds)):
        return None
    activity, metric = compute_activity(w)
    used = w.memory_used_mib / w.memory_total_mib
    if not activity or used >= t.memory_headroom:
        return None
    if (wait := w.mean(w.data_wait_fraction)) is not None and wait >= t.data_wait_fraction:
        return None
    if not ctx.sustained("OversizedGPU", activity, below(t.oversized_activity)):
        return None
    needed = _percentile(activity, ctx.sustain.hold_fraction)
    slices = max(1, math.ceil(needed * COMPUTE_SLICES / t.mig_fill))
    wanted_mib = w.memory_used_mib * (1 + t.mig_memory_margin)
    table = mig_table(w.gpu_model)
    if table is not None:
        profile = smallest_mig_profile(table, slices, wanted_mib, w.memory_total_mib)
        if profile is None:
            return None  # no smaller slice holds it: the job needs what it has
        finding = _oversized_finding(ctx, needed, metric, f"a MIG slice {profile.name} would do", profile.name)
        recommendation = Recommendation(
            action=ActionKind.MIG_REPARTITION,
            finding="OversizedGPU",
            message=f"Run each worker on a MIG slice {profile.name}: request {profile.resource_name}: 1 "
            "instead of a whole GPU.",
            changes={MIG_PROFILE_CHANGE: profile.name, MIG_RESOURCE_CHANGE: profile.resource_name},
            expected_effect=f"frees {COMPUTE_SLICES - profile.compute_slices} of {COMPUTE_SLICES} compute "
            "slices of each GPU for other jobs at the same step time",
        )
        return finding, recommendation
    share = math.ceil(100 * max(needed / t.mig_fill, wanted_mib / w.memory_total_mib)) / 100
    if share > MAX_GPU_SHARE:
        return None  # no second job as light fits beside it: the job needs what it has
    why_not = f"{w.gpu_model} has no MIG profiles" if w.gpu_model else "the GPU model is not known"
    fix = f"a {share:.0%} share of a time-sliced GPU would do; {why_not}"
    finding = _oversized_finding(ctx, needed, metric, fix, f"none: {why_not}", gpuShare=share)
    recommendation = Recommendation(
        action=ActionKind.PACK,
        finding="OversizedGPU",
        message=f"Run each worker on a time-sliced share of a GPU (at least {share:.0%} of one, compute and "
        "memory) next to other light jobs, instead of a whole GPU.",
        changes={SHARE_CHANGE: TIME_SLICING, GPU_SHARE_CHANGE: f"{share:.2f}"},
        expected_effect=f"about {1 - share:.0%} of each GPU free for other jobs",
    )
    return finding, recommendation


def _oversized_finding(
    ctx: Context, needed: float, metric: str, fix: str, mig_profile: str, **evidence: object
) -> Finding:
    """The OversizedGPU finding: what the job used, and `fix`, the share that would do."""
    w, t = ctx.window, ctx.thresholds
    peak, total = w.memory_used_mib or 0.0, w.memory_total_mib or 1.0  # both known: oversized_gpu checked
    return ctx.finding(
        "OversizedGPU",
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


def throttling(ctx: Context) -> Diagnosis | None:
    """A worker's GPU runs with its SM clocks held down by thermal or power protection, sustained.

    Read from the clock-event reasons NVML reports (DCGM_FI_DEV_CLOCKS_EVENT_REASONS), only the
    bits in `CLOCK_SLOWDOWNS`: a GPU merely at its software power cap is busy, not faulty. Where the
    series is absent (an older sidecar, dcgm-exporter without the field) there is no finding. The
    cause is the node (cooling, power delivery), so the fix is to run elsewhere.
    """
    throttled = {
        worker: series
        for worker, series in ctx.window.clock_slowdowns.items()
        if ctx.sustained("Throttling", series, at_least(1.0))
    }
    if not throttled:
        return None
    shares = {worker: sum(bits > 0 for bits in series) / len(series) for worker, series in throttled.items()}
    worker = max(shares, key=lambda w: shares[w])
    series = throttled[worker]
    reasons = [
        name for bit, name in CLOCK_SLOWDOWNS.items() if sum(int(b) & bit > 0 for b in series) * 2 >= len(series)
    ]
    finding = ctx.finding(
        "Throttling",
        0.6 + shares[worker] / 4,
        f"Worker {worker}'s GPU clocks were held down in {shares[worker]:.0%} of samples "
        f"({', '.join(reasons) or 'changing reasons'})"
        + ("; every synchronous step of the job waits for it." if len(ctx.window.clock_slowdowns) > 1 else "."),
        worker=worker,
        throttledShare=shares[worker],
        reasons=", ".join(reasons) or None,
        throttledWorkers=len(throttled),
    )
    recommendation = Recommendation(
        action=ActionKind.RESCHEDULE,
        finding="Throttling",
        message=f"Restart the job away from worker {worker}'s node (after a checkpoint) and have its cooling "
        "or power delivery checked.",
        changes={},
        expected_effect="full clock speed on every worker",
    )
    return finding.model_copy(update={"worker": worker}), recommendation


def communication_bound(ctx: Context) -> Diagnosis | None:
    """A multi-node job whose steps are spent neither computing nor waiting for input, while its
    GPUs exchange data: the all-reduce between nodes is the bottleneck.

    A finding needs all of these over the job's window, and nothing else is read:

    - at least two workers report step times (gradients cross nodes every step);
    - compute activity (SM activity where measured, else GPU utilization) is under the job's
      utilization threshold, sustained;
    - the data-wait fraction is under its threshold, sustained: the step does not wait for input;
    - the GPUs' PCIe traffic (mean per GPU) is at least `collective_pcie_bytes` each way and
      symmetric, sent and received within `collective_symmetry` of each other. Collectives send
      what they receive; input loading mostly receives and checkpointing mostly sends.

    Not read, because no metric shows it yet: step time against the number of workers (a run
    has one count), NVLink traffic, NCCL's own timings. Known miss: GPU utilization counts NCCL
    kernels waiting for the network as busy, so without SM activity an NCCL job may look busy
    and get no finding; it never gets a false one from that.
    """
    w, t = ctx.window, ctx.thresholds
    tx, rx = w.pcie_tx_bytes_per_second, w.pcie_rx_bytes_per_second
    if len(w.worker_step_seconds) < 2 or tx is None or rx is None or min(tx, rx) < t.collective_pcie_bytes:
        return None
    if max(tx, rx) > t.collective_symmetry * min(tx, rx):
        return None
    activity, metric = compute_activity(w)
    if not ctx.sustained("CommunicationBound", activity, below(t.gpu_utilization / 100)):
        return None
    if not ctx.sustained("CommunicationBound", w.data_wait_fraction, below(t.data_wait_fraction)):
        return None
    computing, waiting = w.mean(activity) or 0.0, w.mean(w.data_wait_fraction) or 0.0
    elsewhere = max(0.0, 1 - computing - waiting)
    finding = ctx.finding(
        "CommunicationBound",
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
        finding="CommunicationBound",
        message="Accumulate gradients over twice the micro-batches (under DDP's no_sync()): half the all-reduces "
        "per sample."
        if changes
        else "Accumulate gradients over more micro-batches (fewer all-reduces per sample) unless the global batch "
        "must stay; raise DDP's bucket_cap_mb and overlap communication with the backward pass.",
        changes=changes,
        expected_effect="half the all-reduces per sample" if changes else None,
    )
    return finding, recommendation


RULES: tuple[Callable[[Context], Diagnosis | None], ...] = (
    idle,
    input_bound,
    small_batch,
    no_mixed_precision,
    straggler,
    oversized_gpu,
    throttling,
    communication_bound,
)


def diagnose(ctx: Context) -> list[Diagnosis]:
    """Every rule's finding, most confident first. An idle job gets only the Idle finding."""
    found = [d for rule in RULES if (d := rule(ctx)) is not None]
    if any(finding.kind == "Idle" for finding, _ in found):
        found = [d for d in found if d[0].kind == "Idle"]
    return sorted(found, key=lambda d: -d[0].confidence)
