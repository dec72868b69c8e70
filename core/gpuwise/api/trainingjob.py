"""The TrainingJob resource (`gpuwise.io/v1alpha1`): what users write and what gpuwise reports.

Spec is the user's desired state and is never written by gpuwise; status is what gpuwise
observed and decided. The field names are a public contract: they follow Kubeflow's
TrainJob/PyTorchJob where a concept exists there (`numNodes`, `numProcPerNode`, `runPolicy`).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from gpuwise.api.base import (
    DURATION_PATTERN,
    LIST_SET,
    REASON_PATTERN,
    ApiModel,
    Duration,
    EnvVarName,
    Quantity,
    cel,
    list_map,
    parse_duration,
)
from gpuwise.api.core import (
    EnvFromSource,
    EnvList,
    FreeForm,
    MountList,
    NamedReference,
    PodSecurityContext,
    PullPolicy,
    ResourceRequirements,
    SecurityContext,
    Toleration,
    VolumeList,
)
from gpuwise.api.kinds import ActionKind
from gpuwise.api.overrides import JobOverrides
from gpuwise.wiring import API_GROUP, MAX_SAMPLE_INTERVAL_SECONDS, MIN_SAMPLE_INTERVAL_SECONDS

VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{API_GROUP}/{VERSION}"
KIND: Final = "TrainingJob"
PLURAL: Final = "trainingjobs"
SINGULAR: Final = "trainingjob"
SHORT_NAMES: Final = ("tj",)

_IMMUTABLE = "is immutable once the job runs: delete and re-create the TrainingJob to change it"
# An Indexed Job has at most 100,000 completions: one pod per node of the job.
MAX_NODES: Final = 100_000
# Prometheus answers a range query with at most 11,000 points: at the operator's 15 s step that is
# 45.8 h. A day leaves room for a finer step, and bounds what one job's window makes the operator read.
MAX_WINDOW: Final = "24h"


# --- spec -----------------------------------------------------------------------------------


class Trainer(ApiModel):
    """The training container, run once per node by torchrun-compatible environment."""

    image: str = Field(
        min_length=1, pattern=r"^\S+$", description="Container image of the training code (no blanks in a reference)."
    )
    image_pull_policy: PullPolicy | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: EnvList = Field(default_factory=list)
    env_from: list[EnvFromSource] = Field(default_factory=list)
    working_dir: str | None = None
    volume_mounts: MountList = Field(default_factory=list)
    num_nodes: int = Field(
        default=1, ge=1, le=MAX_NODES, description="Pods in the job, one per node (an Indexed Job's completions)."
    )
    num_proc_per_node: int = Field(default=1, ge=1, description="Processes torchrun starts per pod.")
    resources_per_node: ResourceRequirements = Field(
        default_factory=ResourceRequirements,
        description="Requests and limits of each pod's trainer, e.g. nvidia.com/gpu: 8.",
    )
    shm_size: Quantity | None = Field(
        default=None,
        description="Size of a memory-backed /dev/shm; DataLoader workers need more than the default.",
    )
    security_context: SecurityContext | None = Field(
        default=None,
        description="The trainer's securityContext, over gpuwise's restricted defaults; the operator's podSecurity "
        "setting says how far it may loosen them.",
    )


class GangScheduler(StrEnum):
    """The gang schedulers whose contract gpuwise follows (the README names the versions)."""

    VOLCANO = "Volcano"  # PodGroup scheduling.volcano.sh/v1beta1
    COSCHEDULING = "Coscheduling"  # scheduler-plugins' PodGroup scheduling.x-k8s.io/v1alpha1
    KAI = "KAI"  # NVIDIA KAI Scheduler's PodGroup scheduling.run.ai/v2alpha2


# The scheduler name each gang scheduler's pods must carry; coscheduling runs under whatever name
# the scheduler-plugins deployment was given, this being its chart's default.
GANG_SCHEDULER_NAMES: Final = {
    GangScheduler.VOLCANO: "volcano",
    GangScheduler.COSCHEDULING: "scheduler-plugins-scheduler",
    GangScheduler.KAI: "kai-scheduler",
}
_NO_QUEUE = "the queue names a Volcano or KAI queue: scheduler-plugins' coscheduling has none"
_KAI_QUEUE = "KAI Scheduler places a job only in a queue: name one"


class Gang(ApiModel):
    """Place all of the job's workers at once or none (gang scheduling), through a PodGroup.

    One field names the scheduler rather than a field per scheduler: a job has one scheduler, and
    gpuwise derives the rest of that scheduler's contract (its PodGroup kind, the scheduler name,
    the labels or annotations that tie the pods to the group) from it. The group's minimum member
    count is always `numNodes`: a torchrun rendezvous needs every worker.
    """

    scheduler: GangScheduler = Field(description="Volcano, Coscheduling (scheduler-plugins) or KAI.")
    queue: str | None = Field(
        default=None,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",  # a queue's name, and the value of KAI's queue label
        description="The Volcano or KAI queue of the PodGroup (Volcano: its default queue when left out; KAI: "
        "required).",
    )

    @model_validator(mode="after")
    def _queue_fits_the_scheduler(self) -> Gang:
        if self.queue is not None and self.scheduler is GangScheduler.COSCHEDULING:
            raise ValueError(_NO_QUEUE)
        if self.queue is None and self.scheduler is GangScheduler.KAI:
            raise ValueError(_KAI_QUEUE)
        return self

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                *cel("!has(self.queue) || self.scheduler != 'Coscheduling'", _NO_QUEUE)["x-kubernetes-validations"],
                *cel("has(self.queue) || self.scheduler != 'KAI'", _KAI_QUEUE)["x-kubernetes-validations"],
            ]
        }
    )


_SCHEDULER_CONFLICT = (
    "spec.pod.schedulerName conflicts with spec.pod.gang: leave it out, or give the gang scheduler's own "
    "(volcano for Volcano, kai-scheduler for KAI; any name your scheduler-plugins deployment runs as for Coscheduling)"
)
_SCHEDULER_CONFLICT_RULE = (
    "!has(self.gang) || !has(self.schedulerName) || self.gang.scheduler == 'Coscheduling' || "
    "self.schedulerName == (self.gang.scheduler == 'Volcano' ? 'volcano' : 'kai-scheduler')"
)


class PodSettings(ApiModel):
    """Pod-level settings passed to every worker pod."""

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    service_account_name: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    affinity: FreeForm | None = None
    volumes: VolumeList = Field(default_factory=list)
    image_pull_secrets: list[NamedReference] = Field(default_factory=list)
    priority_class_name: str | None = None
    scheduler_name: str | None = None
    runtime_class_name: str | None = None
    security_context: PodSecurityContext | None = Field(
        default=None,
        description="The pods' securityContext, over gpuwise's restricted defaults; the operator's podSecurity "
        "setting says how far it may loosen them.",
    )
    gang: Gang | None = Field(
        default=None,
        description="Gang scheduling: gpuwise creates the scheduler's PodGroup (minMember = numNodes) and ties the "
        "workers to it.",
    )

    @model_validator(mode="after")
    def _one_scheduler(self) -> PodSettings:
        if self.gang is None or self.scheduler_name is None or self.gang.scheduler is GangScheduler.COSCHEDULING:
            return self
        if self.scheduler_name != GANG_SCHEDULER_NAMES[self.gang.scheduler]:
            raise ValueError(_SCHEDULER_CONFLICT)
        return self

    def scheduler(self) -> str | None:
        """The schedulerName the pods get: the spec's, or the gang scheduler's own."""
        if self.scheduler_name is not None or self.gang is None:
            return self.scheduler_name
        return GANG_SCHEDULER_NAMES[self.gang.scheduler]


class RunPolicy(ApiModel):
    backoff_limit: int | None = Field(default=None, ge=0, description="Pod failures before the job fails.")
    active_deadline_seconds: int | None = Field(default=None, ge=1)
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0)
    suspend: bool = Field(default=False, description="Stop the pods (and start them again when false).")


class Checkpoint(ApiModel):
    """How gpuwise asks the job to checkpoint before it restarts it. Jobs without it are never restarted."""

    enabled: bool = False
    timeout_seconds: int = Field(default=300, ge=1)


class EfficiencyMode(StrEnum):
    OBSERVE = "Observe"  # metrics only
    RECOMMEND = "Recommend"  # findings and recommendations in status
    ENFORCE = "Enforce"  # recommendations applied within guardrails


class Thresholds(ApiModel):
    gpu_utilization: float = Field(
        default=50.0, ge=0, le=100, description="Below this GPU utilization (%) a job is underutilizing."
    )


class IntTunable(ApiModel):
    """A whole-number knob the job reads from an environment variable, with the bounds gpuwise keeps to."""

    env: EnvVarName
    min: int = Field(default=1, ge=0)
    max: int = Field(ge=0)

    @model_validator(mode="after")
    def _bounds(self) -> IntTunable:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        return self

    model_config = ConfigDict(json_schema_extra=cel("self.min <= self.max", "min must not exceed max"))


class SwitchTunable(ApiModel):
    """An on/off knob the job reads from an environment variable ("1" or "0")."""

    env: EnvVarName


class Tunables(ApiModel):
    """Which environment variables the job honours, so gpuwise can change them safely."""

    batch_size: IntTunable | None = None
    data_loader_workers: IntTunable | None = None
    gradient_accumulation_steps: IntTunable | None = None
    pin_memory: SwitchTunable | None = None
    amp: SwitchTunable | None = None
    keep_global_batch_size: bool = Field(
        default=False,
        description="When changing batch size, change gradient accumulation to keep the global batch.",
    )


def _longer_than_zero(path: str) -> dict[str, Any]:
    """The API server's half of parse_duration's refusal: the pattern alone takes `0s`."""
    return cel("duration(self) > duration('0s')", f"{path} must be longer than zero (examples: 90s, 15m, 1h30m)")


class IdleReclaim(ApiModel):
    """When gpuwise gives an idle job's GPUs back (the `Suspend` action, in Enforce mode)."""

    after: Duration = Field(
        default="1h",
        description="How long the job must stay Idle (no step and no GPU activity) before it is suspended.",
        max_length=32,
        json_schema_extra={"pattern": DURATION_PATTERN, **_longer_than_zero("spec.efficiency.idle.after")},
    )
    allow_without_checkpoint: bool = Field(
        default=False,
        description="Suspend it even without the checkpoint handshake (spec.checkpoint.enabled false): "
        "progress since its own last checkpoint is lost.",
    )


