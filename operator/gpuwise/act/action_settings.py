"""Operator-wide limits on actions: what a platform team sets once for the whole cluster.

They are part of the operator settings (`actions:` in the config file, the chart's ConfigMap) and
validated at start-up, so a malformed budget or cron schedule stops the operator with a message
that names the key, instead of silently allowing (or forbidding) every action later.
"""

from __future__ import annotations

from typing import Final

from croniter import croniter
from pydantic import Field, PrivateAttr, field_validator, model_validator

from gpuwise.act.node_settings import NodeActionSettings
from gpuwise.api.base import ApiModel, Duration
from gpuwise.api.kinds import ActionKind
from gpuwise.diagnose.gpu_classes import SizedGpuClass
from gpuwise.hardware.gpu_specs import GPU_PRODUCT_LABEL, gpu_spec, known_models

# A budget counts jobs: "3", or a share of the running TrainingJobs it covers: "10%".
BUDGET_PATTERN: Final = r"^([0-9]+|[0-9]{1,3}%)$"
EVERY_NAMESPACE: Final = "*"


class Budget(ApiModel):
    """At most `jobs` TrainingJobs disrupted at once, like Karpenter's disruption budgets.

    Without `namespace` it counts the whole cluster; `namespace: "*"` applies it to each namespace
    on its own; a name applies it to that namespace only. With `schedule` (cron, UTC) and
    `duration`, it holds only from each time the schedule fires until `duration` later, e.g.
    `jobs: "0"`, `schedule: "0 9 * * 1-5"`, `duration: 8h` forbids actions in office hours.
    """

    jobs: str = Field(pattern=BUDGET_PATTERN, description='A count ("2") or a share of running jobs ("10%").')
    namespace: str | None = Field(default=None, min_length=1)
    schedule: str | None = Field(default=None, description="Cron expression (UTC) that opens the budget's window.")
    duration: Duration | None = Field(default=None, description="How long the window stays open after it opens.")

    @field_validator("jobs")
    @classmethod
    def _percentage(cls, value: str) -> str:
        if value.endswith("%") and int(value[:-1]) > 100:
            raise ValueError(f"{value!r}: a percentage must be at most 100%")
        return value

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None and not croniter.is_valid(value):
            raise ValueError(f"{value!r} is not a cron expression (example: '0 9 * * 1-5')")
        return value

    @model_validator(mode="after")
    def _window(self) -> Budget:
        if (self.schedule is None) != (self.duration is None):
            raise ValueError("schedule and duration go together: set both, or neither for an always-on budget")
        return self

    def allowed(self, running: int) -> int:
        """How many of `running` jobs may be disrupted at once (a share rounds up, as Karpenter's does)."""
        if self.jobs.endswith("%"):
            return -(-running * int(self.jobs[:-1]) // 100)
        return int(self.jobs)


class GpuClass(ApiModel):
    """A kind of GPU node a job can be moved to (Reschedule, from the OversizedGPU finding).

    Its GPU model must be one gpuwise has datasheet figures for (`gpuwise.hardware.gpu_specs`):
    the finding sizes the job against its memory and peaks, and a class it cannot size could never
    be recommended, so such a class is refused at start-up rather than ignored. The model is
    `gpuModel`, or else what the node selector's `nvidia.com/gpu.product` (NVIDIA's GPU feature
    discovery label) says.
    """

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    node_selector: dict[str, str] = Field(min_length=1)
    gpu_model: str | None = Field(
        default=None,
        min_length=1,
        description="The GPU model of the class's nodes (NVML's name, or the nvidia.com/gpu.product label value); "
        "default: the node selector's nvidia.com/gpu.product.",
    )
    _sized: SizedGpuClass = PrivateAttr()

    @model_validator(mode="after")
    def _known_model(self) -> GpuClass:
        model = self.gpu_model or self.node_selector.get(GPU_PRODUCT_LABEL)
        if model is None:
            raise ValueError(
                f"GPU class {self.name}: name its GPU model in gpuModel, or select its nodes by {GPU_PRODUCT_LABEL}"
            )
        spec = gpu_spec(model)
        if spec is None:
            raise ValueError(
                f"GPU class {self.name}: no datasheet figures for GPU model {model!r}; known: {known_models()}"
            )
        self._sized = SizedGpuClass(self.name, spec, dict(self.node_selector))
        return self

    @property
    def sized(self) -> SizedGpuClass:
        """The class as the OversizedGPU rule sizes jobs against it."""
        return self._sized


class ActionSettings(ApiModel):
    enabled: bool = Field(default=True, description="Act at all; false: Enforce-mode jobs only get recommendations.")
    kinds: list[ActionKind] = Field(
        default_factory=lambda: list(ActionKind),
        description="The actions the operator may take; the chart lists only those its RBAC grants.",
    )
    dry_run: bool = Field(default=False, description="Record what would be done (state DryRun) and do nothing.")
    cooldown: Duration = Field(default="30m", description="After an action on a job ends, wait this long.")
    max_actions_per_job: int = Field(default=3, ge=0, le=10, description="Actions on one job, ever (dry runs aside).")
    min_runtime: Duration = Field(default="10m", description="A job runs this long before its first action.")
    budgets: list[Budget] = Field(
        default_factory=lambda: [Budget(jobs="10%")], description="Most restrictive active budget wins."
    )
    verify_window: Duration = Field(
        default="10m", description="After the new Job runs, measure this long before judging the change."
    )
    worse_tolerance: float = Field(
        default=0.05, ge=0, lt=1, description="Revert when throughput falls by more than this fraction."
    )
    apply_timeout: Duration = Field(
        default="30m", description="How long a restarted job may take to run again before the action fails."
    )
    gpu_classes: list[GpuClass] = Field(
        default_factory=list,
        description="GPU classes (name, node selector, GPU model) Reschedule may move an oversized job to.",
    )
    nodes: NodeActionSettings = Field(
        default_factory=NodeActionSettings, description="MigRepartition and Pack: drains, MIG and time-slicing configs."
    )

    @field_validator("gpu_classes")
    @classmethod
    def _unique(cls, value: list[GpuClass]) -> list[GpuClass]:
        names = [c.name for c in value]
        if len(set(names)) != len(names):
            raise ValueError(f"gpu class names must not repeat: {names}")
        return value

    def sized_gpu_classes(self) -> tuple[SizedGpuClass, ...]:
        """The classes as the OversizedGPU rule sizes jobs against them."""
        return tuple(c.sized for c in self.gpu_classes)


def budget_name(budget: Budget) -> str:
    """How a budget is named in Events: its scope and share."""
    scope = "cluster" if budget.namespace is None else f"namespace {budget.namespace}"
    window = f" ({budget.schedule!r} for {budget.duration})" if budget.schedule else ""
    return f"{scope} budget {budget.jobs}{window}"
