"""AdjustConfig: set the recommended values through the job's declared tunables, and restart.

Only what the user declared in `spec.efficiency.tunables` is ever changed: an environment
variable per knob, whole numbers clamped to the declared `min`/`max`, switches "0" or "1". With
`keepGlobalBatchSize`, the recommendation carries the batch size and the gradient accumulation
that keep batch × accumulation as it is (`gpuwise.diagnose.rules.larger_batch` computes the pair);
a plan that would change that product anyway (a bound clamped one of them, or the pair is not
there) is refused rather than half applied. The job restarts
from its checkpoint with the new values; after `verifyWindow` the runner compares throughput with
the baseline and reverts (another checkpointed restart) when it got worse.
"""

from __future__ import annotations

from gpuwise.act.action_settings import ActionSettings
from gpuwise.act.machine import Action, JobView, Plan, Refusal
from gpuwise.api.kinds import ActionKind
from gpuwise.api.trainingjob import IntTunable, Recommendation, SwitchTunable, Tunables

SWITCH_VALUES = ("0", "1")


def declared(tunables: Tunables) -> dict[str, IntTunable | SwitchTunable]:
    """Every declared knob by its environment variable."""
    knobs = (
        tunables.batch_size,
        tunables.data_loader_workers,
        tunables.gradient_accumulation_steps,
        tunables.pin_memory,
        tunables.amp,
    )
    return {knob.env: knob for knob in knobs if knob is not None}


def clamp(value: str, knob: IntTunable | SwitchTunable) -> str | None:
    """The value within the knob's bounds; None when it is not a value the knob takes."""
    if isinstance(knob, SwitchTunable):
        return value if value in SWITCH_VALUES else None
    try:
        number = int(value)
    except ValueError:
        return None
    return str(min(max(number, knob.min), knob.max))


def current_env(job: JobView) -> dict[str, str]:
    """Plain values the trainer runs with now: its spec's env, then gpuwise's overrides."""
    values = {e.name: e.value for e in job.spec.trainer.env if e.value is not None}
    return {**values, **job.overrides.env}


def global_batch_change(job: JobView, changes: dict[str, str]) -> str | None:
    """Why `changes` would alter the batch × accumulation the job asked to keep; None if they would not."""
    tunables = job.spec.efficiency.tunables
    batch, accumulation = tunables.batch_size, tunables.gradient_accumulation_steps
    if not tunables.keep_global_batch_size or batch is None or batch.env not in changes:
        return None
    if accumulation is None:
        return "keepGlobalBatchSize needs spec.efficiency.tunables.gradientAccumulationSteps"
    now = current_env(job)
    try:
        before = int(now[batch.env]) * int(now[accumulation.env])
        after = int(changes[batch.env]) * int(changes.get(accumulation.env, now[accumulation.env]))
    except (KeyError, ValueError):
        return f"{batch.env} and {accumulation.env} are not plain values in the trainer's env"
    if after != before:
        return f"{batch.env} × {accumulation.env} would go from {before} to {after}, and keepGlobalBatchSize is set"
    return None


class AdjustConfig(Action):
    kind = ActionKind.ADJUST_CONFIG

    def plan(self, job: JobView, recommendation: Recommendation, settings: ActionSettings) -> Plan | Refusal:
        knobs = declared(job.spec.efficiency.tunables)
        changes: dict[str, str] = {}
        for env, value in recommendation.changes.items():
            knob = knobs.get(env)
            clamped = clamp(value, knob) if knob is not None else None
            if clamped is not None:
                changes[env] = clamped
        if reason := global_batch_change(job, changes):
            return Refusal("GlobalBatchChanged", reason)
        now = current_env(job)
        changes = {env: value for env, value in changes.items() if now.get(env) != value}
        if not changes:
            return Refusal("NothingToChange", "no declared tunable would change (already set, or at its bound)")
        target = job.overrides.model_copy(update={"env": {**job.overrides.env, **changes}})
        summary = ", ".join(f"{env}={value}" for env, value in sorted(changes.items()))
        return Plan(target=target, message=f"Set {summary} and restart from a checkpoint.", changes=changes)


ADJUST_CONFIG = AdjustConfig()
