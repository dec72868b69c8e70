"""Whether gpuwise may start an action now: pure checks over the job, its past actions and the fleet.

A refusal is not an error: the recommendation stays in status, and the refusal is told once in
an Event, so the user sees why nothing happened. The checks, in order:

- the operator's actions are turned off (`actions.enabled`), or this kind is not among
  `actions.kinds` (the chart lists only the kinds its RBAC grants);
- the job or its pods are annotated `gpuwise.io/do-not-disrupt: "true"`;
- the action restarts the job but `spec.checkpoint.enabled` is false: never restarted;
- the action restarts the job but `spec.telemetry.instrumentation` is `Disabled`: nothing in the
  job can answer the checkpoint handshake, so the action could only time out;
- the job has run less than `minRuntime`;
- the job has had `maxActionsPerJob` actions (dry runs aside);
- the last action (or dry run) ended less than `cooldown` ago;
- a disruption budget is used up: every budget that covers the job's namespace and is active now
  (always, or inside its cron window) allows `jobs` actions at once, a count or a share of the
  running TrainingJobs it covers; the most restrictive wins.

Before all of these, per recommendation (:func:`reverted_before`): the same change was made to the
job before and reverted because it made the job slower; it is not made again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from croniter import croniter

from gpuwise import wiring
from gpuwise.act.action_settings import EVERY_NAMESPACE, ActionSettings, Budget, budget_name
from gpuwise.act.adjust_config import current_env
from gpuwise.act.machine import WORSE, JobView, Plan, Refusal
from gpuwise.api.base import parse_duration
from gpuwise.api.kinds import ActionKind
from gpuwise.api.trainingjob import ActionRecord, ActionState, Instrumentation

# The reason of a refusal, and of an action stopped in flight, while `actions.enabled` is false.
ACTIONS_DISABLED: Final = "ActionsDisabled"


@dataclass(frozen=True)
class Fleet:
    """Per namespace: running TrainingJobs, and those with an action in progress (disrupted)."""

    running: Mapping[str, int]
    disrupted: Mapping[str, int]


def window_open(budget: Budget, now: datetime) -> bool:
    """Whether the budget holds at `now`: always without a schedule, else from a firing to `duration` later."""
    if budget.schedule is None or budget.duration is None:
        return True
    # From just after `now`, so that a window opening at this very second counts as open.
    opened: datetime = croniter(budget.schedule, now + timedelta(seconds=1)).get_prev(datetime)
    return now < opened + timedelta(seconds=parse_duration(budget.duration))


def _covers(budget: Budget, namespace: str) -> bool:
    return budget.namespace in (None, EVERY_NAMESPACE, namespace)


def budget_refusal(namespace: str, fleet: Fleet, budgets: Sequence[Budget], now: datetime) -> Refusal | None:
    """The first active budget covering `namespace` that has no disruption left, if any."""
    for budget in budgets:
        if not _covers(budget, namespace) or not window_open(budget, now):
            continue
        if budget.namespace is None:
            running, disrupted = sum(fleet.running.values()), sum(fleet.disrupted.values())
        else:
            running, disrupted = fleet.running.get(namespace, 0), fleet.disrupted.get(namespace, 0)
        allowed = budget.allowed(running)
        if disrupted >= allowed:
            return Refusal(
                "BudgetExhausted",
                f"the {budget_name(budget)} allows {allowed} disrupted job(s) of {running} running, "
                f"and {disrupted} already are",
            )
    return None


def do_not_disrupt(job: JobView) -> bool:
    """Karpenter's convention, on the TrainingJob or on its pods (spec.pod.annotations)."""
    annotations = job.body.get("metadata", {}).get("annotations") or {}
    return "true" in (
        annotations.get(wiring.ANNOTATION_DO_NOT_DISRUPT),
        job.spec.pod.annotations.get(wiring.ANNOTATION_DO_NOT_DISRUPT),
    )


def counted(records: Sequence[ActionRecord]) -> list[ActionRecord]:
    """Actions that happened (or were attempted): dry runs only say what would have."""
    return [r for r in records if r.state is not ActionState.DRY_RUN]


def _way(value: str, now: str | None) -> str:
    """Where a change takes a setting: a whole number up or down from what the job runs with
    now, anything else to that very value."""
    try:
        return "up" if int(value) > int(now or "") else "down"
    except ValueError:
        return f"to {value}"


def reverted_before(job: JobView, kind: ActionKind, plan: Plan, records: Sequence[ActionRecord]) -> Refusal | None:
    """Whether `plan` makes again a change that was made to this job and reverted because it made
    the job slower: the same kind, moving every setting that change moved the same way (a whole
    number up or down from what the job runs with now, as a recommendation's figure varies from
    one window to the next; anything else to the same value). Trying it again would only cost two
    more restarts. The records hold every action that happened (only dry runs are trimmed first).
    """
    now = current_env(job)
    for record in records:
        if (record.action, record.state, record.reason) != (kind, ActionState.ROLLED_BACK, WORSE):
            continue
        if all(
            key in plan.changes and _way(plan.changes[key], now.get(key)) == _way(value, now.get(key))
            for key, value in record.changes.items()
        ):
            changed = ", ".join(f"{key}={value}" for key, value in sorted(record.changes.items()))
            return Refusal(
                "RevertedBefore",
                f"action {record.id} made the same change ({changed}) and was reverted at "
                f"{record.updated_at:%Y-%m-%d %H:%M:%S}: the job ran slower with it",
                lasting=True,
            )
    return None


def job_refusal(
    job: JobView,
    *,
    kind: ActionKind,
    plan: Plan,
    records: Sequence[ActionRecord],
    settings: ActionSettings,
    started_at: datetime | None,
    now: datetime,
) -> Refusal | None:
    """Why this job may not take `plan` now, if anything (budgets aside)."""
    if not settings.enabled:
        return Refusal(
            ACTIONS_DISABLED,
            "the operator's actions are off (settings actions.enabled, chart actions.enforce)",
            lasting=True,
        )
    if kind not in settings.kinds:
        return Refusal(
            "ActionKindDisabled", f"the operator is not set to take {kind.value} (settings actions.kinds)", lasting=True
        )
    if do_not_disrupt(job):
        return Refusal("DoNotDisrupt", f'the job is annotated {wiring.ANNOTATION_DO_NOT_DISRUPT}: "true"', lasting=True)
    if plan.restart and not job.spec.checkpoint.enabled:
        return Refusal(
            "CheckpointDisabled",
            "the action restarts the job and spec.checkpoint.enabled is false: gpuwise never restarts it",
            lasting=True,
        )
    if plan.restart and job.spec.telemetry.instrumentation is Instrumentation.DISABLED:
        return Refusal(
            "InstrumentationDisabled",
            "the action restarts the job after a checkpoint handshake, and with spec.telemetry.instrumentation "
            "Disabled nothing in the job can answer it",
            lasting=True,
        )
    min_runtime = parse_duration(settings.min_runtime)
    if started_at is None or (now - started_at).total_seconds() < min_runtime:
        return Refusal("MinRuntime", f"the job has run less than {settings.min_runtime}")
    done = counted(records)
    if len(done) >= settings.max_actions_per_job:
        return Refusal("MaxActions", f"the job has had {len(done)} action(s), the most allowed", lasting=True)
    if records:
        cooldown = parse_duration(settings.cooldown)
        last = max(r.updated_at for r in records)
        if (now - last).total_seconds() < cooldown:
            return Refusal("Cooldown", f"the last action ended at {last:%H:%M:%S}; the cooldown is {settings.cooldown}")
    return None
