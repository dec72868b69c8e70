"""The action runner's state machine, one cycle at a time, on a clock the test moves (issue 23).

The end-to-end scenarios show that an action gets there; these show *when* each transition
happens: a checkpoint answered just before its timeout and one that never comes, a verify window
one second short and exactly full, worker 1's acknowledgement alone against worker 0's, and the
kill switch (`actions.enabled: false`) reaching an action in every state. The harness is
`tests.act.cycles`: the emulator over HTTP, a real Prometheus, and the test playing the Job
controller and the reconciler.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import datetime, timedelta

import pytest
from kopf._core.engines import posting

from gpuwise import wiring
from gpuwise.act.guardrails import counted
from gpuwise.act.machine import WORSE, is_final, request_id, transition
from gpuwise.act.measure import throughput_query
from gpuwise.act.runner import speedup
from gpuwise.api.kinds import ActionKind
from gpuwise.api.trainingjob import ActionRecord, ActionState, Measurement
from gpuwise.kube import job_overrides
from tests.act.conftest import drained
from tests.act.cycles import (  # noqa: F401
    MORE_WORKERS,
    SAMPLES,
    SETTINGS,
    START,
    Job,
    acknowledge,
    job_fixture,
    record_in,
)
from tests.act.scenario import TJ_API
from tests.integration.conftest import Cluster
from tests.support.prometheus import AVAILABLE as HAS_PROMETHEUS
from tests.support.prometheus import Prometheus
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not HAS_PROMETHEUS, reason="needs prometheus (make system-deps)"),
]

TIMEOUT = 60  # the job's spec.checkpoint.timeoutSeconds (scenario.trainingjob)
SETTINGS_WINDOW = 300  # SETTINGS.verify_window, in seconds
REQUEST = wiring.ANNOTATION_CHECKPOINT_REQUEST
OFF = SETTINGS.model_copy(update={"enabled": False})


async def test_a_restart_walks_every_state_when_the_clock_says(
    job: Job, prometheus: Prometheus, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    record = await job.cycle(MORE_WORKERS)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT
    assert [(t.state, t.at) for t in record.history] == [
        (ActionState.PLANNED, job.start),
        (ActionState.WAITING_FOR_CHECKPOINT, job.start),
    ]
    rid = request_id(record)
    assert job.request() == rid, "worker 0's pod is asked to checkpoint"
    assert drained(events) == [("Normal", "Planned"), ("Normal", "CheckpointRequested")]

    acknowledge(prometheus, worker=1, rid=rid, at=job.start.timestamp() + 5)
    record = await job.cycle(after=10)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT, "worker 1 alone saves nothing"

    acknowledge(prometheus, worker=0, rid=rid, at=job.start.timestamp() + 12)
    record = await job.cycle(after=10)
    assert record is not None and record.state is ActionState.APPLYING
    assert record.reason == "CheckpointAcknowledged"
    assert record.history[-1].at == job.start + timedelta(seconds=20)
    assert record.checkpoint_acknowledged_at == job.start + timedelta(seconds=12), "worker 0's time, not the cycle's"
    assert job_overrides.wanted(job.body()).env == {"NUM_WORKERS": "4"}, "the new configuration is written"

    await job.cycle(after=1)  # the old Job goes
    eventually(lambda: job.cluster.get("batch/v1", "Job", "bert") is None, what="the old Job deleted")
    job.render()
    record = await job.cycle(after=1)
    assert record is not None and record.state is ActionState.VERIFYING
    assert job_overrides.applied(job.cluster.get("batch/v1", "Job", "bert") or {}).env == {"NUM_WORKERS": "4"}

    running_since = datetime.fromisoformat(record.details["runningSince"])
    assert running_since == job.clock(), "measured from the cycle that saw it running"
    record = await job.cycle(after=SETTINGS_WINDOW - 1)
    assert record is not None and record.state is ActionState.VERIFYING, "one second short of the verify window"
    record = await job.cycle(after=1)
    assert record is not None and record.state is ActionState.DONE
    assert record.reason == "NotMeasured", "no throughput on either side: kept, and said so"
    assert (record.expected_speedup, record.expected_effect) == (2.5, MORE_WORKERS.expected_effect), "as planned"
    assert record.measured_speedup is None, "nothing measured, no ratio invented"
    assert record.history[-1].at == running_since + timedelta(seconds=SETTINGS_WINDOW)


async def test_a_checkpoint_answered_at_its_timeout_counts_and_one_second_later_not(
    job: Job, prometheus: Prometheus
) -> None:
    requested = await job.cycle(MORE_WORKERS)
    assert requested is not None and requested.state is ActionState.WAITING_FOR_CHECKPOINT
    record = await job.cycle(after=TIMEOUT)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT, "exactly at the timeout"
    record = await job.cycle(after=1)
    assert record is not None and record.state is ActionState.FAILED and record.reason == "CheckpointTimeout"
    assert record.history[-1].at == job.start + timedelta(seconds=TIMEOUT + 1)
    assert job.request() is None, "the request is withdrawn: the trainer stops waiting for it"
    assert job_overrides.wanted(job.body()) == job_overrides.NONE, "nothing was changed"


async def test_an_acknowledgement_at_the_last_second_restarts(job: Job, prometheus: Prometheus) -> None:
    requested = await job.cycle(MORE_WORKERS)
    assert requested is not None
    acknowledge(prometheus, worker=0, rid=request_id(requested), at=job.start.timestamp() + TIMEOUT)
    record = await job.cycle(after=TIMEOUT)
    assert record is not None and record.state is ActionState.APPLYING


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (ActionState.PLANNED, "nothing was changed"),
        (ActionState.WAITING_FOR_CHECKPOINT, "the job was not restarted"),
        (ActionState.VERIFYING, "not verified"),
    ],
)
async def test_turning_actions_off_stops_an_action_record_in(
    job: Job, state: ActionState, message: str, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    record = record_in(state, at=job.start, checkpoint_requested_at=job.start)
    if state is ActionState.WAITING_FOR_CHECKPOINT:
        job.cluster.patch("v1", "Pod", "bert-0", {"metadata": {"annotations": {REQUEST: request_id(record)}}})
    job.store(record)
    job.runner.settings = OFF
    stopped = await job.cycle(after=30)
    assert stopped is not None and stopped.state is ActionState.STOPPED
    assert stopped.reason == "ActionsDisabled" and message in stopped.message
    assert stopped.history[-1].at == job.start + timedelta(seconds=30)
    assert job.request() is None, "no checkpoint request left behind"
    assert job.cluster.get("batch/v1", "Job", "bert") is not None, "the running Job is left alone"
    assert drained(events) == [("Warning", "ActionsDisabled")]


async def test_turning_actions_off_rolls_back_a_node_change_not_yet_made(job: Job) -> None:
    job.store(record_in(ActionState.APPLYING, job.start, ActionKind.MIG_REPARTITION))
    job.runner.settings = OFF
    record = await job.cycle(after=30)
    assert record is not None and record.state is ActionState.APPLYING
    assert record.reverting and record.reason == "ActionsDisabled", "back to what the job ran with"


async def test_turning_actions_off_lets_a_restart_under_way_come_up_first(job: Job) -> None:
    target = job_overrides.NONE.model_copy(update={"env": {"NUM_WORKERS": "4"}})
    job.store(record_in(ActionState.APPLYING, at=job.start, overrides_target=target, restart=True))
    job.runner.settings = OFF
    record = await job.cycle(after=1)  # writes the new overrides: the job was already stopped
    assert record is not None and record.state is ActionState.APPLYING and not record.reverting
    await job.cycle(after=1)
    eventually(lambda: job.cluster.get("batch/v1", "Job", "bert") is None, what="the old Job deleted")
    job.render()
    record = await job.cycle(after=1)
    assert record is not None and record.state is ActionState.STOPPED, "up with the new configuration, then stopped"
    assert [t.state for t in record.history[-2:]] == [ActionState.VERIFYING, ActionState.STOPPED]
    assert job_overrides.applied(job.cluster.get("batch/v1", "Job", "bert") or {}).env == {"NUM_WORKERS": "4"}


async def test_turning_actions_back_on_acts_on_what_was_refused(
    job: Job, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    job.runner.settings = OFF
    assert await job.cycle(MORE_WORKERS) is None
    assert drained(events) == [("Normal", "ActionNotTaken")]
    assert await job.cycle(MORE_WORKERS, after=30) is None
    assert drained(events) == [], "told once"
    job.runner.settings = SETTINGS
    record = await job.cycle(MORE_WORKERS, after=30)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT, "the same job, judged again"


def test_a_stopped_action_is_final_and_counted() -> None:
    stopped = transition(record_in(ActionState.PLANNED), ActionState.STOPPED, "ActionsDisabled", "m", START)
    assert is_final(stopped)
    assert counted([stopped]) == [stopped], "it was attempted: it counts against maxActionsPerJob"


def version(cluster: Cluster, api_version: str, kind: str, name: str) -> tuple[str, str]:
    """An object's uid and resourceVersion: unchanged means nobody wrote it."""
    found = cluster.get(api_version, kind, name)
    assert found is not None
    return found["metadata"]["uid"], found["metadata"]["resourceVersion"]


