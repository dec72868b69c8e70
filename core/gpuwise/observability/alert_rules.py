"""Prometheus alerting rules, as data derived from the metric catalog.

A rule group is a named tuple of alerts; `RULE_GROUPS` lists what the chart ships: the
exporters' and the operator's health, and the efficiency engine's `gpuwise-efficiency` group, each
with `promtool test rules` cases in tests/chart/test_rules.py. The chart's PrometheusRule template reads the file
`rule_file()` produces, so the same YAML also works as a plain Prometheus rule file.

Two PromQL pitfalls these rules avoid on purpose:

* The sidecar creates a labelled error counter on its first error, already at 1, and
  `increase()` needs two samples of a series: the first XID of a kind would go unseen. `new()`
  counts a series born inside the window as an increase from zero.
* Readings a GPU does not support at all (`not_supported`, `mig_unsupported`, `unavailable`)
  fail on every sampling round by design; they explain an absent series and are not an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from gpuwise.api.kinds import ActionKind, FindingKind
from gpuwise.metrics import Metric, catalog
from gpuwise.metrics.promql import OPERATOR_JOB, SIDECAR_JOB, counted, increase, rate, sel, with_trainingjob

Severity = Literal["info", "warning", "critical"]

# Reasons of gpuwise_sample_errors_total (gpuwise.sidecar.backend) that describe the GPU, not a fault.
EXPECTED_REASONS: Final = ("not_supported", "mig_unsupported", "unavailable")
GPU_LOST_REASON: Final = "gpu_lost"
# XIDs that mean the hardware, not the application, is at fault (NVIDIA's XID catalog): double-bit
# ECC (48), page retirement / row remapping (63, 64), NVLink (74), fallen off the bus (79), high
# single-bit ECC rate (92), contained / uncontained ECC (94, 95), GSP RPC timeout / error (119, 120).
HARDWARE_XIDS: Final = (48, 63, 64, 74, 79, 92, 94, 95, 119, 120)
# A sidecar samples every second by default: a minute without a round means NVML is stuck.
STALL_SECONDS: Final = 60


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    expr: str
    severity: Severity
    summary: str
    description: str
    for_: str = "0m"

    def to_rule(self) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {"summary": self.summary, "description": self.description},
        }


@dataclass(frozen=True, slots=True)
class RuleGroup:
    name: str
    alerts: tuple[Alert, ...]

    def to_group(self) -> dict[str, Any]:
        return {"name": self.name, "rules": [alert.to_rule() for alert in self.alerts]}


def new(metric: Metric, window: str, *matchers: str) -> str:
    """Per series: how much `metric` grew in `window`, counting a series born in it from zero."""
    series = sel(metric, *matchers)
    return f"({increase(metric, window, *matchers)} > 0 or ({series} > 0 unless {series} offset {window}))"


def _regex(values: tuple[object, ...]) -> str:
    return "|".join(str(v) for v in values)


def exporter_health() -> RuleGroup:
    """Is the telemetry there, and does the GPU under it work?"""
    where = "{{ $labels.namespace }}/{{ $labels.pod }}"
    gpu = "GPU {{ $labels.gpu }} ({{ $labels.UUID }})"
    expected = f'reason!~"{_regex((*EXPECTED_REASONS, GPU_LOST_REASON))}"'
    lost = f'reason="{GPU_LOST_REASON}"'
    hardware = f'xid=~"{_regex(HARDWARE_XIDS)}"'
    software = f'xid!~"{_regex(HARDWARE_XIDS)}"'
    return RuleGroup(
        "gpuwise-exporter",
        (
            Alert(
                "GpuwiseSidecarDown",
                f'up{{job="{SIDECAR_JOB}"}} == 0',
                "warning",
                f"gpuwise sidecar {where} cannot be scraped",
                "Prometheus has not reached the telemetry sidecar's /metrics for 5 minutes: this pod's GPU "
                "and training metrics are missing and gpuwise cannot diagnose it.",
                for_="5m",
            ),
            Alert(
                "GpuwiseSidecarSamplingStalled",
                f"time() - {sel(catalog.LAST_SAMPLE)} > {STALL_SECONDS}",
                "warning",
                f"gpuwise sidecar {where} has not sampled its GPUs for over {STALL_SECONDS} s",
                "The sidecar answers scrapes but its NVML sampling thread is stuck (a hung driver call is the "
                "usual cause): the device metrics it serves are stale.",
                for_="2m",
            ),
            Alert(
                "GpuwiseNvmlErrors",
                f"sum by (namespace, pod, gpu, UUID, field, reason) ({new(catalog.SAMPLE_ERRORS, '5m', expected)}) > 0",
                "warning",
                f"NVML readings of {gpu} fail in {where}",
                "The sidecar could not read {{ $labels.field }} ({{ $labels.reason }}) for 10 minutes; that "
                "series is absent meanwhile. Check the driver and the sidecar's log.",
                for_="10m",
            ),
            Alert(
                "GpuwiseGpuLost",
                f"sum by (namespace, pod, gpu, UUID) ({new(catalog.SAMPLE_ERRORS, '5m', lost)}) > 0",
                "critical",
                f"{gpu} is lost (NVML: GPU is lost) in {where}",
                "NVML reports the GPU as lost, usually after it fell off the bus: the node needs attention "
                "and the job running on it is likely to fail.",
            ),
            Alert(
                "GpuwiseXidError",
                f"sum by (namespace, pod, gpu, UUID, xid) ({new(catalog.XID_EVENTS, '10m', software)}) > 0",
                "warning",
                f"XID {{{{ $labels.xid }}}} on {gpu} in {where}",
                "The driver reported an XID error that usually means an application fault (e.g. 13, 31, "
                "43: an illegal memory access or a kernel that stopped). Look at the training job's log.",
            ),
            Alert(
                "GpuwiseHardwareXidError",
                f"sum by (namespace, pod, gpu, UUID, xid) ({new(catalog.XID_EVENTS, '10m', hardware)}) > 0",
                "critical",
                f"hardware XID {{{{ $labels.xid }}}} on {gpu} in {where}",
                "The driver reported an XID error that points at the GPU or its links (ECC, NVLink, fallen "
                "off the bus, GSP): drain the node and check the GPU before scheduling more work on it.",
            ),
            Alert(
                "GpuwiseStepEventsDropped",
                f"sum by (namespace, pod, reason) ({new(catalog.EVENTS_DROPPED, '10m')}) > 0",
                "info",
                f"gpuwise sidecar {where} drops step events ({{{{ $labels.reason }}}})",
                "The sidecar discarded step datagrams from the training process for 10 minutes; step counts "
                "stay right (events carry running totals) but step-time resolution suffers.",
                for_="10m",
            ),
        ),
    )


def operator_health() -> RuleGroup:
    """Is the operator itself running? (Shipped only when its ServiceMonitor is.)"""
    return RuleGroup(
        "gpuwise-operator",
        (
            Alert(
                "GpuwiseOperatorDown",
                f'up{{job="{OPERATOR_JOB}"}} == 0',
                "warning",
                "gpuwise operator {{ $labels.namespace }}/{{ $labels.pod }} cannot be scraped",
                "Prometheus has not reached the operator's /metrics for 5 minutes: TrainingJobs are not "
                "being reconciled by this replica.",
                for_="5m",
            ),
        ),
    )


# --- efficiency: what "sustained" means here is what it means to the operator (gpuwise.diagnose) ---
# GPU utilization (%) below which a job's GPUs are underused: a job's own
# spec.efficiency.thresholds.gpuUtilization where the operator exports it, else DiagnosisThresholds' default.
UNDERUSED_PERCENT: Final = 50
# A condition is sustained when it holds in at least this share of the window's samples, and an
# alert that fires holds until the share drops under RELEASE_SHARE (hysteresis)...
SUSTAINED_SHARE: Final = 0.9
RELEASE_SHARE: Final = 0.5
# ...sampled every STEP over WINDOW, and the window is at least this much covered (start-up grace).
WINDOW: Final = "15m"
STEP: Final = "1m"
WINDOW_STEPS: Final = 15
MIN_COVERAGE: Final = 0.8
# GPUs allocated and no training step for this long: idle.
IDLE_SECONDS: Final = 600
# Suspended for idleness this many times in a week: a pattern, not an accident.
IDLE_AGAIN_TIMES: Final = 3
SUSPENDED_FOR_IDLENESS: Final = f'action="{ActionKind.SUSPEND}", state="Done"'
BY_JOB: Final = "by (namespace, trainingjob)"
ON_JOB: Final = "on (namespace, trainingjob)"


def sustained(expr: str, condition: str, alert: str, by: str) -> str:
    """`expr` satisfies `condition` (e.g. `< bool 50`) in >= 90 % of a well-covered window's samples.

    A subquery samples `expr` every STEP; `avg_over_time` of the 0/1 comparison is the share of
    samples that satisfy it, `count_over_time` how many samples exist at all, so a job that started
    a few minutes ago (or whose telemetry has gaps) is not judged on a sliver of a window. With the
    operator's hysteresis: once `alert` fires for these labels (`by`), it holds until the share
    drops under 50 %, so a job hovering around 90 % does not flap.
    """
    share = f"avg_over_time(({expr} {condition})[{WINDOW}:{STEP}])"
    covered = f"count_over_time(({expr})[{WINDOW}:{STEP}])"
    firing = f'ALERTS{{alertname="{alert}", alertstate="firing"}}'
    return (
        f"({share} >= {SUSTAINED_SHARE:g} or {share} >= {RELEASE_SHARE:g} and on ({by}) {firing})"
        f" and {covered} >= {MIN_COVERAGE * WINDOW_STEPS:g}"
    )


def job_gpu_utilization() -> str:
    """Per TrainingJob, the mean utilization of its GPUs (the operator's own query, gpuwise.diagnose)."""
    return f"avg {BY_JOB} ({with_trainingjob(sel(catalog.GPU_UTIL))})"


def job_utilization_threshold() -> str:
    """Per TrainingJob, its own utilization threshold (the operator's gauge), or the default without one.

    `or` keeps the gauge where it exists and falls back, per job the telemetry knows, to
    UNDERUSED_PERCENT: jobs of a stopped operator, or workloads that are not TrainingJobs.
    """
    own = f"max {BY_JOB} ({sel(catalog.JOB_GPU_UTIL_THRESHOLD)})"
    return f"({own} or on (namespace, trainingjob) {job_gpu_utilization()} * 0 + {UNDERUSED_PERCENT})"


def worker_step_seconds() -> str:
    """Per worker pod, its mean step time over the last 5 minutes."""
    by = "by (namespace, trainingjob, pod)"
    total = rate(catalog.STEP_DURATION, "5m", suffix="_sum")
    count = rate(catalog.STEP_DURATION, "5m", suffix="_count")
    return f"sum {by} ({total}) / sum {by} ({count})"


def engine_finding(kind: str) -> str:
    """Per TrainingJob, the confidence of the operator's `kind` finding, while it holds it."""
    matcher = f'kind="{kind}"'
    return f"max {BY_JOB} ({sel(catalog.JOB_FINDING, matcher)})"


def efficiency() -> RuleGroup:
    """Underused, idle and straggling jobs, and every finding the operator holds.

    Underutilization and idleness are computed from the telemetry, not from the operator's
    gauges: they then work in every mode (Observe publishes no findings), without the operator
    running, and on the raw samples, which is what "sustained" is about (the operator's
    `gpuwise_job_gpu_utilization_percent` is a window mean: a mean cannot tell a bursty job from a
    sustained one). A job that never made a step has no last-step series; it is idle when its
    sidecars have reported its GPUs, under its utilization threshold, over a well-covered window
    (the diagnosis' Idle rule, gpuwise.diagnose.rules.idle).

    Stragglers are the operator's: a worker is one when it slowed against its own baseline and its
    peers (gpuwise.diagnose.straggler), which PromQL cannot follow — comparing each worker with its
    job's median alone fires on a worker that has always been a little slower (the milder
    SlowWorker finding), and following it against its own past needs the baseline the operator
    carries across cycles. So `GpuwiseJobStraggler` fires while the operator holds a Straggler
    finding, and names the job's slowest worker pod now (step time over the job's median).

    Alerts on the operator's gauges (`GpuwiseJobStraggler`, `GpuwiseJobFinding`) need its scrape
    to honour the gauges' `namespace` label, the TrainingJob's (ServiceMonitor `honorLabels:
    true`), or Prometheus keeps it as `exported_namespace` and sets `namespace` to the operator's.
    """
    job = "{{ $labels.namespace }}/{{ $labels.trainingjob }}"
    ratio = f"({worker_step_seconds()}) / {ON_JOB} group_left quantile {BY_JOB} (0.5, {worker_step_seconds()})"
    last_step = f"max {BY_JOB} ({sel(catalog.LAST_STEP)})"
    gpus = f"count {BY_JOB} ({with_trainingjob(sel(catalog.GPU_UTIL))})"
    underused = f"< bool {ON_JOB} {job_utilization_threshold()}"
    never_stepped = (
        f"({gpus} unless {ON_JOB} {last_step}) and {ON_JOB} "
        f"({sustained(job_gpu_utilization(), underused, 'GpuwiseJobIdle', 'namespace, trainingjob')})"
    )
    return RuleGroup(
        "gpuwise-efficiency",
        (
            Alert(
                "GpuwiseJobUnderutilized",
                sustained(job_gpu_utilization(), underused, "GpuwiseJobUnderutilized", "namespace, trainingjob"),
                "warning",
                f"TrainingJob {job} keeps its GPUs under its utilization threshold",
                f"The job's mean GPU utilization was below its spec.efficiency.thresholds.gpuUtilization "
                f"({UNDERUSED_PERCENT} % where the operator does not export it) in at least "
                f"{SUSTAINED_SHARE:.0%} of the last {WINDOW}'s samples. `kubectl describe tj` shows gpuwise's "
                "diagnosis and the recommended change.",
            ),
            Alert(
                "GpuwiseJobIdle",
                f"(time() - {last_step} > {IDLE_SECONDS} or {ON_JOB} {never_stepped}) and {ON_JOB} {gpus}",
                "warning",
                f"TrainingJob {job} holds GPUs but has made no training step for {IDLE_SECONDS // 60} minutes",
                "The job's GPUs are allocated and its sidecars report no new step (or none at all, while its "
                f"GPUs stayed under its utilization threshold for the last {WINDOW}): it is stuck (a hung "
                "collective, a deadlocked DataLoader) or idling between runs. Its GPUs could go to another job.",
            ),
            Alert(
                "GpuwiseJobStraggler",
                f"topk {BY_JOB} (1, {ratio}) and {ON_JOB} {engine_finding(FindingKind.STRAGGLER)}",
                "warning",
                f"worker {{{{ $labels.pod }}}} of TrainingJob {job} is a straggler",
                "gpuwise finds a worker of this job slowed down against its own baseline and its peers, and "
                "still slow (the Straggler finding); this pod has the job's slowest steps now. Synchronous "
                "steps wait for it: look at its node (throttling, a noisy neighbour, a slow link) or "
                "reschedule it. `kubectl describe tj` names the worker.",
            ),
            Alert(
                "GpuwiseJobKeepsGoingIdle",
                f"sum {BY_JOB} ({counted(catalog.ACTION_TRANSITIONS, '7d', SUSPENDED_FOR_IDLENESS)}) "
                f">= {IDLE_AGAIN_TIMES}",
                "info",
                f"TrainingJob {job} was suspended for idleness {IDLE_AGAIN_TIMES} times this week",
                "gpuwise suspended this job for holding its GPUs with no training step, resumed, and it went idle "
                "again: whoever resumes it may be waiting on something else (data, a review, a notebook). "
                "A smaller GPU share, a queue (Kueue) or a shorter spec.efficiency.idle.after may serve it better.",
            ),
            Alert(
                "GpuwiseJobFinding",
                f"max by (namespace, trainingjob, kind) ({sel(catalog.JOB_FINDING)})",
                "info",
                f"gpuwise finds {{{{ $labels.kind }}}} in TrainingJob {job}",
                "The operator's diagnosis holds this finding (it is already sustained over the job's window); "
                "`kubectl describe tj` shows the evidence and the recommended change.",
            ),
        ),
    )


# What the chart ships, in order.
RULE_GROUPS: Final[tuple[RuleGroup, ...]] = (exporter_health(), operator_health(), efficiency())


def rule_file(groups: tuple[RuleGroup, ...] = RULE_GROUPS) -> dict[str, Any]:
    """A Prometheus rule file (also the `spec` of a PrometheusRule)."""
    return {"groups": [group.to_group() for group in groups]}
