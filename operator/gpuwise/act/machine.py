"""One action is a small state machine recorded in the TrainingJob's `status.actions`.

```
 Planned ──(restart?)──▶ WaitingForCheckpoint ──ack──▶ Applying ──new Job runs──▶ Verifying ──▶ Done
    │                          │ no ack in time           │ prepare fails              │ worse
    └──(no restart)──▶ Applying│                          ▼                            ▼
                               ▼                    (undo, old overrides)     WaitingForCheckpoint (reverting)
                      Failed: CheckpointTimeout      ──▶ RolledBack            ──▶ Applying ──▶ RolledBack
```

Turning the operator's actions off (`actions.enabled: false`, read live) ends an action in flight
at its next safe point in `Stopped` (`Runner._stop` says which point is safe in each state).

The record is the whole memory of an action: every step reads what it needs from the record and
the cluster, does only what is missing, and writes the record before moving on. So an operator
restart in the middle of any state resumes it without repeating or losing a step: a checkpoint
request is the same annotation again, a Job already rendered with the target overrides is not
replaced twice, node preparation reads its progress from `details`.

An action *kind* (AdjustConfig, Reschedule, MigRepartition, Pack) is a subclass of `Action`:

- `plan()` turns a recommendation into the overrides the job should run with (pure);
- `restart` in the plan says whether the job must be stopped and started again from a checkpoint;
- `prepare()` / `undo()` are node-side hooks (cordon, evict, MIG config…) for kinds with
  `prepares_nodes`, run while the job is held suspended — `prepare` before it runs with the new
  overrides, `undo` before it runs with the old ones again (on failure or revert) — called once
  per cycle until they say `ready`; both must be idempotent;
- `verify()` judges the job's throughput after the change against before it (keep or revert).

The runner (`gpuwise.act.runner`) owns the transitions; kinds never write status themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Final

from gpuwise.act.action_settings import ActionSettings
from gpuwise.api.kinds import ActionKind
from gpuwise.api.overrides import JobOverrides
from gpuwise.api.trainingjob import (
    FINAL_ACTION_STATES,
    MAX_ACTION_HISTORY,
    ActionRecord,
    ActionState,
    ActionTransition,
    Measurement,
    Recommendation,
    TrainingJobSpec,
)
from gpuwise.kube.client import Kube

JsonDict = dict[str, Any]
# The reason of a verdict, and of the rollback, when a change made the job slower.
WORSE: Final = "Worse"


@dataclass(frozen=True)
class JobView:
    """What an action may know of the job it acts on, read once per cycle."""

    namespace: str
    name: str
    body: Mapping[str, Any]  # the TrainingJob as stored
    spec: TrainingJobSpec
    overrides: JobOverrides  # what the job runs with now, on top of its spec
    pods: Sequence[Mapping[str, Any]] = ()

    @property
    def status(self) -> Mapping[str, Any]:
        return self.body.get("status") or {}

    def node_of_worker(self, index: int) -> str | None:
        return next((w.get("node") for w in self.status.get("workers") or [] if w.get("index") == index), None)


@dataclass(frozen=True)
class Plan:
    """What an action will change: the job's overrides afterwards, and whether that needs a restart."""

    target: JobOverrides
    message: str  # one sentence for the record and the Event: what will change and why
    restart: bool = True
    changes: Mapping[str, str] = field(default_factory=dict)
    details: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Refusal:
    """Why a recommendation cannot become an action now; it stays a recommendation."""

    reason: str  # CamelCase
    message: str
    # Whether the refusal holds for as long as the job's object, its pods, its action records and
    # the recommendation stay as they are: not one that waits on the clock or the cluster.
    lasting: bool = False


@dataclass(frozen=True)
class Progress:
    """What a node-side hook achieved this cycle: ready to go on, or not yet (with what it waits for)."""

    ready: bool
    message: str = ""
    details: Mapping[str, str] = field(default_factory=dict)  # merged into record.details


READY = Progress(ready=True)


class ActionFailed(Exception):
    """A hook cannot go on: the runner undoes what was done and records `reason`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Verdict:
    keep: bool
    reason: str
    message: str


@dataclass(frozen=True)
class ActContext:
    """What hooks may use: the API, the operator's action settings, and the time of this cycle."""

    kube: Kube
    settings: ActionSettings
    now: datetime