async def test_an_operator_killed_in_any_state_goes_on_without_doing_anything_twice(
    job: Job, prometheus: Prometheus
) -> None:
    """Issue 20: after every cycle the operator dies, and a new one (a fresh Runner, which knows
    only what the cluster holds) takes over. The action still asks for one checkpoint, replaces
    the Job once, and measures from the time it first saw the job running."""
    record = await job.cycle(MORE_WORKERS)  # Planned -> WaitingForCheckpoint
    assert record is not None
    rid = request_id(record)
    pod = version(job.cluster, "v1", "Pod", "bert-0")
    job.runner = job.new_runner(SETTINGS)
    assert (await job.cycle(after=5) or record).state is ActionState.WAITING_FOR_CHECKPOINT
    assert version(job.cluster, "v1", "Pod", "bert-0") == pod, "the request is not asked again"

    acknowledge(prometheus, worker=0, rid=rid, at=job.clock().timestamp())
    job.runner = job.new_runner(SETTINGS)
    record = await job.cycle(after=5)  # Applying: the overrides written, the old Job still there
    assert record is not None and record.state is ActionState.APPLYING
    old_job = version(job.cluster, "batch/v1", "Job", "bert")

    job.runner = job.new_runner(SETTINGS)
    await job.cycle(after=5)  # deletes the old Job
    eventually(lambda: job.cluster.get("batch/v1", "Job", "bert") is None, what="the old Job deleted")
    job.runner = job.new_runner(SETTINGS)
    record = await job.cycle(after=5)  # killed between the delete and the re-creation: waits for it
    assert record is not None and record.state is ActionState.APPLYING
    job.render()
    new_job = version(job.cluster, "batch/v1", "Job", "bert")
    assert new_job[0] != old_job[0]

    job.runner = job.new_runner(SETTINGS)
    record = await job.cycle(after=5)  # Verifying, running since now
    assert record is not None and record.state is ActionState.VERIFYING
    since = record.details["runningSince"]
    for _ in range(2):
        job.runner = job.new_runner(SETTINGS)
        record = await job.cycle(after=SETTINGS_WINDOW / 2 - 1)
        assert record is not None and record.details["runningSince"] == since, "the clock is not restarted"
    job.runner = job.new_runner(SETTINGS)
    record = await job.cycle(after=2)
    assert record is not None and record.state is ActionState.DONE
    assert version(job.cluster, "batch/v1", "Job", "bert")[0] == new_job[0], "replaced once"
    assert [t.state for t in record.history].count(ActionState.WAITING_FOR_CHECKPOINT) == 1


