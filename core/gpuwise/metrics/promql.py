"""Small PromQL builders over catalog metrics, so that no metric name is ever typed twice.

Only `Metric` records from `gpuwise.metrics` go in; the text that comes out is plain PromQL.
"""

from __future__ import annotations

from typing import Final

from gpuwise.metrics import Kind, Metric, catalog

# The `job` label the chart's PodMonitor gives every sidecar target (see templates/podmonitor.yaml).
SIDECAR_JOB: Final = "gpuwise-sidecar"
# The `job` label the chart's ServiceMonitor gives the operator's own /metrics target.
OPERATOR_JOB: Final = "gpuwise-operator"
# One GPU, or one MIG instance of it, anywhere in the cluster: the labels that tell devices apart.
DEVICE_IDENTITY: Final = "Hostname, UUID, GPU_I_ID"


def sel(metric: Metric, *matchers: str, suffix: str = "") -> str:
    """`name{matchers}`; `suffix` picks a histogram's `_bucket`, `_sum` or `_count` series."""
    if suffix and (metric.kind is not Kind.HISTOGRAM or suffix not in ("_bucket", "_sum", "_count")):
        raise ValueError(f"{metric.name} has no {suffix} series")
    body = ", ".join(matchers)
    return f"{metric.name}{suffix}{{{body}}}" if body else f"{metric.name}{suffix}"


def rate(metric: Metric, window: str, *matchers: str, suffix: str = "") -> str:
    if metric.kind is Kind.GAUGE:
        raise ValueError(f"rate() of the gauge {metric.name} is meaningless")
    return f"rate({sel(metric, *matchers, suffix=suffix)}[{window}])"


def increase(metric: Metric, window: str, *matchers: str) -> str:
    if metric.kind is not Kind.COUNTER:
        raise ValueError(f"increase() needs a counter, not {metric.kind} {metric.name}")
    return f"increase({sel(metric, *matchers)}[{window}])"


def counted(metric: Metric, window: str, *matchers: str) -> str:
    """Per series, how much a counter counted in `window`, a series born in it counted from zero.

    A labelled counter appears at its first count, already at 1, and `increase()` sees only what
    comes after its first sample: a series that did not exist at the window's start is taken at its
    highest value instead.
    """
    series = sel(metric, *matchers)
    return f"({increase(metric, window, *matchers)} and {series} offset {window}) or max_over_time({series}[{window}])"


def with_trainingjob(expr: str, *matchers: str, worker: bool = False) -> str:
    """Give per-pod series (such as dcgm-exporter's, which know only the pod) their TrainingJob label.

    `gpuwise_sidecar_info` carries the job labels of every sidecar: one series per pod. With
    `worker`, the series also get the pod's worker index.
    """
    info = sel(catalog.SIDECAR_INFO, *matchers)
    carried = "trainingjob, worker" if worker else "trainingjob"
    return f"{expr} * on (namespace, pod) group_left ({carried}) group by (namespace, pod, {carried}) ({info})"
