"""How the action runner moves an action along, one step at a time (issue 23): what each
transition says (reason, message, Event), what it writes (the record's times, `resumeFrom`, the
overrides, the pods' checkpoint request), and what a cycle takes (at most MAX_STEPS_PER_CYCLE
steps; an Event only for a new state or reason).

The harness is `tests.act.cycles` (the emulator over HTTP, a real Prometheus, a clock the test
moves). `Scripted` is a node-side action kind whose hooks answer as the test says: the runner's
part of node preparation, without any real node work in the way.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest
from kopf._core.engines import posting

from gpuwise import wiring
from gpuwise.act.action_settings import ActionSettings
from gpuwise.act.checkpoint import Ack
from gpuwise.act.kinds import AVAILABLE
from gpuwise.act.machine import (
    WORSE,
    ActContext,
    Action,
    ActionFailed,
    JobView,
    Progress,
    Verdict,
    request_id,
    transition,
)
from gpuwise.act.runner import MAX_STEPS_PER_CYCLE, Runner, _entered, _resume, records_of, speedup
from gpuwise.api.kinds import ActionKind
from gpuwise.api.overrides import JobOverrides
from gpuwise.api.trainingjob import ActionRecord, ActionState, Measurement
from gpuwise.kube import job_overrides
from tests.act.conftest import drained
from tests.act.cycles import SETTINGS, START, Job, acknowledge, job_fixture, record_in  # noqa: F401
from tests.act.scenario import TJ_API
from tests.support.prometheus import AVAILABLE as HAS_PROMETHEUS
from tests.support.prometheus import Prometheus
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not HAS_PROMETHEUS, reason="needs prometheus (make system-deps)"),
]

OFF = SETTINGS.model_copy(update={"enabled": False})
OFF_SAID = "The operator's actions were turned off (actions.enabled: false)"
REQUEST = wiring.ANNOTATION_CHECKPOINT_REQUEST
TIMEOUT = 60  # the job's spec.checkpoint.timeoutSeconds (scenario.trainingjob)
FOUR = JobOverrides(env={"NUM_WORKERS": "4"})
TWO = JobOverrides(env={"NUM_WORKERS": "2"})
CHECKPOINT = "/checkpoints/step-00000400.pt"


def asked(job: Job, rid: str) -> None:
    """Worker 0's pod carries the checkpoint request `rid`, as a previous cycle left it."""
    job.cluster.patch("v1", "Pod", "bert-0", {"metadata": {"annotations": {REQUEST: rid}}})


def phase(job: Job, value: str) -> None:
    job.cluster.patch(TJ_API, "TrainingJob", "bert", {"status": {"phase": value}}, status=True)


def wanting(job: Job, overrides: JobOverrides) -> None:
    """The TrainingJob already asks for `overrides` (an earlier cycle wrote them)."""
    job.cluster.patch(TJ_API, "TrainingJob", "bert", job_overrides.annotation_patch(overrides))


def batch_job(job: Job) -> dict[str, Any]:
    found = job.cluster.get("batch/v1", "Job", "bert")
    assert found is not None
    return found


class Scripted(Action):
    """A node-side kind (in Pack's place) whose hooks give the answers the test lines up, the last
    one again once the others are used; it remembers each call: hook, record id, cycle time, settings."""

    kind = ActionKind.PACK
    prepares_nodes = True

    def __init__(self, *answers: Progress | ActionFailed, verdict: Verdict | None = None) -> None:
        self.answers = list(answers)
        self.verdict = verdict or Verdict(True, "NoWorse", "kept")
        self.calls: list[tuple[str, str, datetime, object]] = []

    def _answer(self, hook: str, record: ActionRecord, ctx: ActContext) -> Progress:
        self.calls.append((hook, record.id, ctx.now, ctx.settings))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, ActionFailed):
            raise answer
        return answer

    async def prepare(self, job: JobView, record: ActionRecord, ctx: ActContext) -> Progress:
        return self._answer("prepare", record, ctx)

    async def undo(self, job: JobView, record: ActionRecord, ctx: ActContext) -> Progress:
        return self._answer("undo", record, ctx)

    def verify(self, record: ActionRecord, settings: ActionSettings) -> Verdict:
        return self.verdict