APPLY_TIMEOUT = 1800  # SETTINGS.apply_timeout, in seconds


async def test_a_change_not_applied_within_its_timeout_is_rolled_back_one_second_past_it(job: Job) -> None:
    target = job_overrides.NONE.model_copy(update={"env": {"NUM_WORKERS": "4"}})
    job.store(record_in(ActionState.APPLYING, at=job.start, overrides_target=target, restart=True))
    record = await job.cycle(after=APPLY_TIMEOUT)
    assert record is not None and record.state is ActionState.APPLYING and not record.reverting, "at the limit"
    record = await job.cycle(after=1)
    assert record is not None and record.reverting and record.reason == "ApplyTimeout"
    assert record.history[-1].at == job.start + timedelta(seconds=APPLY_TIMEOUT + 1)


async def test_a_restarted_job_that_does_not_run_within_the_timeout_is_rolled_back(job: Job) -> None:
    job.store(record_in(ActionState.VERIFYING, at=job.start))
    job.cluster.patch(TJ_API, "TrainingJob", "bert", {"status": {"phase": "Pending"}}, status=True)
    record = await job.cycle(after=APPLY_TIMEOUT)
    assert record is not None and record.state is ActionState.VERIFYING, "at the limit: still waiting for it"
    record = await job.cycle(after=1)
    assert record is not None and record.reverting and record.reason == "NotRunning"
    said = [t.message for t in record.history if t.reason == "NotRunning"]
    assert said and said[0].startswith("The restarted job did not run within 30m"), record.history


async def test_the_apply_timeout_counts_from_entering_verification_not_from_the_last_update(job: Job) -> None:
    entered = record_in(ActionState.VERIFYING, at=job.start)
    job.store(entered.model_copy(update={"updated_at": job.start + timedelta(seconds=600)}))
    job.cluster.patch(TJ_API, "TrainingJob", "bert", {"status": {"phase": "Pending"}}, status=True)
    record = await job.cycle(after=APPLY_TIMEOUT + 1)
    assert record is not None and record.reverting and record.reason == "NotRunning"