class Action:
    """An action kind. Subclasses set `kind` and implement `plan`; the hooks default to no-ops."""

    kind: ClassVar[ActionKind]
    # Whether `prepare` works on nodes while the job is stopped: the new Job is then created
    # suspended (overrides.suspend) and released once `prepare` says ready.
    prepares_nodes: ClassVar[bool] = False
    # Whether the job's throughput is measured once it runs again (Verifying, `verify`); without,
    # the action is Done as soon as the change is applied, with `done`'s reason and message.
    verifies: ClassVar[bool] = True

    def plan(self, job: JobView, recommendation: Recommendation, settings: ActionSettings) -> Plan | Refusal:
        """What the recommendation would change, from its arguments alone (the cluster is `admit`'s):
        the runner takes a refusal from here as lasting (`Refusal.lasting`)."""
        raise NotImplementedError

    async def admit(self, job: JobView, plan: Plan, ctx: ActContext) -> Plan | Refusal:
        """Whether the cluster can take `plan` now, asked before anything is disrupted (no checkpoint
        requested, no job stopped): node-side kinds look for a node that can serve it, and return
        the plan refined with what they found (e.g. the node preferred for the workers)."""
        return plan

    async def prepare(self, job: JobView, record: ActionRecord, ctx: ActContext) -> Progress:
        """Make the cluster ready for the target overrides while the job is stopped (node-side)."""
        return READY

    async def undo(self, job: JobView, record: ActionRecord, ctx: ActContext) -> Progress:
        """Take back what `prepare` did, on failure or revert, while the job is held (node-side)."""
        return READY

    def done(self, record: ActionRecord) -> tuple[str, str]:
        """The reason and message of the Done transition of a kind that `verifies` nothing."""
        return "Applied", record.message

    def verify(self, record: ActionRecord, settings: ActionSettings) -> Verdict:
        """Keep the change unless it made the job measurably slower (see `compare`)."""
        return compare(record.baseline, record.result, settings.worse_tolerance)


def compare(before: Measurement | None, after: Measurement | None, tolerance: float) -> Verdict:
    """Worse means fewer samples per second than before, beyond `tolerance` (a fraction).

    Throughput is what the user cares about; GPU utilization decides only when the job reports no
    samples. Without a measurement on both sides nothing is judged: the change is kept and the
    record says it was not measured — no number is invented.
    """
    for name, unit in (("samples_per_second", "samples/s"), ("gpu_utilization", "% GPU utilization")):
        old = getattr(before, name, None) if before else None
        new = getattr(after, name, None) if after else None
        if old is None or new is None:
            continue
        if new < old * (1 - tolerance):
            return Verdict(False, WORSE, f"{unit} fell from {old:.3g} to {new:.3g}")
        return Verdict(True, "Improved" if new > old else "NoWorse", f"{unit}: {old:.3g} before, {new:.3g} after")
    return Verdict(True, "NotMeasured", "no throughput or utilization on both sides to compare")


# --- records --------------------------------------------------------------------------------


def is_final(record: ActionRecord) -> bool:
    return record.state in FINAL_ACTION_STATES


def transition(record: ActionRecord, state: ActionState, reason: str, message: str, now: datetime) -> ActionRecord:
    """The record in `state`, with the step appended to its bounded history."""
    step = ActionTransition(state=state, reason=reason, message=message, at=now)
    history = [*record.history, step][-MAX_ACTION_HISTORY:]
    return record.model_copy(
        update={"state": state, "reason": reason, "message": message, "updated_at": now, "history": history}
    )


def new_record(kind: ActionKind, finding: str, plan: Plan, before: JobOverrides, now: datetime) -> ActionRecord:
    """A planned action; its id names the checkpoint request (a DNS label, unique per job)."""
    record = ActionRecord(
        id=f"{kind.value.lower()}-{int(now.timestamp())}",
        action=kind,
        finding=finding,
        state=ActionState.PLANNED,
        reason="Planned",
        message=plan.message,
        started_at=now,
        updated_at=now,
        changes=dict(plan.changes),
        restart=plan.restart,
        overrides_before=before,
        overrides_target=plan.target,
        details=dict(plan.details),
    )
    return transition(record, ActionState.PLANNED, "Planned", plan.message, now)


def request_id(record: ActionRecord) -> str:
    """The checkpoint request id: the record's id, and a distinct one for the revert's checkpoint."""
    return f"{record.id}-revert" if record.reverting else record.id