def scripted(job: Job, kind: Scripted, settings: ActionSettings = SETTINGS) -> None:
    """The job's runner takes `kind` in Pack's place."""
    old = job.runner
    job.runner = Runner(old.kube, settings, old.acks, old.meter, kinds=(*AVAILABLE, kind), clock=job.clock)


# --- pure helpers ------------------------------------------------------------------------------


def test_entering_a_state_is_its_last_entry_in_the_history_else_the_last_update() -> None:
    record = record_in(ActionState.APPLYING, START)
    record = transition(record, ActionState.VERIFYING, "JobRestarted", "m", START + timedelta(seconds=5))
    assert _entered(record, ActionState.VERIFYING) == START + timedelta(seconds=5)
    assert _entered(record, ActionState.APPLYING) == START
    trimmed = record.model_copy(update={"history": [], "updated_at": START + timedelta(seconds=9)})
    assert _entered(trimmed, ActionState.VERIFYING) == START + timedelta(seconds=9)


def test_the_measured_speedup_is_rounded_to_three_places_and_needs_an_after() -> None:
    assert speedup(Measurement(samples_per_second=3, at=START), Measurement(samples_per_second=1, at=START)) == 0.333
    assert speedup(Measurement(samples_per_second=3, at=START), None) is None


def test_resuming_puts_the_checkpoint_on_the_overrides_the_job_restarts_into() -> None:
    forward = record_in(ActionState.WAITING_FOR_CHECKPOINT, START, overrides_before=TWO, overrides_target=FOUR)
    assert _resume(forward, Ack(1.0, CHECKPOINT)) == {
        "overrides_target": FOUR.model_copy(update={"resume_from": CHECKPOINT})
    }
    back = forward.model_copy(update={"reverting": True})
    assert _resume(back, Ack(1.0, CHECKPOINT)) == {
        "overrides_before": TWO.model_copy(update={"resume_from": CHECKPOINT})
    }
    older = FOUR.model_copy(update={"resume_from": "/checkpoints/old.pt"})
    unnamed = _resume(forward.model_copy(update={"overrides_target": older}), Ack(1.0, ""))
    assert unnamed == {"overrides_target": FOUR}, "no path given: no older path handed on"


# --- requesting and waiting for the checkpoint -------------------------------------------------


