"""Drive every job's actions, one evaluation cycle at a time: start one, or move one along.

Called from the evaluation timer after the job's recommendations are published. A job has at most
one action in progress (the last record of `status.actions`); while it has one, the runner only
advances it; otherwise, in `Enforce` mode with the recommended action listed in
`spec.efficiency.actions`, it plans one and checks the guardrails. Everything else keeps
recommending. Each step writes the record before the next one starts, and posts an Event for
every transition, so status and `kubectl describe` tell the whole story.

Planning is serialized by one lock: budgets count actions in progress across the fleet, and two
jobs' timers must not both take the last slot. The runner also remembers the records it wrote,
because the watch that feeds the next cycle's body can lag behind its own last write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import kopf

from gpuwise.act import checkpoint, guardrails
from gpuwise.act.action_settings import ActionSettings
from gpuwise.act.checkpoint import Ack, Acks
from gpuwise.act.guardrails import ACTIONS_DISABLED
from gpuwise.act.machine import (
    WORSE,
    ActContext,
    Action,
    ActionFailed,
    JobView,
    Refusal,
    is_final,
    new_record,
    request_id,
    transition,
)
from gpuwise.act.measure import Meter
from gpuwise.act.transitions import ACTIONS
from gpuwise.api.base import parse_duration
from gpuwise.api.overrides import JobOverrides
from gpuwise.api.trainingjob import (
    KIND,
    MAX_ACTION_RECORDS,
    TERMINAL_PHASES,
    ActionRecord,
    ActionState,
    EfficiencyMode,
    Measurement,
    Phase,
    Recommendation,
)
from gpuwise.kube import job_overrides
from gpuwise.kube.client import Kube
from gpuwise.kube.trainingjob import as_body, follow_mutable_fields, parse_spec
from gpuwise.prometheus.labels import JobKey

JsonDict = dict[str, Any]
# Steps one cycle may take for one job (e.g. Planned → WaitingForCheckpoint at once).
MAX_STEPS_PER_CYCLE: Final = 4
WARNING_STATES: Final = frozenset({ActionState.FAILED, ActionState.ROLLED_BACK, ActionState.STOPPED})


def now() -> datetime:
    return datetime.now(tz=UTC).replace(microsecond=0)


def records_of(body: Mapping[str, Any]) -> list[ActionRecord]:
    return [ActionRecord.model_validate(r) for r in (body.get("status") or {}).get("actions") or []]


def _progress(records: Sequence[ActionRecord]) -> tuple[datetime, datetime, int] | None:
    if not records:
        return None
    last = records[-1]
    return last.started_at, last.updated_at, len(last.history)


def trimmed(records: list[ActionRecord]) -> list[ActionRecord]:
    """At most MAX_ACTION_RECORDS, dropping the oldest dry runs first, then the oldest actions."""
    kept = list(records)
    while len(kept) > MAX_ACTION_RECORDS:
        dry = next((i for i, r in enumerate(kept[:-1]) if r.state is ActionState.DRY_RUN), 0)
        del kept[dry]
    return kept


def _entered(record: ActionRecord, state: ActionState) -> datetime:
    """When the record last entered `state` (its history; the last update if trimmed away)."""
    return next((t.at for t in reversed(record.history) if t.state is state), record.updated_at)


def speedup(before: Measurement | None, after: Measurement | None) -> float | None:
    """Samples per second after over before, both measured (and before not zero); else None."""
    old = before.samples_per_second if before else None
    new = after.samples_per_second if after else None
    return round(new / old, 3) if old and new is not None else None


def _resume(record: ActionRecord, ack: Ack) -> dict[str, Any]:
    """The record's update that makes the job it restarts into resume from the checkpoint `ack`
    names: the target overrides (the previous ones when reverting) with `resumeFrom`. None given:
    the trainer finds its checkpoint itself, and no older path is handed on."""
    field = "overrides_before" if record.reverting else "overrides_target"
    target = getattr(record, field) or job_overrides.NONE
    return {field: target.model_copy(update={"resume_from": ack.path or None})}


def _started(body: Mapping[str, Any]) -> datetime | None:
    text = (body.get("status") or {}).get("startTime")
    return datetime.fromisoformat(text) if text else None


def _inputs(
    body: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    records: Sequence[ActionRecord],
    recommendations: Sequence[Recommendation],
) -> tuple[Any, ...] | None:
    """What a lasting refusal (`Refusal.lasting`) depends on: the job's object and its pods, as
    their resource versions say (any change to one makes a new version), its action records, and
    the recommendations to act on. None for an object without a version: not from an API server."""
    version = body["metadata"].get("resourceVersion")
    if version is None:
        return None
    return (
        version,
        tuple((pod.get("metadata") or {}).get("resourceVersion") for pod in pods),
        len(records),
        _progress(records),
        tuple((r.action, r.finding, tuple(r.changes.items())) for r in recommendations),
    )


class Runner:
    def __init__(
        self,
        kube: Kube,
        settings: ActionSettings,
        acks: Acks,
        meter: Meter,
        *,
        kinds: Iterable[Action],
        clock: Callable[[], datetime] = now,
    ) -> None:
        self.kinds = {action.kind: action for action in kinds}
        self.kube = kube
        self._settings = settings
        self.acks = acks
        self.meter = meter
        self.clock = clock  # every transition's time: a test moves it across a timeout
        self._plan_lock = asyncio.Lock()
        self._written: dict[JobKey, list[ActionRecord]] = {}
        self._told: dict[JobKey, set[str]] = {}  # refusals already told, until the job's next action
        # Per job, what it looked like (`_inputs`) when every one of its recommendations was refused
        # for a lasting reason: until it changes, the same refusals need no second validation of
        # its spec and planning (Enforce jobs whose guardrails refuse, every cycle).
        self._settled: dict[JobKey, tuple[Any, ...]] = {}

    @property
    def settings(self) -> ActionSettings:
        return self._settings

    @settings.setter
    def settings(self, settings: ActionSettings) -> None:
        """New limits take effect at the next cycle (the operator reloads them live): refusals
        settled or told under the old ones are judged again."""
        if settings != self._settings:
            self._settled.clear()
            self._told.clear()
        self._settings = settings

    # --- entry point ------------------------------------------------------------------------

    async def run(
        self,
        body: JsonDict,
        pods: Sequence[JsonDict],
        fleet: Iterable[Mapping[str, Any]],
        recommendations: Sequence[Recommendation],
    ) -> None:
        """One cycle for one TrainingJob; `fleet` is every TrainingJob (for budgets)."""
        due = self._due(body, pods, recommendations)
        if due is None:
            return
        records, inputs = due
        in_flight = bool(records) and not is_final(records[-1])
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        self._settled.pop(key, None)
        spec, problem = parse_spec(body)
        if spec is None or problem is not None:
            return
        starting = (
            spec.efficiency.mode is EfficiencyMode.ENFORCE
            and (body.get("status") or {}).get("phase") == Phase.RUNNING.value
        )
        if not (in_flight or starting):
            return
        try:
            overrides = job_overrides.wanted(body)
        except job_overrides.OverridesError:
            return  # the reconciler reports it as Accepted=False; nothing acts on a job it cannot read
        job = JobView(meta["namespace"], meta["name"], body, spec, overrides, tuple(pods))
        if in_flight:
            await self._advance(job, records)
        elif await self._maybe_start(job, records, fleet, recommendations) and inputs is not None:
            self._settled[key] = inputs

    def pending(
        self, body: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], recommendations: Sequence[Recommendation]
    ) -> bool:
        """Whether `run` has anything to do for the job: an action in flight to advance, or
        recommendations other than those refused as they stand (most jobs, most cycles: neither).
        Cheap, and safe to ask without the job's lock: it writes nothing."""
        return self._due(body, pods, recommendations) is not None

    def _due(
        self, body: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], recommendations: Sequence[Recommendation]
    ) -> tuple[list[ActionRecord], tuple[Any, ...] | None] | None:
        """What `run` works from when it has something to do (`pending`): the job's records, and
        what a lasting refusal of its recommendations would depend on (`_inputs`; None while an
        action is in flight, or for an object without a version). None when it has nothing to do."""
        meta = body["metadata"]
        if meta.get("deletionTimestamp"):
            return None
        records = self.records(meta["namespace"], meta["name"], body)
        if records and not is_final(records[-1]):
            return records, None
        if not recommendations:
            return None
        inputs = _inputs(body, pods, records, recommendations)
        if inputs is not None and self._settled.get((meta["namespace"], meta["name"])) == inputs:
            return None  # refused as it was the last time
        return records, inputs

    def records(self, namespace: str, name: str, body: Mapping[str, Any]) -> list[ActionRecord]:
        """The job's records: what this runner wrote last, unless the body is further along.

        Only the runner writes them, so a body exactly as far along (same last record, times and
        history) can only be behind on what changes none of those, e.g. `runningSince`: taking
        the body then would record it again, later, from a watch that lags."""
        seen = records_of(body)
        mine = self._written.get((namespace, name))
        if mine is not None and (_progress(seen) or ()) <= (_progress(mine) or ()):
            return list(mine)
        return seen

    def forget(self, namespace: str, name: str) -> None:
        self._written.pop((namespace, name), None)
        self._told.pop((namespace, name), None)
        self._settled.pop((namespace, name), None)

    # --- starting ---------------------------------------------------------------------------

    def _fleet(self, bodies: Iterable[Mapping[str, Any]]) -> guardrails.Fleet:
        running: dict[str, int] = {}
        disrupted: dict[str, int] = {}
        for body in bodies:
            meta = body.get("metadata", {})
            namespace = meta.get("namespace", "")
            records = self.records(namespace, meta.get("name", ""), body)
            busy = bool(records) and not is_final(records[-1])
            if busy:
                disrupted[namespace] = disrupted.get(namespace, 0) + 1
            if busy or (body.get("status") or {}).get("phase") == Phase.RUNNING.value:
                running[namespace] = running.get(namespace, 0) + 1
        return guardrails.Fleet(running, disrupted)

    async def _maybe_start(
        self,
        job: JobView,
        records: list[ActionRecord],
        fleet: Iterable[Mapping[str, Any]],
        recommendations: Sequence[Recommendation],
    ) -> bool:
        """Start the first recommendation the guardrails let through, if any. Whether every one was
        refused for a lasting reason (`Refusal.lasting`; `Action.plan`'s refusals all are)."""
        allowed = set(job.spec.efficiency.actions)
        lasting = True
        for recommendation in recommendations:
            action = self.kinds.get(recommendation.action)
            if action is None or recommendation.action not in allowed:
                continue
            plan = action.plan(job, recommendation, self.settings)
            if isinstance(plan, Refusal):
                self._refused(job, recommendation, plan)
                continue
            reverted = guardrails.reverted_before(job, recommendation.action, plan, records)
            if reverted is not None:
                self._refused(job, recommendation, reverted)
                lasting &= reverted.lasting
                continue
            at = self.clock()
            refusal = guardrails.job_refusal(
                job,
                kind=recommendation.action,
                plan=plan,
                records=records,
                settings=self.settings,
                started_at=_started(job.body),
                now=at,
            )
            if refusal is not None:
                self._refused(job, recommendation, refusal)
                return lasting and refusal.lasting
            admitted = await action.admit(job, plan, ActContext(kube=self.kube, settings=self.settings, now=at))
            if isinstance(admitted, Refusal):
                self._refused(job, recommendation, admitted)
                lasting = False  # the cluster may have room next time
                continue
            plan = admitted
            async with self._plan_lock:
                refusal = guardrails.budget_refusal(job.namespace, self._fleet(fleet), self.settings.budgets, at)
                if refusal is not None:
                    self._refused(job, recommendation, refusal)
                    return False
                baseline = await self.meter.measure(job.namespace, job.name, at)
                record = new_record(recommendation.action, recommendation.finding, plan, job.overrides, at)
                expected = {"expected_effect": recommendation.expected_effect}
                record = record.model_copy(
                    update={"baseline": baseline, **expected, "expected_speedup": recommendation.expected_speedup}
                )
                if self.settings.dry_run:
                    record = transition(record, ActionState.DRY_RUN, "DryRun", f"Dry run, not done: {plan.message}", at)
                await self._save(job, [*records, record])
            self._told.pop((job.namespace, job.name), None)
            self._event(job, record)
            if not is_final(record):
                await self._advance(job, [*records, record])
            return False
        return lasting

    def _refused(self, job: JobView, recommendation: Recommendation, refusal: Refusal) -> None:
        """Say once (per action and reason, until the job's next action) why a recommendation stays
        one: a job with several refused recommendations gets one Event for each, not one a cycle."""
        said = f"{recommendation.action}:{refusal.reason}"
        told = self._told.setdefault((job.namespace, job.name), set())
        if said in told:
            return
        told.add(said)
        kopf.info(
            as_body(dict(job.body)),
            reason="ActionNotTaken",
            message=f"{recommendation.action.value} for {recommendation.finding} not taken ({refusal.reason}): "
            f"{refusal.message}.",
        )

    # --- advancing --------------------------------------------------------------------------

    async def _advance(self, job: JobView, records: list[ActionRecord]) -> None:
        for _ in range(MAX_STEPS_PER_CYCLE):
            record = records[-1]
            step = await self._step(job, record)
            if step is None or step == record:
                return
            records = [*records[:-1], step]
            await self._save(job, records)
            if (step.state, step.reason) != (record.state, record.reason):
                self._event(job, step)
            if is_final(step):
                return

    async def _step(self, job: JobView, record: ActionRecord) -> ActionRecord | None:
        at = self.clock()
        if job.status.get("phase") in TERMINAL_PHASES and record.state is not ActionState.APPLYING:
            await checkpoint.withdraw(self.kube, job.pods, request_id(record))
            return transition(record, ActionState.FAILED, "JobFinished", "The job finished first.", at)
        if not self.settings.enabled:
            stopped = await self._stop(job, record, at)
            if stopped is not None:
                return stopped
        if record.state is ActionState.PLANNED:
            return await self._planned(job, record, at)
        if record.state is ActionState.WAITING_FOR_CHECKPOINT:
            return await self._waiting(job, record, at)
        if record.state is ActionState.APPLYING:
            try:
                return await self._applying(job, record, at)
            except ActionFailed as failed:
                return self._roll_back(record, failed.reason, failed.message, at)
        if record.state is ActionState.VERIFYING:
            return await self._verifying(job, record, at)
        return None

    async def _stop(self, job: JobView, record: ActionRecord, at: datetime) -> ActionRecord | None:
        """The kill switch (`actions.enabled: false`) reached an action in flight: end it at its next
        safe point. None: this is not one yet, the step goes on as usual.

        Before the restart (Planned, WaitingForCheckpoint) nothing has changed: it ends there. While
        node preparation holds the job suspended, the change is rolled back (the job resumes from
        the checkpoint it just took, on nodes as they were). A job already being restarted is
        brought up first, as are rollbacks: stopping half-way would leave it stopped. Verification
        ends without a verdict, because a revert would be one more restart.
        """
        off = "The operator's actions were turned off (actions.enabled: false)"
        if record.state is ActionState.PLANNED:
            return transition(record, ActionState.STOPPED, ACTIONS_DISABLED, f"{off}; nothing was changed.", at)
        if record.state is ActionState.WAITING_FOR_CHECKPOINT:
            await checkpoint.withdraw(self.kube, job.pods, request_id(record))
            kept = "the job keeps the changed configuration" if record.reverting else "the job was not restarted"
            return transition(record, ActionState.STOPPED, ACTIONS_DISABLED, f"{off}; {kept}.", at)
        if record.state is ActionState.APPLYING and not record.reverting:
            action = self.kinds[record.action]
            if action.prepares_nodes and record.details.get("prepared") != "true":
                return self._roll_back(record, ACTIONS_DISABLED, f"{off} while nodes were being prepared", at)
        if record.state is ActionState.VERIFYING:
            message = f"{off}; the job keeps running with the new configuration, not verified."
            return transition(record, ActionState.STOPPED, ACTIONS_DISABLED, message, at)
        return None

    async def _request_checkpoint(
        self, job: JobView, record: ActionRecord, reason: str, why: str, at: datetime
    ) -> ActionRecord:
        rid = request_id(record)
        asked = await checkpoint.request(self.kube, job.pods, rid)
        record = record.model_copy(update={"checkpoint_requested_at": at, "checkpoint_acknowledged_at": None})
        timeout = job.spec.checkpoint.timeout_seconds
        message = f"{why}Asked {asked} worker pod(s) to checkpoint (request {rid}); waiting up to {timeout} s."
        return transition(record, ActionState.WAITING_FOR_CHECKPOINT, reason, message, at)

    async def _planned(self, job: JobView, record: ActionRecord, at: datetime) -> ActionRecord:
        if record.restart:
            return await self._request_checkpoint(job, record, "CheckpointRequested", "", at)
        return transition(record, ActionState.APPLYING, "Applying", record.message, at)

    async def _waiting(self, job: JobView, record: ActionRecord, at: datetime) -> ActionRecord | None:
        rid = request_id(record)
        if guardrails.do_not_disrupt(job) and not record.reverting:
            await checkpoint.withdraw(self.kube, job.pods, rid)
            return transition(record, ActionState.FAILED, "DoNotDisrupt", "The job was annotated do-not-disrupt.", at)
        await checkpoint.request(self.kube, job.pods, rid)  # pods that appeared since
        acked = await self.acks.acknowledged(job.namespace, job.name, rid)
        if acked is not None:
            record = record.model_copy(
                update={
                    "checkpoint_acknowledged_at": datetime.fromtimestamp(int(acked.at), UTC),
                    **_resume(record, acked),
                }
            )
            what = "the previous configuration" if record.reverting else "the new configuration"
            message = f"Worker 0 acknowledged checkpoint request {rid}; restarting the job with {what}."
            return transition(record, ActionState.APPLYING, "CheckpointAcknowledged", message, at)
        requested = record.checkpoint_requested_at or record.updated_at
        timeout = job.spec.checkpoint.timeout_seconds
        if (at - requested).total_seconds() <= timeout:
            return None
        await checkpoint.withdraw(self.kube, job.pods, rid)
        kept = " and keeps the changed configuration" if record.reverting else ""
        message = f"Worker 0 did not acknowledge checkpoint request {rid} within {timeout} s: not restarted{kept}."
        return transition(record, ActionState.FAILED, "CheckpointTimeout", message, at)

    def _roll_back(self, record: ActionRecord, reason: str, message: str, at: datetime) -> ActionRecord:
        """Go back to the previous overrides (the job is stopped or never ran with the new ones)."""
        if record.reverting:
            return transition(record, ActionState.FAILED, reason, f"{message}; rolling back failed too.", at)
        record = record.model_copy(update={"reverting": True, "details": {**record.details, "failure": reason}})
        return transition(record, ActionState.APPLYING, reason, f"{message}; rolling back.", at)

    async def _set_overrides(self, job: JobView, wanted: JobOverrides) -> bool:
        """Whether the job's body already shows `wanted`; if not, write it (and wait for the watch)."""
        if job.overrides == wanted:
            return True
        patch = job_overrides.annotation_patch(wanted)
        await self.kube.patch(job.body["apiVersion"], KIND, job.namespace, job.name, patch)
        return False

    async def _applying(self, job: JobView, record: ActionRecord, at: datetime) -> ActionRecord | None:
        """Run the job with the target overrides (the previous ones when reverting), one step a call.

        Forward and back are the same steps: write the overrides (held suspended while a
        node-side hook has work to do), replace the Job rendered with other ones, run the hook
        (`prepare` forward, `undo` back) until ready, release the Job.
        """
        action = self.kinds[record.action]
        if record.reverting:
            target, hook, flag = record.overrides_before or job_overrides.NONE, action.undo, "undone"
        else:
            target, hook, flag = record.overrides_target or job_overrides.NONE, action.prepare, "prepared"
            limit = parse_duration(self.settings.apply_timeout)
            if (at - _entered(record, ActionState.APPLYING)).total_seconds() > limit:
                raise ActionFailed("ApplyTimeout", f"The change did not complete within {self.settings.apply_timeout}")
        ready = not action.prepares_nodes or record.details.get(flag) == "true"
        if not await self._set_overrides(job, target.model_copy(update={"suspend": not ready})):
            return None
        current = await self.kube.get("batch/v1", "Job", job.namespace, job.name)
        if current is None or current["metadata"].get("deletionTimestamp"):
            return None  # the reconciler renders the new Job from the overrides once the old one is gone
        if job_overrides.applied(current) != target.placement():
            await self.kube.delete("batch/v1", "Job", job.namespace, job.name)
            return None
        # Hold or release it now: the reconciler would, but only at its next resync.
        await follow_mutable_fields(current, job.spec, target.model_copy(update={"suspend": not ready}), self.kube)
        if not ready:
            progress = await hook(job, record, ActContext(kube=self.kube, settings=self.settings, now=at))
            details = {**record.details, **progress.details, **({flag: "true"} if progress.ready else {})}
            return record.model_copy(update={"details": details, "message": progress.message or record.message})
        if record.reverting:
            reason = record.details.get("failure", "Reverted")
            message = f"The job runs with its previous configuration again ({reason})."
            return transition(record, ActionState.ROLLED_BACK, reason, message, at)
        if not action.verifies:
            reason, message = action.done(record)
            return transition(record, ActionState.DONE, reason, message, at)
        window = self.settings.verify_window
        message = f"The job restarted with the new configuration; measuring it for {window} once it runs."
        return transition(record, ActionState.VERIFYING, "JobRestarted", message, at)

    async def _verifying(self, job: JobView, record: ActionRecord, at: datetime) -> ActionRecord | None:
        if job.status.get("phase") == Phase.QUEUED.value:
            return None  # back in its Kueue queue after the restart: the queue decides when it runs
        if job.status.get("phase") != Phase.RUNNING.value:
            waited = (at - _entered(record, ActionState.VERIFYING)).total_seconds()
            if waited > parse_duration(self.settings.apply_timeout):
                # e.g. no node left to schedule on: back to what ran (its pods never started: no checkpoint)
                message = f"The restarted job did not run within {self.settings.apply_timeout}"
                return self._roll_back(record, "NotRunning", message, at)
            return None
        since = record.details.get("runningSince")
        if since is None:
            details = {**record.details, "runningSince": at.isoformat()}
            return record.model_copy(update={"details": details})
        if (at - datetime.fromisoformat(since)).total_seconds() < parse_duration(self.settings.verify_window):
            return None
        result = await self.meter.measure(job.namespace, job.name, at)
        measured = record.model_copy(update={"result": result, "measured_speedup": speedup(record.baseline, result)})
        verdict = self.kinds[record.action].verify(measured, self.settings)
        if verdict.keep:
            return transition(measured, ActionState.DONE, verdict.reason, verdict.message, at)
        reverting = measured.model_copy(update={"reverting": True, "details": {**record.details, "failure": WORSE}})
        return await self._request_checkpoint(
            job, reverting, WORSE, f"{verdict.message}: reverting to the previous configuration. ", at
        )

    # --- writing ----------------------------------------------------------------------------

    async def _save(self, job: JobView, records: list[ActionRecord]) -> None:
        kept = trimmed(records)
        body = {"status": {"actions": [r.to_k8s() for r in kept]}}
        await self.kube.patch(job.body["apiVersion"], KIND, job.namespace, job.name, body, status=True)
        self._written[job.namespace, job.name] = kept

    def _event(self, job: JobView, record: ActionRecord) -> None:
        post = kopf.warn if record.state in WARNING_STATES or record.reason == WORSE else kopf.info
        message = f"{record.action.value} {record.id} {record.state.value}: {record.message}"
        ACTIONS.count(job.namespace, job.name, record.action.value, record.state.value)  # the actions-taken panel
        post(as_body(dict(job.body)), reason=record.reason, message=message)