async def test_a_restarted_job_back_in_its_queue_is_not_timed_out(job: Job) -> None:
    job.store(record_in(ActionState.VERIFYING, at=job.start))
    job.cluster.patch(TJ_API, "TrainingJob", "bert", {"status": {"phase": "Queued"}}, status=True)
    record = await job.cycle(after=APPLY_TIMEOUT + 600)
    assert record is not None and record.state is ActionState.VERIFYING and not record.reverting, "Kueue decides"


METER_WINDOW = 5.0  # seconds: a measurement that follows a change of throughput within seconds
PODS = itertools.count()


def throughput(prometheus: Prometheus, rate: float) -> None:
    """From now on the job's only sidecar, a pod never seen before, counts `rate` samples a second;
    wait until two measurements over `METER_WINDOW`, a scrape apart, see exactly that."""
    SAMPLES.clear()
    SAMPLES[f"bert-0-{next(PODS)}"] = (rate, time.time())
    query = throughput_query(f"{METER_WINDOW:g}s")
    steady: list[bool] = []

    def seen() -> bool:
        result = prometheus.query(query)
        steady.append(len(result) == 1 and abs(float(result[0]["value"][1]) - rate) < 0.01 * rate)
        return steady[-2:] == [True, True]

    eventually(seen, timeout=40.0, interval=1.0, what=f"{rate} samples/s measured")


async def restarted(job: Job, prometheus: Prometheus) -> ActionRecord:
    """MORE_WORKERS planned, acknowledged by worker 0, applied and running again: Verifying."""
    record = await job.cycle(MORE_WORKERS)
    assert record is not None
    acknowledge(prometheus, worker=0, rid=request_id(record), at=job.clock().timestamp() + 1)
    await job.cycle(after=5)  # Applying
    await job.cycle(after=1)  # the old Job goes
    eventually(lambda: job.cluster.get("batch/v1", "Job", "bert") is None, what="the old Job deleted")
    job.render()
    record = await job.cycle(after=1)
    assert record is not None and record.state is ActionState.VERIFYING
    return record


@pytest.fixture(name="metered")
def metered_fixture(job: Job) -> Job:
    job.meter_window = METER_WINDOW
    job.runner = job.new_runner(SETTINGS)
    return job


async def test_a_verified_change_keeps_its_measured_speedup_beside_the_expected_one(
    metered: Job, prometheus: Prometheus
) -> None:
    throughput(prometheus, 100.0)
    verifying = await restarted(metered, prometheus)
    assert verifying.baseline is not None and verifying.baseline.samples_per_second == pytest.approx(100, rel=0.03)
    throughput(prometheus, 150.0)
    record = await metered.cycle(after=SETTINGS_WINDOW)
    assert record is not None and record.state is ActionState.DONE and record.reason == "Improved"
    assert record.baseline == verifying.baseline, "the baseline is the one taken before the change"
    assert record.result is not None and record.result.samples_per_second == pytest.approx(150, rel=0.03)
    assert record.measured_speedup == pytest.approx(1.5, rel=0.05)
    assert (record.expected_speedup, record.expected_effect) == (2.5, MORE_WORKERS.expected_effect)
    before, after = verifying.baseline.samples_per_second, record.result.samples_per_second
    assert record.message == f"samples/s: {before:.3g} before, {after:.3g} after"
    assert not record.reverting and "failure" not in record.details


async def test_a_change_that_made_the_job_slower_is_reverted_through_a_new_checkpoint(
    metered: Job, prometheus: Prometheus
) -> None:
    throughput(prometheus, 100.0)
    first = await restarted(metered, prometheus)
    throughput(prometheus, 50.0)
    record = await metered.cycle(after=SETTINGS_WINDOW)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT
    assert record.reverting and record.reason == WORSE and record.details["failure"] == WORSE
    assert record.result is not None and record.result.samples_per_second == pytest.approx(50, rel=0.03)
    assert record.measured_speedup == pytest.approx(0.5, rel=0.05)
    assert first.baseline is not None
    before, after = first.baseline.samples_per_second, record.result.samples_per_second
    assert record.message.startswith(f"samples/s fell from {before:.3g} to {after:.3g}: reverting to the previous")
    rid = request_id(record)
    assert rid != request_id(first) and metered.request() == rid, "worker 0 is asked again, for the way back"


def test_the_measured_speedup_needs_both_sides_measured() -> None:
    at = START
    assert speedup(Measurement(samples_per_second=10, at=at), Measurement(samples_per_second=25, at=at)) == 2.5
    assert speedup(Measurement(samples_per_second=0, at=at), Measurement(samples_per_second=25, at=at)) is None
    assert speedup(None, Measurement(samples_per_second=25, at=at)) is None
    assert speedup(Measurement(samples_per_second=10, at=at), Measurement(gpu_utilization=50, at=at)) is None