async def test_a_planned_restart_asks_every_worker_and_says_how_many_and_how_long(
    job: Job, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    planned = record_in(ActionState.PLANNED, job.start, restart=True)
    job.store(planned)
    record = await job.cycle(after=7)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT
    assert record.reason == "CheckpointRequested"
    assert record.message == f"Asked 1 worker pod(s) to checkpoint (request {planned.id}); waiting up to 60 s."
    assert record.checkpoint_requested_at == job.start + timedelta(seconds=7)
    assert job.request() == planned.id
    assert drained(events) == [("Normal", "CheckpointRequested")]


async def test_a_planned_change_without_restart_applies_at_once(job: Job) -> None:
    job.store(record_in(ActionState.PLANNED, job.start, restart=False))
    record = await job.cycle(after=3)
    assert record is not None and job.request() is None, "no checkpoint asked"
    assert [(t.state, t.reason, t.message) for t in record.history[1:3]] == [
        (ActionState.APPLYING, "Applying", "m"),
        (
            ActionState.VERIFYING,
            "JobRestarted",
            "The job restarted with the new configuration; measuring it for 5m once it runs.",
        ),
    ]


async def test_the_checkpoint_timeout_counts_from_the_request_not_the_last_update(job: Job) -> None:
    rid = f"adjustconfig-{int(job.start.timestamp())}"
    waiting = record_in(ActionState.WAITING_FOR_CHECKPOINT, job.start, checkpoint_requested_at=job.start)
    job.store(waiting.model_copy(update={"updated_at": job.start + timedelta(seconds=50)}))
    asked(job, rid)
    record = await job.cycle(after=61)
    assert record is not None and record.state is ActionState.FAILED and record.reason == "CheckpointTimeout"
    assert record.message == f"Worker 0 did not acknowledge checkpoint request {rid} within 60 s: not restarted."
    assert job.request() is None, "the request is withdrawn"


async def test_a_revert_whose_checkpoint_never_comes_keeps_the_changed_configuration(
    job: Job, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    waiting = record_in(
        ActionState.WAITING_FOR_CHECKPOINT, job.start, reverting=True, checkpoint_requested_at=job.start
    )
    rid = request_id(waiting)
    job.store(waiting)
    asked(job, rid)
    record = await job.cycle(after=61)
    assert record is not None and record.state is ActionState.FAILED and record.reason == "CheckpointTimeout"
    assert record.message == (
        f"Worker 0 did not acknowledge checkpoint request {rid} within 60 s: "
        "not restarted and keeps the changed configuration."
    )
    assert job.request() is None
    assert drained(events) == [("Warning", "CheckpointTimeout")]


async def test_a_job_annotated_do_not_disrupt_fails_the_wait_and_withdraws_the_request(
    job: Job, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    waiting = record_in(ActionState.WAITING_FOR_CHECKPOINT, job.start, checkpoint_requested_at=job.start)
    job.store(waiting)
    asked(job, waiting.id)
    annotation = {"metadata": {"annotations": {wiring.ANNOTATION_DO_NOT_DISRUPT: "true"}}}
    job.cluster.patch(TJ_API, "TrainingJob", "bert", annotation)
    record = await job.cycle(after=4)
    assert record is not None and record.state is ActionState.FAILED
    assert (record.reason, record.message) == ("DoNotDisrupt", "The job was annotated do-not-disrupt.")
    assert record.history[-1].at == job.start + timedelta(seconds=4)
    assert job.request() is None, "the trainer stops waiting for it"
    assert drained(events) == [("Warning", "DoNotDisrupt")]


async def test_do_not_disrupt_does_not_stop_a_revert(job: Job) -> None:
    waiting = record_in(
        ActionState.WAITING_FOR_CHECKPOINT, job.start, reverting=True, checkpoint_requested_at=job.start
    )
    job.store(waiting)
    asked(job, request_id(waiting))
    annotation = {"metadata": {"annotations": {wiring.ANNOTATION_DO_NOT_DISRUPT: "true"}}}
    job.cluster.patch(TJ_API, "TrainingJob", "bert", annotation)
    record = await job.cycle(after=4)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT, "going back disrupts less"
    assert job.request() == request_id(waiting)


async def test_an_acknowledged_revert_restarts_into_the_previous_configuration_from_the_checkpoint(
    job: Job, prometheus: Prometheus, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    waiting = record_in(
        ActionState.WAITING_FOR_CHECKPOINT,
        job.start,
        reverting=True,
        overrides_before=TWO,
        overrides_target=FOUR,
        checkpoint_requested_at=job.start,
    )
    rid = request_id(waiting)
    job.store(waiting)
    wanting(job, FOUR)
    asked(job, rid)
    acknowledge(prometheus, worker=0, rid=rid, at=job.start.timestamp() + 3, path=CHECKPOINT)
    record = await job.cycle(after=5)
    assert record is not None and record.state is ActionState.APPLYING and record.reverting
    assert record.reason == "CheckpointAcknowledged"
    assert (
        record.message
        == f"Worker 0 acknowledged checkpoint request {rid}; restarting the job with the previous configuration."
    )
    assert record.checkpoint_acknowledged_at == job.start + timedelta(seconds=3)
    resumed = TWO.model_copy(update={"resume_from": CHECKPOINT})
    assert (record.overrides_before, record.overrides_target) == (resumed, FOUR)
    assert job_overrides.wanted(job.body()) == resumed, "the previous configuration, from the checkpoint"
    assert drained(events) == [("Normal", "CheckpointAcknowledged")]


async def test_an_acknowledged_change_restarts_into_the_new_configuration(job: Job, prometheus: Prometheus) -> None:
    waiting = record_in(
        ActionState.WAITING_FOR_CHECKPOINT, job.start, overrides_target=FOUR, checkpoint_requested_at=job.start
    )
    job.store(waiting)
    acknowledge(prometheus, worker=0, rid=waiting.id, at=job.start.timestamp() + 2)
    record = await job.cycle(after=5)
    assert record is not None and record.state is ActionState.APPLYING and not record.reverting
    assert (
        record.message
        == f"Worker 0 acknowledged checkpoint request {waiting.id}; restarting the job with the new configuration."
    )
    assert record.overrides_target == FOUR, "no path given: none to resume from"
    assert job_overrides.wanted(job.body()) == FOUR


# --- the job finishing, the kill switch ------------------------------------------------------


@pytest.mark.parametrize("finished", ["Succeeded", "Failed"])
async def test_a_job_that_finishes_first_fails_the_action_and_withdraws_the_request(
    job: Job, finished: str, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    waiting = record_in(ActionState.WAITING_FOR_CHECKPOINT, job.start, checkpoint_requested_at=job.start)
    job.store(waiting)
    asked(job, waiting.id)
    phase(job, finished)
    record = await job.cycle(after=8)
    assert record is not None and record.state is ActionState.FAILED
    assert (record.reason, record.message) == ("JobFinished", "The job finished first.")
    assert record.history[-1].at == job.start + timedelta(seconds=8)
    assert job.request() is None
    assert drained(events) == [("Warning", "JobFinished")]


async def test_a_job_finishing_while_applying_still_gets_its_configuration(job: Job) -> None:
    job.store(record_in(ActionState.APPLYING, job.start, overrides_target=FOUR, restart=True))
    phase(job, "Succeeded")
    record = await job.cycle(after=8)
    assert record is not None and record.state is ActionState.APPLYING and not record.reverting
    assert job_overrides.wanted(job.body()) == FOUR, "a half-applied change is finished, not abandoned"


@pytest.mark.parametrize(
    ("state", "reverting", "said"),
    [
        (ActionState.PLANNED, False, f"{OFF_SAID}; nothing was changed."),
        (ActionState.WAITING_FOR_CHECKPOINT, False, f"{OFF_SAID}; the job was not restarted."),
        (ActionState.WAITING_FOR_CHECKPOINT, True, f"{OFF_SAID}; the job keeps the changed configuration."),
        (ActionState.VERIFYING, False, f"{OFF_SAID}; the job keeps running with the new configuration, not verified."),
    ],
)
async def test_turning_actions_off_says_what_the_job_is_left_with(
    job: Job, state: ActionState, reverting: bool, said: str
) -> None:
    record = record_in(state, job.start, reverting=reverting, checkpoint_requested_at=job.start)
    job.store(record)
    asked(job, request_id(record))
    job.runner.settings = OFF
    stopped = await job.cycle(after=30)
    assert stopped is not None and stopped.state is ActionState.STOPPED
    assert (stopped.reason, stopped.message) == ("ActionsDisabled", said)


async def test_turning_actions_off_while_nodes_are_prepared_rolls_back(
    job: Job, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    job.store(record_in(ActionState.APPLYING, job.start, ActionKind.PACK, details={"node": "n1"}))
    scripted(job, Scripted(Progress(True)), OFF)
    record = await job.cycle(after=30)
    assert record is not None and record.state is ActionState.APPLYING and record.reverting
    assert record.reason == "ActionsDisabled"
    assert record.message == f"{OFF_SAID} while nodes were being prepared; rolling back."
    assert record.details == {"node": "n1", "failure": "ActionsDisabled"}
    assert drained(events) == [("Normal", "ActionsDisabled")]


async def test_turning_actions_off_once_nodes_are_prepared_brings_the_job_up_first(job: Job) -> None:
    job.store(record_in(ActionState.APPLYING, job.start, ActionKind.PACK, details={"prepared": "true"}))
    kind = Scripted(Progress(True))
    scripted(job, kind, OFF)
    record = await job.cycle(after=30)
    assert record is not None and record.state is ActionState.STOPPED and not record.reverting
    assert [t.reason for t in record.history[-2:]] == ["JobRestarted", "ActionsDisabled"]
    assert kind.calls == [], "prepared already: the hook is not asked again"


# --- applying: node preparation, rolling back -------------------------------------------------


async def test_nodes_are_prepared_while_the_job_is_held_then_it_is_released(
    job: Job, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    job.store(record_in(ActionState.APPLYING, job.start, ActionKind.PACK, details={"node": "n1"}))
    kind = Scripted(Progress(False, "draining n1", {"drained": "0/2"}))
    scripted(job, kind)
    record = await job.cycle(after=1)  # the overrides: held
    assert job_overrides.wanted(job.body()) == job_overrides.NONE.model_copy(update={"suspend": True})
    assert kind.calls == []

    record = await job.cycle(after=1)  # asked twice: the second answer changes nothing
    assert batch_job(job)["spec"]["suspend"] is True, "the Job is held at once, not at the reconciler's next resync"
    assert record is not None and record.state is ActionState.APPLYING
    assert record.message == "draining n1"
    assert record.details == {"node": "n1", "drained": "0/2"}, "not prepared yet"
    assert kind.calls == 2 * [("prepare", record.id, job.start + timedelta(seconds=2), SETTINGS)]

    kind.answers = [Progress(True)]
    record = await job.cycle(after=1)  # prepared, and the overrides released
    assert record is not None and record.details == {"node": "n1", "drained": "0/2", "prepared": "true"}
    assert record.message == "draining n1", "a hook that says nothing leaves the message"
    assert job_overrides.wanted(job.body()) == job_overrides.NONE
    assert batch_job(job)["spec"]["suspend"] is True, "until the next cycle sees the overrides"

    record = await job.cycle(after=1)
    assert record is not None and record.state is ActionState.VERIFYING and record.reason == "JobRestarted"
    assert batch_job(job)["spec"]["suspend"] is False
    assert len(kind.calls) == 3
    assert drained(events) == [("Normal", "JobRestarted")], "progress is no transition"


async def test_a_hook_that_cannot_go_on_rolls_the_change_back(
    job: Job, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    job.store(record_in(ActionState.APPLYING, job.start, ActionKind.PACK, details={"node": "n1"}))
    wanting(job, job_overrides.NONE.model_copy(update={"suspend": True}))
    kind = Scripted(ActionFailed("NoRoom", "no node has room"), Progress(False, "restoring n1"))
    scripted(job, kind)
    record = await job.cycle(after=6)
    assert record is not None and record.state is ActionState.APPLYING and record.reverting
    failed = record.history[-1]
    assert (failed.reason, failed.message) == ("NoRoom", "no node has room; rolling back.")
    assert failed.at == job.start + timedelta(seconds=6)
    assert record.details == {"node": "n1", "failure": "NoRoom"}
    assert [hook for hook, *_ in kind.calls] == ["prepare", "undo", "undo"], "undone at once, in the same cycle"
    assert drained(events) == [("Normal", "NoRoom")]


async def test_a_rollback_that_cannot_go_on_fails(job: Job, events: asyncio.Queue[posting.K8sEvent]) -> None:
    back = record_in(ActionState.APPLYING, job.start, ActionKind.PACK, reverting=True, details={"failure": "NoRoom"})
    job.store(back)
    wanting(job, job_overrides.NONE.model_copy(update={"suspend": True}))
    kind = Scripted(ActionFailed("NodeGone", "node n1 is gone"))
    scripted(job, kind)
    record = await job.cycle(after=6)
    assert record is not None and record.state is ActionState.FAILED and record.reverting
    assert (record.reason, record.message) == ("NodeGone", "node n1 is gone; rolling back failed too.")
    assert record.history[-1].at == job.start + timedelta(seconds=6)
    assert [hook for hook, *_ in kind.calls] == ["undo"]
    assert drained(events) == [("Warning", "NodeGone")]


async def test_a_rollback_undoes_the_nodes_then_runs_the_previous_configuration(
    job: Job, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    back = record_in(
        ActionState.APPLYING,
        job.start,
        ActionKind.PACK,
        reverting=True,
        overrides_before=TWO,
        details={"failure": "NoRoom"},
    )
    job.store(back)
    kind = Scripted(Progress(True))
    scripted(job, kind)
    await job.cycle(after=1)
    assert job_overrides.wanted(job.body()) == TWO.model_copy(update={"suspend": True}), "the previous ones, held"
    await job.cycle(after=1)  # rendered with other overrides: replaced
    eventually(lambda: job.cluster.get("batch/v1", "Job", "bert") is None, what="the old Job deleted")
    job.render()
    record = await job.cycle(after=1)
    assert record is not None and record.details == {"failure": "NoRoom", "undone": "true"}
    assert [hook for hook, *_ in kind.calls] == ["undo"]
    await job.cycle(after=1)  # released
    record = await job.cycle(after=1)
    assert record is not None and record.state is ActionState.ROLLED_BACK
    assert (record.reason, record.message) == ("NoRoom", "The job runs with its previous configuration again (NoRoom).")
    assert job_overrides.applied(batch_job(job)) == TWO
    assert batch_job(job)["spec"]["suspend"] is False
    assert drained(events) == [("Warning", "NoRoom")]


async def test_a_rollback_without_a_recorded_failure_says_reverted(job: Job) -> None:
    job.store(record_in(ActionState.APPLYING, job.start, reverting=True))
    record = await job.cycle(after=1)
    assert record is not None and record.state is ActionState.ROLLED_BACK
    assert (record.reason, record.message) == (
        "Reverted",
        "The job runs with its previous configuration again (Reverted).",
    )


async def test_a_job_being_deleted_is_waited_for(job: Job) -> None:
    job.store(record_in(ActionState.APPLYING, job.start))
    deleting = {"metadata": {"deletionTimestamp": job.start.isoformat(), "finalizers": ["test/hold"]}}
    job.cluster.patch("batch/v1", "Job", "bert", deleting)
    record = await job.cycle(after=1)
    assert record is not None and record.state is ActionState.APPLYING, "the reconciler renders the next one"


async def test_the_apply_timeout_counts_from_entering_applying(job: Job) -> None:
    entered = record_in(ActionState.APPLYING, job.start, overrides_target=FOUR)
    job.store(entered.model_copy(update={"updated_at": job.start + timedelta(seconds=600)}))
    record = await job.cycle(after=1801)
    assert record is not None and record.state is ActionState.ROLLED_BACK and record.reason == "ApplyTimeout"
    timed_out = record.history[-2]
    assert (timed_out.reason, timed_out.message) == (
        "ApplyTimeout",
        "The change did not complete within 30m; rolling back.",
    )
    assert record.details == {"failure": "ApplyTimeout"}


async def test_a_change_judged_worse_asks_for_a_new_checkpoint_to_go_back(
    job: Job, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    since = job.start.isoformat()
    verifying = record_in(
        ActionState.VERIFYING,
        job.start,
        ActionKind.PACK,
        checkpoint_requested_at=job.start - timedelta(seconds=60),
        checkpoint_acknowledged_at=job.start - timedelta(seconds=50),
        details={"prepared": "true", "runningSince": since},
    )
    job.store(verifying)
    scripted(job, Scripted(Progress(True), verdict=Verdict(False, WORSE, "samples/s fell from 100 to 50")))
    record = await job.cycle(after=300)
    at = job.start + timedelta(seconds=300)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT and record.reverting
    assert record.reason == WORSE
    assert record.message == (
        "samples/s fell from 100 to 50: reverting to the previous configuration. "
        f"Asked 1 worker pod(s) to checkpoint (request {verifying.id}-revert); waiting up to 60 s."
    )
    assert record.details == {"prepared": "true", "runningSince": since, "failure": WORSE}
    assert (record.checkpoint_requested_at, record.checkpoint_acknowledged_at) == (at, None), "a new handshake"
    assert record.result is not None and record.result.at == at
    assert job.request() == f"{verifying.id}-revert"
    assert drained(events) == [("Warning", WORSE)]


# --- a cycle -----------------------------------------------------------------------------------


async def test_a_cycle_takes_at_most_four_steps(job: Job, events: asyncio.Queue[posting.K8sEvent]) -> None:
    job.store(record_in(ActionState.APPLYING, job.start, ActionKind.PACK))
    wanting(job, job_overrides.NONE.model_copy(update={"suspend": True}))
    kind = Scripted(*(Progress(False, f"draining, step {n}") for n in range(1, 9)))
    scripted(job, kind)
    record = await job.cycle(after=1)
    assert record is not None and record.message == f"draining, step {MAX_STEPS_PER_CYCLE}"
    assert len(kind.calls) == MAX_STEPS_PER_CYCLE
    assert drained(events) == [], "no new state or reason: no Event"


async def test_a_step_that_changes_nothing_ends_the_cycle(job: Job) -> None:
    job.store(record_in(ActionState.APPLYING, job.start, ActionKind.PACK))
    wanting(job, job_overrides.NONE.model_copy(update={"suspend": True}))
    kind = Scripted(Progress(False, "draining"))
    scripted(job, kind)
    record = await job.cycle(after=1)
    assert record is not None and record.message == "draining"
    assert len(kind.calls) == 2, "the second answer changed nothing"


async def test_earlier_actions_are_kept_as_the_last_one_moves(
    job: Job, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    old = [
        transition(
            record_in(ActionState.PLANNED, job.start - timedelta(hours=h)), ActionState.DONE, "Improved", "m", job.start
        )
        for h in (3, 2)
    ]
    planned = record_in(ActionState.PLANNED, job.start, restart=True)
    job.store(*old, planned)
    await job.cycle(after=1)
    actions = [ActionRecord.model_validate(a) for a in job.body()["status"]["actions"]]
    assert actions[:2] == old
    assert [(a.id, a.state) for a in actions[2:]] == [(planned.id, ActionState.WAITING_FOR_CHECKPOINT)]
    assert drained(events) == [("Normal", "CheckpointRequested")]


async def test_a_detail_the_watch_has_not_brought_back_is_not_recorded_again(job: Job) -> None:
    """When the restarted job is first seen running, the runner records when; a next cycle whose body
    the watch has not yet brought up to that write must not record it again, later."""
    job.store(record_in(ActionState.VERIFYING, job.start))
    lagging = job.body()  # the job as the watch will still show it next cycle
    record = await job.cycle(after=10)
    since = (job.start + timedelta(seconds=10)).isoformat()
    assert record is not None and record.details == {"runningSince": since}
    job.clock.advance(20)
    await job.runner.run(lagging, job.pods(), [lagging], [])
    assert records_of(job.body())[-1].details == {"runningSince": since}


def pod_annotations(job: Job, pod: str) -> dict[str, str]:
    found = job.cluster.get("v1", "Pod", pod)
    assert found is not None
    return found["metadata"].get("annotations") or {}


async def test_a_worker_pod_being_deleted_is_neither_asked_nor_told(job: Job) -> None:
    """A pod on its way out (deletionTimestamp set) will not checkpoint, and a patch could race its
    removal: the request goes to the live pods only, and so does its withdrawal."""
    leaving = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bert-1", "labels": {wiring.LABEL_TRAININGJOB: "bert"}, "annotations": {REQUEST: "old"}},
        "spec": {"containers": [{"name": "trainer", "image": "x"}]},
    }
    job.cluster.create(leaving)
    deleting = {"metadata": {"deletionTimestamp": job.start.isoformat(), "finalizers": ["test/hold"]}}
    job.cluster.patch("v1", "Pod", "bert-1", deleting)
    planned = record_in(ActionState.PLANNED, job.start, restart=True)
    job.store(planned)
    record = await job.cycle()
    assert record is not None and record.message.startswith("Asked 1 worker pod(s) to checkpoint")
    assert pod_annotations(job, "bert-0")[REQUEST] == planned.id
    assert pod_annotations(job, "bert-1")[REQUEST] == "old", "not asked"
    job.cluster.patch("v1", "Pod", "bert-1", {"metadata": {"annotations": {REQUEST: planned.id}}})
    record = await job.cycle(after=TIMEOUT + 1)
    assert record is not None and record.reason == "CheckpointTimeout"
    assert REQUEST not in pod_annotations(job, "bert-0")
    assert pod_annotations(job, "bert-1")[REQUEST] == planned.id, "not told either"