class Efficiency(ApiModel):
    mode: EfficiencyMode = EfficiencyMode.RECOMMEND
    window: Duration = Field(
        default="15m",
        description=f"How long a condition must hold to count, at most {MAX_WINDOW}.",
        max_length=32,  # bounds the cost of the API server's CEL rule too
        json_schema_extra={
            "pattern": DURATION_PATTERN,
            "x-kubernetes-validations": [
                *_longer_than_zero("spec.efficiency.window")["x-kubernetes-validations"],
                *cel(
                    f"duration(self) <= duration('{MAX_WINDOW}')",
                    f"spec.efficiency.window must be at most {MAX_WINDOW}",
                )["x-kubernetes-validations"],
            ],
        },
    )

    thresholds: Thresholds = Field(default_factory=Thresholds)
    actions: Annotated[list[ActionKind], Field(json_schema_extra=LIST_SET)] = Field(
        default_factory=list, description="Actions gpuwise may take in Enforce mode."
    )
    tunables: Tunables = Field(default_factory=Tunables)
    idle: IdleReclaim = Field(
        default_factory=IdleReclaim, description="Suspend an idle job to free its GPUs (with Suspend in actions)."
    )

    @field_validator("window")
    @classmethod
    def _window_within_reach(cls, window: str) -> str:
        if parse_duration(window) > parse_duration(MAX_WINDOW):
            raise ValueError(
                f"must be at most {MAX_WINDOW}: a longer window is more than Prometheus answers in one query"
            )
        return window

    @model_validator(mode="after")
    def _unique_actions(self) -> Efficiency:
        if len(set(self.actions)) != len(self.actions):
            raise ValueError("actions must not repeat")
        return self


