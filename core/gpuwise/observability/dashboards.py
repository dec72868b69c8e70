"""Grafana dashboards, as data derived from the metric catalog.

Two dashboards ship with the chart, as ConfigMaps the Grafana sidecar picks up:

* **gpuwise / Cluster overview**: GPUs in training pods, how busy they are, GPU-hours allocated
  against used, the jobs that waste the most, the operator's findings, recommended actions and
  actions taken, and the health of the exporters.
* **gpuwise / Training job**: one TrainingJob's workers: utilization, SM and tensor activity,
  memory, power, step time, throughput, time waiting for input, the input pipeline's settings, and
  what the operator finds and recommends (the `gpuwise_job_*` gauges of its /metrics).

NVIDIA's dcgm-exporter dashboard (Grafana 12239) ships beside them unchanged: the sidecar exposes
the DCGM names it queries. Every target here is tested against a real Prometheus scraping
simulated sidecars (tests/chart/test_dashboards.py); a target marked `quiet` (error counts, the
operator's findings) is empty on a healthy fleet and is only required to parse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

from gpuwise.metrics import Metric, catalog
from gpuwise.metrics.promql import DEVICE_IDENTITY, SIDECAR_JOB, counted, rate, sel, with_trainingjob

PanelKind = Literal["timeseries", "stat", "table", "text"]
DATASOURCE: Final = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION: Final = 39
GRID_WIDTH: Final = 24

# Grafana unit ids for the catalog's units.
_UNITS: Final = {
    "%": "percent",
    "ratio": "percentunit",
    "MiB": "mbytes",
    "bytes": "bytes",
    "W": "watt",
    "C": "celsius",
    "MHz": "rotmhz",
    "seconds": "s",
    "B/s": "Bps",
}


def unit(metric: Metric) -> str:
    return _UNITS.get(metric.unit, "short")


@dataclass(frozen=True, slots=True)
class Target:
    expr: str
    legend: str = ""
    instant: bool = False
    quiet: bool = False  # may be empty when all is well (error counts): tests only parse it


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    kind: PanelKind
    targets: tuple[Target, ...] = ()
    unit: str = "short"
    width: int = 12
    height: int = 8
    description: str = ""
    text: str = ""  # markdown, for text panels
    decimals: int | None = None
    max: float | None = None


@dataclass(frozen=True, slots=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    label: str
    query: str = ""  # label_values(...); empty for the data source variable
    multi: bool = False
    include_all: bool = False
    all_value: str | None = None


@dataclass(frozen=True, slots=True)
class Dashboard:
    uid: str
    title: str
    description: str
    variables: tuple[Variable, ...]
    rows: tuple[Row, ...]
    tags: tuple[str, ...] = ("gpuwise", "gpu")
    links: tuple[dict[str, Any], ...] = field(default=())

    @property
    def file_name(self) -> str:
        return f"{self.uid}.json"

    def targets(self) -> list[tuple[Panel, Target]]:
        return [(panel, target) for row in self.rows for panel in row.panels for target in panel.targets]

    def to_json(self) -> dict[str, Any]:
        panels: list[dict[str, Any]] = []
        y = 0
        next_id = 1
        for row in self.rows:
            panels.append(
                {
                    "type": "row",
                    "id": next_id,
                    "title": row.title,
                    "collapsed": False,
                    "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y},
                    "panels": [],
                }
            )
            next_id += 1
            y += 1
            x, line_height = 0, 0
            for panel in row.panels:
                if x + panel.width > GRID_WIDTH:
                    x, y, line_height = 0, y + line_height, 0
                panels.append(_panel(panel, next_id, {"h": panel.height, "w": panel.width, "x": x, "y": y}))
                next_id += 1
                x += panel.width
                line_height = max(line_height, panel.height)
            y += line_height
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": list(self.tags),
            "editable": True,
            "graphTooltip": 1,
            "refresh": "30s",
            "schemaVersion": SCHEMA_VERSION,
            "time": {"from": "now-6h", "to": "now"},
            "timepicker": {},
            "timezone": "",
            "version": 1,
            "links": list(self.links),
            "annotations": {"list": []},
            "templating": {"list": [_variable(v) for v in self.variables]},
            "panels": panels,
        }


def _panel(panel: Panel, panel_id: int, grid: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": panel.kind,
        "id": panel_id,
        "title": panel.title,
        "description": panel.description,
        "gridPos": grid,
    }
    if panel.kind == "text":
        out["options"] = {"mode": "markdown", "content": panel.text}
        return out
    out["datasource"] = DATASOURCE
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.decimals is not None:
        defaults["decimals"] = panel.decimals
    if panel.max is not None:
        defaults["min"], defaults["max"] = 0, panel.max
    out["fieldConfig"] = {"defaults": defaults, "overrides": []}
    out["targets"] = [
        {
            "datasource": DATASOURCE,
            "refId": chr(ord("A") + index),
            "expr": target.expr,
            "legendFormat": target.legend or "__auto",
            "range": not target.instant,
            "instant": target.instant,
            **({"format": "table"} if panel.kind == "table" else {}),
        }
        for index, target in enumerate(panel.targets)
    ]
    if panel.kind == "stat":
        out["options"] = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "textMode": "auto",
        }
    elif panel.kind == "table":
        out["transformations"] = [{"id": "merge", "options": {}}]
        out["options"] = {"showHeader": True}
    else:
        out["options"] = {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["mean", "max"]}}
    return out


def _variable(variable: Variable) -> dict[str, Any]:
    if not variable.query:
        return {
            "name": variable.name,
            "label": variable.label,
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
            "refresh": 1,
        }
    out: dict[str, Any] = {
        "name": variable.name,
        "label": variable.label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": variable.query,
        "query": variable.query,
        "refresh": 2,  # on time range change: jobs come and go
        "sort": 1,
        "multi": variable.multi,
        "includeAll": variable.include_all,
        "current": {},
        "hide": 0,
    }
    if variable.all_value is not None:
        out["allValue"] = variable.all_value
    return out


# --- selectors shared by the panels ------------------------------------------------------------
NS: Final = 'namespace=~"$namespace"'
JOB: Final = 'trainingjob=~"$trainingjob"'
POD: Final = 'pod=~"$pod"'
RATE: Final = "$__rate_interval"
# Hours per subquery step, to integrate a per-GPU value over the dashboard's time range.
_STEP_HOURS: Final = "$__interval_ms / 3600000"


def _gpus(*matchers: str) -> str:
    """One series of value 1 per GPU (or MIG instance), however many sidecars report it."""
    return f"group by ({DEVICE_IDENTITY}) ({sel(catalog.FB_USED, *matchers)})"


def _busy(*matchers: str) -> str:
    """Per GPU, the share of time it was busy (0-1)."""
    return f"max by ({DEVICE_IDENTITY}) ({sel(catalog.GPU_UTIL, *matchers)}) / 100"


def _gpu_hours(per_gpu: str) -> str:
    return f"sum(sum_over_time(({per_gpu})[$__range:$__interval])) * {_STEP_HOURS}"


def _wait_share(by: str, *matchers: str) -> str:
    wait = rate(catalog.DATA_WAIT, RATE, *matchers)
    step = rate(catalog.STEP_DURATION, RATE, *matchers, suffix="_sum")
    return f"sum by ({by}) ({wait}) / sum by ({by}) ({step})" if by else f"sum({wait}) / sum({step})"


def cluster_overview() -> Dashboard:
    idle = f"max_over_time({sel(catalog.GPU_UTIL, NS)}[10m])"
    waste = with_trainingjob(f"(100 - {sel(catalog.GPU_UTIL, NS)}) / 100", NS)
    util_by_job = with_trainingjob(sel(catalog.GPU_UTIL, NS), NS)
    fleet = Row(
        "Fleet",
        (
            Panel(
                "GPUs in training pods",
                "stat",
                (Target(f"count({_gpus(NS)})"),),
                width=4,
                height=5,
                description="GPUs (or MIG instances) that a gpuwise sidecar reports on.",
            ),
            Panel(
                "Idle GPUs",
                "stat",
                (Target(f"count(max by ({DEVICE_IDENTITY}) ({idle}) < 5) or vector(0)"),),
                width=4,
                height=5,
                description="GPUs whose utilization stayed under 5 % for the last 10 minutes.",
            ),
            Panel(
                "Average GPU utilization",
                "stat",
                (Target(f"avg({_busy(NS)})"),),
                unit="percentunit",
                width=4,
                height=5,
                max=1,
            ),
            Panel(
                "GPU-hours allocated",
                "stat",
                (Target(_gpu_hours(_gpus(NS)), instant=True),),
                width=4,
                height=5,
                decimals=1,
                description="GPU-hours held by training pods over the dashboard's time range.",
            ),
            Panel(
                "GPU-hours used",
                "stat",
                (Target(_gpu_hours(_busy(NS)), instant=True),),
                width=4,
                height=5,
                decimals=1,
                description="GPU-hours in which a kernel ran (utilization x time) over the time range.",
            ),
            Panel(
                "Efficiency",
                "stat",
                (Target(f"({_gpu_hours(_busy(NS))}) / ({_gpu_hours(_gpus(NS))})", instant=True),),
                unit="percentunit",
                width=4,
                height=5,
                max=1,
                description="GPU-hours used / GPU-hours allocated.",
            ),
            Panel(
                "GPUs allocated vs. busy",
                "timeseries",
                (
                    Target(f"count({_gpus(NS)})", legend="allocated"),
                    Target(f"sum({_busy(NS)})", legend="busy (GPU equivalents)"),
                ),
                width=12,
            ),
            Panel(
                "GPU utilization by job",
                "timeseries",
                (Target(f"avg by (namespace, trainingjob) ({util_by_job})", legend="{{namespace}}/{{trainingjob}}"),),
                unit="percent",
                width=12,
                max=100,
            ),
        ),
    )
    jobs = Row(
        "Jobs",
        (
            Panel(
                "Top wasting jobs",
                "table",
                (
                    Target(
                        f"topk(10, sum by (namespace, trainingjob) (sum_over_time(({waste})[$__range:$__interval]))"
                        f" * {_STEP_HOURS})",
                        instant=True,
                    ),
                ),
                decimals=2,
                description="Idle GPU-hours (allocated but not busy) per TrainingJob over the time range.",
            ),
            Panel(
                "Time waiting for input, by job",
                "timeseries",
                (Target(_wait_share("namespace, trainingjob", NS), legend="{{namespace}}/{{trainingjob}}"),),
                unit="percentunit",
                max=1,
                description="Share of step time the training loop waited for its next batch: high means "
                "data-loader bound.",
            ),
            Panel(
                "Throughput by job",
                "timeseries",
                (
                    Target(
                        f"sum by (namespace, trainingjob) ({rate(catalog.SAMPLES, RATE, NS)})",
                        legend="{{namespace}}/{{trainingjob}}",
                    ),
                ),
                description="Training samples per second.",
            ),
            Panel(
                "Active findings",
                "table",
                (
                    Target(
                        f"max by (namespace, trainingjob, kind) ({sel(catalog.JOB_FINDING, NS)})",
                        instant=True,
                        quiet=True,
                    ),
                ),
                unit="percentunit",
                decimals=2,
                description="What the operator finds in each running TrainingJob, with its confidence (empty when "
                "all is well). `kubectl describe tj NAME -n NS` shows the evidence.",
            ),
            Panel(
                "Recommended actions",
                "table",
                (
                    Target(
                        f"max by (namespace, trainingjob, action, finding) ({sel(catalog.JOB_RECOMMENDATION, NS)})",
                        instant=True,
                        quiet=True,
                    ),
                ),
                description="The changes the operator recommends (Recommend and Enforce modes), by finding; "
                "the job's status.recommendations has the concrete values.",
            ),
            Panel(
                "Jobs with a finding, by kind",
                "timeseries",
                (Target(f"count by (kind) ({sel(catalog.JOB_FINDING, NS)})", legend="{{kind}}", quiet=True),),
                description="How many running TrainingJobs each kind of finding holds on, over time.",
            ),
            Panel(
                "Actions taken",
                "table",
                (
                    Target(
                        "round(sum by (namespace, trainingjob, action, state) "
                        f"({counted(catalog.ACTION_TRANSITIONS, '$__range', NS)})) > 0",
                        instant=True,
                        quiet=True,
                    ),
                ),
                description="Enforce mode: how many actions entered each state (Planned, WaitingForCheckpoint, "
                "Applying, Verifying, Done, RolledBack, Failed, Stopped; DryRun in dry-run mode) over the time range. "
                "The job's status.actions and Events tell each one's story.",
            ),
            Panel(
                "GPU-hours reclaimed from idle jobs",
                "table",
                (
                    Target(
                        "round(sum by (namespace) "
                        f"({counted(catalog.RECLAIMED_GPU_SECONDS, '$__range', NS)}) / 3600, 0.1) > 0",
                        instant=True,
                        quiet=True,
                    ),
                ),
                description="Enforce mode with Suspend: GPU-hours freed over the time range by suspending jobs that "
                "stayed idle for their spec.efficiency.idle.after (their GPUs times the time they stayed suspended).",
            ),
        ),
    )
    health = Row(
        "Exporters",
        (
            Panel(
                "Sidecars up",
                "stat",
                (Target(f'count(up{{job="{SIDECAR_JOB}", {NS}}} == 1) or vector(0)'),),
                width=6,
                height=6,
            ),
            Panel(
                "NVML sample errors",
                "timeseries",
                (
                    Target(
                        f"sum by (reason, field) ({rate(catalog.SAMPLE_ERRORS, RATE, NS)})",
                        legend="{{field}}: {{reason}}",
                        quiet=True,
                    ),
                ),
                width=6,
                height=6,
                description="Readings the sidecars could not take (not_supported on MIG or older GPUs is normal).",
            ),
            Panel(
                "XID errors",
                "timeseries",
                (
                    Target(
                        f"sum by (Hostname, gpu, xid) ({rate(catalog.XID_EVENTS, RATE, NS)})",
                        legend="GPU {{gpu}}: XID {{xid}}",
                        quiet=True,
                    ),
                ),
                width=6,
                height=6,
            ),
            Panel(
                "Dropped step events",
                "timeseries",
                (
                    Target(
                        f"sum by (reason) ({rate(catalog.EVENTS_DROPPED, RATE, NS)})",
                        legend="{{reason}}",
                        quiet=True,
                    ),
                ),
                width=6,
                height=6,
            ),
        ),
    )
    namespace = Variable(
        "namespace", "Namespace", f"label_values({sel(catalog.SIDECAR_INFO)}, namespace)", True, True, ".*"
    )
    return Dashboard(
        uid="gpuwise-cluster",
        title="gpuwise / Cluster overview",
        description="How well the cluster's training jobs use their GPUs, from gpuwise's telemetry sidecars.",
        variables=(Variable("datasource", "Data source"), namespace),
        rows=(fleet, jobs, health),
    )


def job_detail() -> Dashboard:
    devices = (NS, POD)
    steps = (NS, JOB, POD)

    def per_gpu(metric: Metric, title: str, **extra: Any) -> Panel:
        return Panel(title, "timeseries", (Target(sel(metric, *devices), legend="{{pod}} GPU {{gpu}}"),), **extra)

    summary = Row(
        "Summary",
        (
            Panel("Workers", "stat", (Target(f"count({sel(catalog.SIDECAR_INFO, NS, JOB)})"),), width=4, height=5),
            Panel("GPUs", "stat", (Target(f"count({_gpus(*devices)})"),), width=4, height=5),
            Panel(
                "GPU utilization",
                "stat",
                (Target(f"avg({sel(catalog.GPU_UTIL, *devices)})"),),
                unit="percent",
                width=4,
                height=5,
                max=100,
            ),
            Panel(
                "Throughput",
                "stat",
                (Target(f"sum({rate(catalog.SAMPLES, RATE, *steps)})"),),
                width=4,
                height=5,
                description="Training samples per second, all workers.",
            ),
            Panel(
                "Time waiting for input",
                "stat",
                (Target(_wait_share("", *steps)),),
                unit="percentunit",
                width=4,
                height=5,
                max=1,
            ),
            Panel(
                "Active findings",
                "stat",
                (Target(f"count({sel(catalog.JOB_FINDING, NS, JOB)}) or vector(0)"),),
                width=4,
                height=5,
                description="Findings the operator holds on this job now; see the Findings row and "
                "`kubectl describe tj $trainingjob -n $namespace`.",
            ),
        ),
    )
    gpu = Row(
        "GPUs",
        (
            per_gpu(catalog.GPU_UTIL, "GPU utilization", unit="percent", max=100),
            per_gpu(
                catalog.SM_ACTIVE,
                "SM activity",
                unit="percentunit",
                max=1,
                description="Share of cycles an SM has a warp assigned (Hopper and later: NVML GPM).",
            ),
            per_gpu(catalog.TENSOR_ACTIVE, "Tensor core activity", unit="percentunit", max=1),
            Panel(
                "Framebuffer memory used",
                "timeseries",
                (
                    Target(
                        f"{sel(catalog.FB_USED, *devices)} / ({sel(catalog.FB_USED, *devices)}"
                        f" + {sel(catalog.FB_FREE, *devices)})",
                        legend="{{pod}} GPU {{gpu}}",
                    ),
                ),
                unit="percentunit",
                max=1,
                description="Low memory use at high utilization: a larger batch would fit.",
            ),
            per_gpu(catalog.POWER_USAGE, "Power", unit=unit(catalog.POWER_USAGE)),
            per_gpu(catalog.SM_CLOCK, "SM clock", unit=unit(catalog.SM_CLOCK), description="Throttling shows here."),
        ),
    )
    step_bucket = rate(catalog.STEP_DURATION, RATE, *steps, suffix="_bucket")
    step_sum = rate(catalog.STEP_DURATION, RATE, *steps, suffix="_sum")
    step_count = rate(catalog.STEP_DURATION, RATE, *steps, suffix="_count")
    training = Row(
        "Training",
        (
            Panel(
                "Step time",
                "timeseries",
                (
                    Target(f"histogram_quantile(0.5, sum by (le) ({step_bucket}))", legend="p50"),
                    Target(f"histogram_quantile(0.9, sum by (le) ({step_bucket}))", legend="p90"),
                ),
                unit="s",
            ),
            Panel(
                "Mean step time by worker",
                "timeseries",
                (Target(f"sum by (pod) ({step_sum}) / sum by (pod) ({step_count})", legend="{{pod}}"),),
                unit="s",
                description="A worker slower than the others is a straggler: every step waits for it.",
            ),
            Panel(
                "Throughput by worker",
                "timeseries",
                (Target(f"sum by (pod) ({rate(catalog.SAMPLES, RATE, *steps)})", legend="{{pod}}"),),
                description="Training samples per second.",
            ),
            Panel(
                "Time waiting for input by worker",
                "timeseries",
                (Target(_wait_share("pod", *steps), legend="{{pod}}"),),
                unit="percentunit",
                max=1,
                description="Share of step time spent waiting for the next batch: high means data-loader bound.",
            ),
            Panel(
                "Seconds since the last step",
                "timeseries",
                (Target(f"time() - {sel(catalog.LAST_STEP, *steps)}", legend="{{pod}} rank {{local_rank}}"),),
                unit="s",
                description="Grows while a worker makes no progress (stuck, or idle between runs).",
            ),
            Panel(
                "Input pipeline and precision",
                "table",
                tuple(
                    Target(f"max by (pod, local_rank) ({sel(metric, *steps)})", instant=True)
                    for metric in (catalog.BATCH_SIZE, catalog.NUM_WORKERS, catalog.PIN_MEMORY, catalog.AUTOCAST)
                ),
                description="DataLoader batch_size, num_workers, pin_memory, and torch.autocast (1 = on), "
                "per training process.",
            ),
        ),
    )
    health = Row(
        "Exporters",
        (
            Panel(
                "NVML sample errors",
                "timeseries",
                (
                    Target(
                        f"sum by (pod, field, reason) ({rate(catalog.SAMPLE_ERRORS, RATE, *steps)})",
                        legend="{{pod}} {{field}}: {{reason}}",
                        quiet=True,
                    ),
                ),
                width=8,
            ),
            Panel(
                "XID errors",
                "timeseries",
                (
                    Target(
                        f"sum by (pod, gpu, xid) ({rate(catalog.XID_EVENTS, RATE, *steps)})",
                        legend="{{pod}} GPU {{gpu}}: XID {{xid}}",
                        quiet=True,
                    ),
                ),
                width=8,
            ),
            Panel(
                "Dropped step events",
                "timeseries",
                (
                    Target(
                        f"sum by (pod, reason) ({rate(catalog.EVENTS_DROPPED, RATE, *steps)})",
                        legend="{{pod}}: {{reason}}",
                        quiet=True,
                    ),
                ),
                width=8,
            ),
        ),
    )
    job = (NS, JOB)
    findings = Row(
        "Findings",
        (
            Panel(
                "Findings",
                "timeseries",
                (Target(f"max by (kind) ({sel(catalog.JOB_FINDING, *job)})", legend="{{kind}}", quiet=True),),
                unit="percentunit",
                max=1,
                description="Each finding the operator holds on this job, with its confidence, while it holds.",
            ),
            Panel(
                "Recommended actions",
                "table",
                (
                    Target(
                        f"max by (action, finding) ({sel(catalog.JOB_RECOMMENDATION, *job)})", instant=True, quiet=True
                    ),
                ),
                description="What the operator recommends, by finding; status.recommendations has the changes.",
            ),
            Panel(
                "Operator's window: GPU utilization and input wait",
                "timeseries",
                (
                    Target(f"max({sel(catalog.JOB_GPU_UTIL, *job)}) / 100", legend="GPU utilization", quiet=True),
                    Target(f"max({sel(catalog.JOB_DATA_WAIT, *job)})", legend="waiting for input", quiet=True),
                ),
                unit="percentunit",
                max=1,
                width=24,
                description="The means over the job's efficiency window that the operator's diagnosis works from.",
            ),
        ),
    )
    info = sel(catalog.SIDECAR_INFO)
    return Dashboard(
        uid="gpuwise-job",
        title="gpuwise / Training job",
        description="One TrainingJob's workers: GPU activity, memory, step time and input waits.",
        variables=(
            Variable("datasource", "Data source"),
            Variable("namespace", "Namespace", f"label_values({info}, namespace)"),
            Variable("trainingjob", "TrainingJob", f"label_values({sel(catalog.SIDECAR_INFO, NS)}, trainingjob)"),
            Variable("pod", "Worker pod", f"label_values({sel(catalog.SIDECAR_INFO, NS, JOB)}, pod)", True, True),
        ),
        rows=(summary, gpu, training, health, findings),
        links=({"title": "Cluster overview", "type": "link", "url": "/d/gpuwise-cluster"},),
    )


# What the chart ships (file name -> dashboard).
DASHBOARDS: Final[tuple[Dashboard, ...]] = (cluster_overview(), job_detail())
