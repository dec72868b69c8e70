"""What evaluating a job reads of its TrainingJob besides the metrics, kept while it stays the same.

A job's evaluation needs a handful of settings from its spec (the efficiency mode, window and
threshold, its tunables, the trainer's CPU and processes) and the gradient accumulation it runs
with (its env with gpuwise's overrides). Validating the whole spec for them every cycle was the
largest single cost of evaluating a fleet (some 50 µs a job in a busy process), although a spec
changes rarely, and only with its TrainingJob's generation. `JobSettingsCache` keeps each job's
`JobSettings` from cycle to cycle, and validates again when the generation or the overrides
annotation changes. It keeps these few settings, not the validated spec (13 KB of objects a
job, 125 MB at 10,000 jobs). The validated tunables (3.5 KB a job) are shared: a fleet's jobs
declare a few distinct ones (their templates), each kept once, up to `SHARED_TUNABLES`; a job
with another one has its tunables validated when they are read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuwise.act.adjust_config import current_env
from gpuwise.act.machine import JobView
from gpuwise.api.base import parse_duration
from gpuwise.api.trainingjob import EfficiencyMode, TrainingJobSpec, Tunables
from gpuwise.kube import job_overrides
from gpuwise.kube.resources import cpu_cores
from gpuwise.kube.trainingjob import parse_spec

SHARED_TUNABLES: Final = 1024
SHARED_VALUES: Final = 4096


def gradient_accumulation_steps(body: Mapping[str, Any], spec: TrainingJobSpec) -> int | None:
    """The accumulation the job runs with: the value of its declared tunable's variable.

    No metric reports it, so it is read where gpuwise sets it: the trainer's env with gpuwise's
    overrides on top (`current_env`, what AdjustConfig reads too). None when the tunable is not
    declared or its variable is not a plain whole number there: the trainer's own default is
    unknown, and guessing 1 would change the global batch of a job that asked to keep it.
    """
    tunable = spec.efficiency.tunables.gradient_accumulation_steps
    if tunable is None:
        return None
    try:
        overrides = job_overrides.wanted(body)
    except job_overrides.OverridesError:
        overrides = job_overrides.NONE
    meta = body.get("metadata", {})
    view = JobView(meta.get("namespace", ""), meta.get("name", ""), body, spec, overrides)
    value = current_env(view).get(tunable.env, "")
    return int(value) if value.isdigit() and int(value) > 0 else None


@dataclass(frozen=True, slots=True)
class JobSettings:
    """The settings of one TrainingJob that its evaluation reads, from its validated spec."""

    mode: EfficiencyMode
    actions: tuple[str, ...]  # spec.efficiency.actions: what Enforce may do
    window_seconds: float
    utilization_threshold: float  # spec.efficiency.thresholds.gpuUtilization
    suspend_after_seconds: float  # spec.efficiency.idle.after
    cpu_cores: float | None  # the trainer's CPU limit (or request)
    processes_per_node: int
    gradient_accumulation_steps: int | None
    # spec.efficiency.tunables as the spec has them, valid; None where `shared_tunables` holds them.
    raw_tunables: Mapping[str, Any] | None
    shared_tunables: Tunables | None = None  # validated, where `JobSettingsCache` shares them

    @classmethod
    def of(cls, body: Mapping[str, Any], spec: TrainingJobSpec) -> JobSettings:
        """The settings of `body`, whose spec `spec` is, validated."""
        resources = spec.trainer.resources_per_node
        limits, requests = resources.limits or {}, resources.requests or {}
        efficiency = (body.get("spec") or {}).get("efficiency") or {}
        return cls(
            mode=spec.efficiency.mode,
            actions=tuple(action.value for action in spec.efficiency.actions),
            window_seconds=parse_duration(spec.efficiency.window),
            utilization_threshold=spec.efficiency.thresholds.gpu_utilization,
            suspend_after_seconds=parse_duration(spec.efficiency.idle.after),
            cpu_cores=cpu_cores(limits.get("cpu", requests.get("cpu"))),
            processes_per_node=spec.trainer.num_proc_per_node,
            gradient_accumulation_steps=gradient_accumulation_steps(body, spec),
            raw_tunables=efficiency.get("tunables") or {},
        )

    def tunables(self) -> Tunables:
        if self.shared_tunables is not None:
            return self.shared_tunables
        return Tunables.model_validate(self.raw_tunables or {})


def job_settings(body: Mapping[str, Any]) -> JobSettings | None:
    """The settings of a TrainingJob; None when its spec or name is invalid (the reconciler says why)."""
    spec, problem = parse_spec(body)
    return JobSettings.of(body, spec) if spec is not None and problem is None else None


# A job's entry: the uid, generation and overrides annotation its settings came from, and those
# settings (None: the spec, or the name, does not validate).
_Entry = tuple[str, int, str | None, JobSettings | None]


class JobSettingsCache:
    """Each job's `JobSettings`, validated again only when what they come from changes.

    A spec changes only with the TrainingJob's `metadata.generation` (the API server bumps it on
    every change of spec, and only then), so that and the overrides annotation are what is
    compared: nothing of an old body is kept alive. A body without a generation (not from an API
    server) is validated every time. Settings of equal values share their objects, and so do the
    tunables (`SHARED_TUNABLES`). Entries live in two generations: `turn()` (every few cycles)
    drops the ones not read since the turn before, the jobs that were deleted or stopped running.
    """

    def __init__(self) -> None:
        self._fresh: dict[tuple[str, str], _Entry] = {}
        self._older: dict[tuple[str, str], _Entry] = {}
        self._tunables: dict[Hashable, Tunables] = {}  # by the raw tunables' content (`_frozen`)
        self._values: dict[Hashable, Any] = {}  # equal settings' values, one object each
        self.validations = 0

    def __len__(self) -> int:
        return len(self._fresh.keys() | self._older.keys())

    def turn(self) -> None:
        self._older, self._fresh = self._fresh, {}

    def settings(self, body: Mapping[str, Any]) -> JobSettings | None:
        """`job_settings(body)`, validated again only when its spec or overrides changed."""
        meta = body.get("metadata", {})
        key = meta.get("namespace", ""), meta.get("name", "")
        uid, generation = meta.get("uid", ""), meta.get("generation")
        overrides = (meta.get("annotations") or {}).get(job_overrides.ANNOTATION_OVERRIDES)
        entry = self._fresh.get(key) or self._older.pop(key, None)
        if entry is None or generation is None or entry[:3] != (uid, generation, overrides):
            self.validations += 1
            entry = (uid, generation, overrides, self._shared(job_settings(body)))
            if generation is None:
                return entry[3]
        self._fresh[key] = entry
        return entry[3]

    def _shared(self, settings: JobSettings | None) -> JobSettings | None:
        """`settings` with each value shared with every job's equal one, and their tunables validated."""
        if settings is None:
            return None
        key = _frozen(settings.raw_tunables)
        tunables = self._tunables.get(key)
        if tunables is None and len(self._tunables) < SHARED_TUNABLES:
            tunables = self._tunables[key] = settings.tunables()
        shared = {
            name: self._one(value)
            for name in ("actions", "window_seconds", "utilization_threshold", "cpu_cores")
            if (value := getattr(settings, name)) is not None
        }
        if tunables is not None:  # the body's dict is needed no more
            shared.update(shared_tunables=tunables, raw_tunables=None)
        return dataclasses.replace(settings, **shared)

    def _one(self, value: Any) -> Any:
        """The one object kept for values equal to `value` (of its type), while fewer than `SHARED_VALUES` are."""
        key = type(value), value
        kept = self._values.get(key)
        if kept is None and len(self._values) < SHARED_VALUES:
            kept = self._values[key] = value
        return value if kept is None else kept

    def forget(self, namespace: str, name: str) -> None:
        self._fresh.pop((namespace, name), None)
        self._older.pop((namespace, name), None)


def _frozen(value: Any) -> Hashable:
    """A JSON value as a hashable one, equal only for equal values of the same types (1 is not 1.0 nor True)."""
    if isinstance(value, Mapping):
        return tuple(sorted((key, _frozen(item)) for key, item in value.items()))
    if isinstance(value, list):
        return ("list", *map(_frozen, value))
    return type(value).__name__, value