class Instrumentation(StrEnum):
    # No "On"/"Off": YAML 1.1 reads those as booleans.
    AUTO = "Auto"
    MANUAL = "Manual"
    DISABLED = "Disabled"


class Telemetry(ApiModel):
    instrumentation: Instrumentation = Instrumentation.AUTO
    sample_interval_seconds: float = Field(
        default=1.0,
        ge=MIN_SAMPLE_INTERVAL_SECONDS,
        le=MAX_SAMPLE_INTERVAL_SECONDS,
        description="Seconds between the sidecar's GPU samples (NVML's profiling metrics need 0.1 s at least).",
    )


# The API server runs a transition rule (`oldSelf`) only where the old and the new object both have
# the field: an optional section the job was created without could be added to it unchecked.
# `default: {}` makes the API server fill in an omitted section (and its fields' defaults), in
# stored objects too, so an immutable section is always there to compare.
_ALWAYS_THERE: Final[dict[str, Any]] = {"default": {}}


class TrainingJobSpec(ApiModel):
    trainer: Trainer = Field(json_schema_extra=cel("self == oldSelf", f"spec.trainer {_IMMUTABLE}"))
    pod: PodSettings = Field(
        default_factory=PodSettings,
        json_schema_extra={
            "x-kubernetes-validations": [
                *cel("self == oldSelf", f"spec.pod {_IMMUTABLE}")["x-kubernetes-validations"],
                *cel(_SCHEDULER_CONFLICT_RULE, _SCHEDULER_CONFLICT)["x-kubernetes-validations"],
            ],
            **_ALWAYS_THERE,
        },
    )
    run_policy: RunPolicy = Field(default_factory=RunPolicy)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    efficiency: Efficiency = Field(default_factory=Efficiency)
    telemetry: Telemetry = Field(
        default_factory=Telemetry,
        json_schema_extra={**cel("self == oldSelf", f"spec.telemetry {_IMMUTABLE}"), **_ALWAYS_THERE},
    )


# --- status ---------------------------------------------------------------------------------


class Phase(StrEnum):
    PENDING = "Pending"
    QUEUED = "Queued"  # created suspended for Kueue, waiting for it to admit the job
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    INVALID = "Invalid"


TERMINAL_PHASES: Final = frozenset({Phase.SUCCEEDED, Phase.FAILED})


class Condition(ApiModel):
    """A standard Kubernetes condition (metav1.Condition)."""

    type: str = Field(min_length=1, max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(pattern=REASON_PATTERN, max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: datetime
    observed_generation: int | None = Field(default=None, ge=0)


class WorkerStatus(ApiModel):
    index: int = Field(ge=0)
    pod: str
    node: str | None = None
    phase: str
    restarts: int = Field(default=0, ge=0)


class EfficiencySummary(ApiModel):
    gpu_utilization: float | None = Field(default=None, ge=0, le=100)
    sm_activity: float | None = Field(default=None, ge=0, le=1)
    data_wait_fraction: float | None = Field(default=None, ge=0, le=1)
    memory_headroom_fraction: float | None = Field(default=None, ge=0, le=1)
    top_finding: str | None = None
    updated_at: datetime | None = Field(
        default=None,
        description="When the operator last wrote this status: it skips figures that moved less than a point.",
    )
    metrics_unavailable_since: datetime | None = Field(
        default=None,
        description="Set while Prometheus cannot be read: the figures and findings are those of updatedAt.",
    )
    metrics_error: str | None = Field(default=None, description="Why Prometheus could not be read, while it cannot.")


class Finding(ApiModel):
    kind: str = Field(pattern=REASON_PATTERN)
    confidence: float = Field(ge=0, le=1)
    since: datetime
    message: str
    worker: int | None = Field(default=None, ge=0)
    evidence: dict[str, str] = Field(default_factory=dict)


class Recommendation(ApiModel):
    action: ActionKind
    finding: str = Field(pattern=REASON_PATTERN)
    message: str
    changes: dict[str, str] = Field(default_factory=dict)
    expected_effect: str | None = None
    expected_speedup: float | None = Field(
        default=None,
        gt=0,
        description="The samples per second expected after the change over before it, where the rule predicts "
        "throughput from what it measured (at most: an upper bound); expectedEffect says its basis.",
    )


class ActionState(StrEnum):
    """Where an action is: see gpuwise.act.machine for what each state waits for."""

    PLANNED = "Planned"
    WAITING_FOR_CHECKPOINT = "WaitingForCheckpoint"
    APPLYING = "Applying"
    VERIFYING = "Verifying"
    DONE = "Done"
    FAILED = "Failed"
    ROLLED_BACK = "RolledBack"
    DRY_RUN = "DryRun"  # what would have happened, recorded while the operator runs in dry-run
    STOPPED = "Stopped"  # ended early: the operator's actions were turned off while it was in flight


FINAL_ACTION_STATES: Final = frozenset(
    {ActionState.DONE, ActionState.FAILED, ActionState.ROLLED_BACK, ActionState.DRY_RUN, ActionState.STOPPED}
)
MAX_ACTION_HISTORY: Final = 16
MAX_ACTION_RECORDS: Final = 20


class ActionTransition(ApiModel):
    state: ActionState
    reason: str = Field(pattern=REASON_PATTERN)
    message: str = ""
    at: datetime


class Measurement(ApiModel):
    """Throughput and utilization of the job over a window, as Prometheus saw them (absent: unmeasured)."""

    samples_per_second: float | None = Field(default=None, ge=0)
    gpu_utilization: float | None = Field(default=None, ge=0, le=100)
    at: datetime


class ActionRecord(ApiModel):
    """One action on the job: its plan, where it is, and how it got there."""

    id: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    action: ActionKind
    finding: str | None = Field(default=None, pattern=REASON_PATTERN)
    state: ActionState
    reason: str = Field(pattern=REASON_PATTERN)
    message: str = ""
    started_at: datetime
    updated_at: datetime
    changes: dict[str, str] = Field(default_factory=dict, description="The recommendation's changes, as applied.")
    restart: bool = Field(default=False, description="Whether the action restarts the job from a checkpoint.")
    overrides_before: JobOverrides | None = None
    overrides_target: JobOverrides | None = None
    reverting: bool = Field(default=False, description="Going back to overridesBefore (it made things worse).")
    checkpoint_requested_at: datetime | None = None
    checkpoint_acknowledged_at: datetime | None = None
    baseline: Measurement | None = None
    result: Measurement | None = None
    expected_effect: str | None = Field(default=None, description="The recommendation's expected effect, as planned.")
    expected_speedup: float | None = Field(default=None, gt=0, description="Its predicted samples/s ratio.")
    measured_speedup: float | None = Field(
        default=None, ge=0, description="result over baseline samples/s, once verified with both measured."
    )
    details: dict[str, str] = Field(default_factory=dict)
    history: Annotated[list[ActionTransition], Field(max_length=MAX_ACTION_HISTORY)] = Field(default_factory=list)


class TrainingJobStatus(ApiModel):
    phase: Phase = Phase.PENDING
    observed_generation: int | None = Field(default=None, ge=0)
    conditions: Annotated[list[Condition], Field(json_schema_extra=list_map("type"))] = Field(default_factory=list)
    start_time: datetime | None = None
    completion_time: datetime | None = None
    restarts: int = Field(default=0, ge=0)
    workers: Annotated[list[WorkerStatus], Field(json_schema_extra=list_map("index"))] = Field(default_factory=list)
    efficiency: EfficiencySummary | None = None
    findings: list[Finding] = Field(default_factory=list)
    recommendations: list[Recommendation] = Field(default_factory=list)
    actions: Annotated[list[ActionRecord], Field(max_length=MAX_ACTION_RECORDS)] = Field(
        default_factory=list, description="gpuwise's actions on this job, oldest first (the newest are kept)."
    )


class TrainingJob(ApiModel):
    """A whole TrainingJob as stored by the API server."""

    api_version: Literal["gpuwise.io/v1alpha1"] = "gpuwise.io/v1alpha1"
    kind: Literal["TrainingJob"] = "TrainingJob"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: TrainingJobSpec
    status: TrainingJobStatus | None = None
