"""The action runner's starting half, one cycle at a time (issue 23): which recommendation becomes an
action, which are refused and told, and what the runner remembers between cycles.

A job's recommendations are tried in order: one that is not listed or not a kind the runner takes
is passed over silently; one refused by its plan, by a revert before, by the guardrails or by the
cluster (`admit`) is told once in an `ActionNotTaken` Event, and the next one is tried. When every
one was refused for a lasting reason, the job is not judged again until its object, its pods, its
records or its recommendations change (`pending`). Budgets count the actions in flight in the
job's namespace, the runner's own writes included while the watch lags. The harness is
`tests.act.cycles`: the emulator over HTTP, a real Prometheus, and a clock the test moves.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kopf._core.engines import posting

from gpuwise.act.action_settings import Budget
from gpuwise.act.adjust_config import ADJUST_CONFIG
from gpuwise.act.machine import WORSE, request_id, transition
from gpuwise.act.measure import throughput_query
from gpuwise.act.mig_repartition import LABEL_PARTITIONING as PARTITIONING
from gpuwise.act.node_settings import NodeActionSettings, TimeSlicingSettings
from gpuwise.act.runner import Runner, now, records_of, trimmed
from gpuwise.act.transitions import ACTIONS
from gpuwise.api.kinds import GPU_SHARE_CHANGE, TIME_SLICING, ActionKind
from gpuwise.api.trainingjob import MAX_ACTION_RECORDS, ActionRecord, ActionState, Recommendation
from gpuwise.kube import job_overrides
from gpuwise.kube.client import Kube
from tests.act.conftest import drained, told
from tests.act.cycles import ACKS, MORE_WORKERS, SAMPLES, SETTINGS, START, Job, job_fixture, record_in  # noqa: F401
from tests.act.scenario import TJ_API, trainingjob
from tests.integration.conftest import Cluster
from tests.support.prometheus import AVAILABLE as HAS_PROMETHEUS
from tests.support.prometheus import Prometheus
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not HAS_PROMETHEUS, reason="needs prometheus (make system-deps)"),
]

Events = asyncio.Queue[posting.K8sEvent]
TIMEOUT = 60  # the job's spec.checkpoint.timeoutSeconds (scenario.trainingjob)
COOLDOWN = 1800  # SETTINGS.cooldown, in seconds
STARTED = [("Normal", "Planned"), ("Normal", "CheckpointRequested")]  # an action started, asking for a checkpoint
NOT_TAKEN = ("Normal", "ActionNotTaken")
PACK_AND_ADJUST = {"efficiency": {"actions": ["Pack", "AdjustConfig"]}}
TIME_SLICED = SETTINGS.model_copy(
    update={"nodes": NodeActionSettings(time_slicing=TimeSlicingSettings(config="shared"))}
)  # Pack plans a time-sliced share; no node offers one (admit refuses: NoSharedGpu)

PIN_MEMORY = Recommendation(
    action=ActionKind.ADJUST_CONFIG, finding="InputBound", message="m", changes={"PIN_MEMORY": "1"}
)
SHARE = Recommendation(action=ActionKind.PACK, finding="OversizedGPU", message="m", changes={GPU_SHARE_CHANGE: "0.2"})
AWAY = Recommendation(action=ActionKind.RESCHEDULE, finding="Straggler", message="m")  # names no worker


def reverted(at: datetime) -> ActionRecord:
    """NUM_WORKERS=4 made the job slower and was rolled back at `at`."""
    return record_in(ActionState.ROLLED_BACK, at, reason=WORSE, changes={"NUM_WORKERS": "4"})


def other(name: str, *records: ActionRecord, namespace: str = "default", phase: str = "Running") -> dict[str, Any]:
    """Another TrainingJob of the fleet, as the operator's index holds it."""
    return {
        "apiVersion": TJ_API,
        "kind": "TrainingJob",
        "metadata": {"namespace": namespace, "name": name, "resourceVersion": "7"},
        "status": {"phase": phase, "actions": [r.to_k8s() for r in records]},
    }


async def cycle_among(job: Job, fleet: list[dict[str, Any]], *recommendations: Recommendation) -> ActionRecord | None:
    """One cycle of the job with the rest of `fleet` around it; the job's last action afterwards."""
    body = job.body()
    await job.runner.run(body, job.pods(), [body, *fleet], list(recommendations))
    records = records_of(job.body())
    return records[-1] if records else None


@pytest.fixture(name="sharing")
def sharing_fixture(cluster: Cluster, kube: Kube, prometheus: Prometheus) -> Job:
    """bert, which may Pack as well as AdjustConfig (and pin its memory), under TIME_SLICED."""
    tunables = {"dataLoaderWorkers": {"env": "NUM_WORKERS", "min": 1, "max": 16}, "pinMemory": {"env": "PIN_MEMORY"}}
    ACKS.clear()
    SAMPLES.clear()
    return Job(
        cluster, kube, prometheus, TIME_SLICED, efficiency={"actions": ["Pack", "AdjustConfig"], "tunables": tunables}
    )


# --- which recommendation starts ------------------------------------------------------------------


async def test_a_recommendation_the_spec_does_not_list_is_passed_over_silently(job: Job, events: Events) -> None:
    record = await job.cycle(AWAY, MORE_WORKERS)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT
    assert (record.action, record.changes) == (ActionKind.ADJUST_CONFIG, {"NUM_WORKERS": "4"})
    assert drained(events) == STARTED, "Reschedule is not the job's to take: nothing said of it"


async def test_a_kind_the_runner_does_not_take_is_passed_over_silently(sharing: Job, events: Events) -> None:
    old = sharing.runner
    sharing.runner = Runner(old.kube, TIME_SLICED, old.acks, old.meter, kinds=(ADJUST_CONFIG,), clock=sharing.clock)
    record = await sharing.cycle(SHARE, MORE_WORKERS)
    assert record is not None and record.action is ActionKind.ADJUST_CONFIG
    assert drained(events) == STARTED


async def test_a_recommendation_its_plan_refuses_is_told_and_the_next_one_starts(job: Job, events: Events) -> None:
    job.cluster.patch(TJ_API, "TrainingJob", "bert", {"spec": PACK_AND_ADJUST})
    record = await job.cycle(SHARE, MORE_WORKERS)
    assert record is not None and record.changes == {"NUM_WORKERS": "4"}
    posted = told(events)
    assert [(kind, reason) for kind, reason, _ in posted] == [NOT_TAKEN, *STARTED]
    assert posted[0][2] == (
        "Pack for OversizedGPU not taken (NoTimeSlicingConfig): no time-slicing config is set "
        "(operator settings actions.nodes.timeSlicing.config)."
    )


async def test_a_change_reverted_before_is_told_and_the_next_one_starts(sharing: Job, events: Events) -> None:
    slower = reverted(sharing.start - timedelta(hours=2))
    sharing.store(slower)
    record = await sharing.cycle(MORE_WORKERS, PIN_MEMORY)
    assert record is not None and record.changes == {"PIN_MEMORY": "1"}
    posted = told(events)
    assert [(kind, reason) for kind, reason, _ in posted] == [NOT_TAKEN, *STARTED]
    assert posted[0][2] == (
        f"AdjustConfig for InputBound not taken (RevertedBefore): action {slower.id} made the same change "
        f"(NUM_WORKERS=4) and was reverted at {slower.updated_at:%Y-%m-%d %H:%M:%S}: the job ran slower with it."
    )


async def test_a_recommendation_the_cluster_has_no_room_for_is_told_and_the_next_one_starts(
    sharing: Job, events: Events
) -> None:
    record = await sharing.cycle(SHARE, MORE_WORKERS)
    assert record is not None and record.action is ActionKind.ADJUST_CONFIG
    posted = told(events)
    assert [(kind, reason) for kind, reason, _ in posted] == [NOT_TAKEN, *STARTED]
    assert posted[0][2].startswith(
        "Pack for OversizedGPU not taken (NoSharedGpu): no node is opted in for time-slicing"
    )


async def test_a_node_opted_in_for_time_slicing_without_a_gpu_has_no_room_for_the_job(
    sharing: Job, events: Events
) -> None:
    """`admit` sizes this job against the node: the runner hands it the job."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-1", "labels": {PARTITIONING: TIME_SLICING}}}
    sharing.cluster.create(node)
    assert await sharing.cycle(SHARE) is None
    posted = told(events)
    assert [(kind, reason) for kind, reason, _ in posted] == [NOT_TAKEN]
    assert "(NoSharedGpu): no time-sliced GPU has room for 1 worker(s)" in posted[0][2]


# --- lasting refusals -----------------------------------------------------------------------------


async def test_recommendations_their_plans_refuse_are_not_judged_again_until_something_changes(
    job: Job, events: Events
) -> None:
    job.cluster.patch(TJ_API, "TrainingJob", "bert", {"spec": PACK_AND_ADJUST})
    body, pods = job.body(), job.pods()
    assert job.runner.pending(body, pods, [SHARE]), "never judged yet"
    assert not job.runner.pending(body, pods, []), "nothing to act on"
    assert await job.cycle(SHARE) is None
    assert drained(events) == [NOT_TAKEN]

    assert not job.runner.pending(body, pods, [SHARE]), "refused as it stands: no second look"
    assert await job.cycle(SHARE, after=30) is None
    assert drained(events) == []
    assert job.runner.pending(body, pods, [SHARE, MORE_WORKERS]), "another recommendation"
    assert job.runner.pending(body, pods, [SHARE.model_copy(update={"changes": {GPU_SHARE_CHANGE: "0.1"}})])
    assert job.runner.pending(body, pods, [SHARE.model_copy(update={"finding": "Idle"})])
    job.cluster.patch("v1", "Pod", "bert-0", {"metadata": {"labels": {"touched": "yes"}}})
    assert job.runner.pending(body, job.pods(), [SHARE]), "its pod changed"
    job.cluster.patch(TJ_API, "TrainingJob", "bert", {"metadata": {"labels": {"touched": "yes"}}})
    assert job.runner.pending(job.body(), pods, [SHARE]), "its object changed"


async def test_a_job_refused_by_the_cluster_is_judged_again_and_told_once(sharing: Job, events: Events) -> None:
    """The cluster may have room next cycle, whatever else was refused for good."""
    slower = reverted(sharing.start - timedelta(hours=2))
    sharing.store(slower)
    assert await sharing.cycle(SHARE, MORE_WORKERS) == slower, "nothing started"
    posted = told(events)
    assert [(reason, message.split(" not taken ")[0]) for _, reason, message in posted] == [
        ("ActionNotTaken", "Pack for OversizedGPU"),
        ("ActionNotTaken", "AdjustConfig for InputBound"),
    ]
    assert sharing.runner.pending(sharing.body(), sharing.pods(), [SHARE, MORE_WORKERS])
    assert await sharing.cycle(SHARE, MORE_WORKERS, after=30) == slower
    assert drained(events) == [], "each told once"


async def test_a_refusal_is_told_again_after_the_job_s_next_action(sharing: Job, events: Events) -> None:
    record = await sharing.cycle(SHARE, MORE_WORKERS)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT
    assert drained(events) == [NOT_TAKEN, *STARTED]
    record = await sharing.cycle(after=TIMEOUT + 1)
    assert record is not None and record.reason == "CheckpointTimeout"
    assert drained(events) == [("Warning", "CheckpointTimeout")]
    record = await sharing.cycle(SHARE, MORE_WORKERS, after=COOLDOWN)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT
    assert drained(events) == [NOT_TAKEN, *STARTED], "Pack's refusal is news again"


async def test_a_job_without_a_start_time_has_not_run_long_enough(job: Job, events: Events) -> None:
    job.cluster.patch(TJ_API, "TrainingJob", "bert", {"status": {"startTime": None}}, status=True)
    assert await job.cycle(MORE_WORKERS) is None
    posted = told(events)
    assert [(kind, reason) for kind, reason, _ in posted] == [NOT_TAKEN]
    assert posted[0][2] == "AdjustConfig for InputBound not taken (MinRuntime): the job has run less than 10m."
    assert job.runner.pending(job.body(), job.pods(), [MORE_WORKERS]), "time will tell: judged every cycle"
    assert await job.cycle(MORE_WORKERS, after=30) is None
    assert drained(events) == [], "told once"
    started = (job.clock() - timedelta(minutes=10)).isoformat()
    job.cluster.patch(TJ_API, "TrainingJob", "bert", {"status": {"startTime": started}}, status=True)
    record = await job.cycle(MORE_WORKERS)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT, "ten minutes exactly"


# --- budgets --------------------------------------------------------------------------------------


async def test_the_budget_counts_the_actions_in_flight_in_the_job_s_namespace(job: Job, events: Events) -> None:
    job.runner.settings = SETTINGS.model_copy(update={"budgets": [Budget(jobs="50%", namespace="*")]})
    long_ago = job.start - timedelta(hours=5)
    done = transition(record_in(ActionState.VERIFYING, long_ago), ActionState.DONE, "Improved", "m", long_ago)
    gpt = other("gpt", record_in(ActionState.VERIFYING, long_ago))
    quiet = [
        other("t5", done),  # running, its action over: counted as running only
        other("old", done, phase="Succeeded"),  # neither
        other("xl", record_in(ActionState.APPLYING, long_ago), namespace="team-b"),  # another namespace
    ]
    busy = other("llama", record_in(ActionState.WAITING_FOR_CHECKPOINT, long_ago), phase="Pending")
    assert await cycle_among(job, [gpt, busy, *quiet], MORE_WORKERS) is None
    posted = told(events)
    assert [(kind, reason) for kind, reason, _ in posted] == [NOT_TAKEN]
    assert posted[0][2].endswith(
        "(BudgetExhausted): the namespace * budget 50% allows 2 disrupted job(s) of 4 running, and 2 already are."
    )
    assert job.runner.pending(job.body(), job.pods(), [MORE_WORKERS]), "the budget frees up: judged every cycle"

    ended = other("llama", done, phase="Pending")
    record = await cycle_among(job, [gpt, ended, *quiet], MORE_WORKERS)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT, "1 of 2 allowed in flight"


async def test_a_budget_window_refuses_only_while_it_is_open(job: Job, events: Events) -> None:
    first_half_hour = Budget(jobs="0", schedule="0 * * * *", duration="30m")
    job.runner.settings = SETTINGS.model_copy(update={"budgets": [first_half_hour]})
    assert await job.cycle(MORE_WORKERS, after=COOLDOWN - 1) is None
    posted = told(events)
    assert posted[0][2].endswith("allows 0 disrupted job(s) of 1 running, and 0 already are.")
    record = await job.cycle(MORE_WORKERS, after=1)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT


async def test_the_budget_counts_an_action_the_runner_started_before_the_watch_shows_it(
    job: Job, events: Events
) -> None:
    job.runner.settings = SETTINGS.model_copy(update={"budgets": [Budget(jobs="1", namespace="default")]})
    job.cluster.create(trainingjob("gpt"))
    started = {"status": {"phase": "Running", "startTime": (job.start - timedelta(hours=1)).isoformat()}}
    job.cluster.patch(TJ_API, "TrainingJob", "gpt", started, status=True)
    stale = job.cluster.get(TJ_API, "TrainingJob", "gpt")
    assert stale is not None
    await job.runner.run(stale, [], [stale, job.body()], [MORE_WORKERS])
    fresh = job.cluster.get(TJ_API, "TrainingJob", "gpt")
    assert fresh is not None and [r.state for r in records_of(fresh)] == [ActionState.WAITING_FOR_CHECKPOINT]
    assert job.runner.records("default", "gpt", stale) == records_of(fresh), "what it wrote, not what it was told"
    assert drained(events) == STARTED

    bert = job.body()
    await job.runner.run(bert, job.pods(), [bert, stale], [MORE_WORKERS])
    assert records_of(job.body()) == []
    posted = told(events)
    assert posted[0][2].endswith("budget 1 allows 1 disrupted job(s) of 2 running, and 1 already are.")

    moved_on = transition(records_of(fresh)[-1], ActionState.APPLYING, "CheckpointAcknowledged", "m", job.clock())
    job.cluster.patch(TJ_API, "TrainingJob", "gpt", {"status": {"actions": [moved_on.to_k8s()]}}, status=True)
    ahead = job.cluster.get(TJ_API, "TrainingJob", "gpt")
    assert ahead is not None and job.runner.records("default", "gpt", ahead) == [moved_on], "the body is ahead"

    job.runner.forget("default", "gpt")
    assert job.runner.records("default", "gpt", stale) == [], "a job deleted: only what its body says"


async def test_a_cycle_on_a_body_the_watch_has_not_updated_moves_the_action_on_and_starts_none(
    job: Job, events: Events
) -> None:
    stale = job.body()
    record = await job.cycle(MORE_WORKERS)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT
    drained(events)
    assert job.runner.pending(stale, job.pods(), []), "its action is in flight"
    await job.runner.run(stale, job.pods(), [stale], [MORE_WORKERS])
    assert records_of(job.body()) == [record] and drained(events) == [], "waiting on, and no second action"


# --- what a started action records ----------------------------------------------------------------


PODS = itertools.count()


def throughput(prometheus: Prometheus, name: str, rate: float, window: float) -> None:
    """From now on the job `name` counts `rate` samples a second, in a pod never seen before; wait
    until two measurements over `window`, a scrape apart, see exactly that."""
    SAMPLES[f"{name}-0-{next(PODS)}"] = (rate, time.time())
    steady: list[bool] = []

    def seen() -> bool:
        result = [r for r in prometheus.query(throughput_query(f"{window:g}s")) if r["metric"]["trainingjob"] == name]
        steady.append(len(result) == 1 and abs(float(result[0]["value"][1]) - rate) < 0.01 * rate)
        return steady[-2:] == [True, True]

    eventually(seen, timeout=40.0, interval=1.0, what=f"{rate} samples/s measured")


async def test_an_action_records_its_baseline_and_what_was_expected_of_it(job: Job, prometheus: Prometheus) -> None:
    """On gpt, a job of its own: the tests that find bert unmeasured never see its throughput."""
    job.meter_window = 5.0
    runner = job.new_runner(SETTINGS)
    job.cluster.create(trainingjob("gpt"))
    before = job_overrides.NONE.model_copy(update={"env": {"NUM_WORKERS": "2"}})  # an earlier action's
    job.cluster.patch(TJ_API, "TrainingJob", "gpt", job_overrides.annotation_patch(before))
    started = {"status": {"phase": "Running", "startTime": (job.start - timedelta(hours=1)).isoformat()}}
    job.cluster.patch(TJ_API, "TrainingJob", "gpt", started, status=True)
    throughput(prometheus, "gpt", 80.0, job.meter_window)
    gpt = job.cluster.get(TJ_API, "TrainingJob", "gpt")
    assert gpt is not None
    await runner.run(gpt, [], [gpt], [MORE_WORKERS])
    record = runner.records("default", "gpt", gpt)[-1]
    assert record.baseline is not None
    assert record.baseline.samples_per_second == pytest.approx(80, rel=0.03)
    assert (record.baseline.gpu_utilization, record.baseline.at) == (None, job.start)
    assert (record.finding, record.expected_speedup, record.expected_effect) == (
        "InputBound",
        2.5,
        MORE_WORKERS.expected_effect,
    )
    assert record.overrides_before == before
    assert record.overrides_target == before.model_copy(update={"env": {"NUM_WORKERS": "4"}})


async def test_a_dry_run_records_what_would_be_done_and_does_nothing(job: Job, events: Events) -> None:
    job.runner.settings = SETTINGS.model_copy(update={"dry_run": True})
    record = await job.cycle(MORE_WORKERS)
    assert record is not None and (record.state, record.reason) == (ActionState.DRY_RUN, "DryRun")
    message = "Dry run, not done: Set NUM_WORKERS=4 and restart from a checkpoint."
    assert record.message == message
    assert [(t.state, t.reason, t.at) for t in record.history] == [
        (ActionState.PLANNED, "Planned", job.start),
        (ActionState.DRY_RUN, "DryRun", job.start),
    ]
    assert told(events) == [("Normal", "DryRun", f"AdjustConfig {record.id} DryRun: {message}")]
    assert job.request() is None and job_overrides.wanted(job.body()) == job_overrides.NONE, "nothing changed"


async def test_the_runner_keeps_the_newest_records_dropping_the_oldest_dry_run_first(job: Job) -> None:
    long_ago = job.start - timedelta(days=2)
    done = transition(record_in(ActionState.VERIFYING, long_ago), ActionState.DONE, "Improved", "m", long_ago)
    dry = [
        record_in(ActionState.DRY_RUN, long_ago + timedelta(minutes=i + 1), reason="DryRun")
        for i in range(MAX_ACTION_RECORDS - 1)
    ]
    job.store(done, *dry)
    record = await job.cycle(MORE_WORKERS)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT
    assert [r.id for r in records_of(job.body())] == [done.id, *(r.id for r in dry[1:]), record.id]


async def test_an_action_starts_with_a_planned_event_that_says_what_it_will_do(job: Job, events: Events) -> None:
    record = await job.cycle(MORE_WORKERS)
    assert record is not None
    planned = f"AdjustConfig {record.id} Planned: Set NUM_WORKERS=4 and restart from a checkpoint."
    assert told(events)[0] == ("Normal", "Planned", planned)
    assert request_id(record) == job.request()


async def test_each_transition_is_counted_for_the_actions_taken_panel(job: Job) -> None:
    before = transitions_counted()
    await job.cycle(MORE_WORKERS)
    after = transitions_counted()
    grown = {key: n - before.get(key, 0) for key, n in after.items() if n != before.get(key, 0)}
    assert grown == {
        ("default", "bert", "AdjustConfig", "Planned"): 1,
        ("default", "bert", "AdjustConfig", "WaitingForCheckpoint"): 1,
    }


def transitions_counted() -> dict[tuple[str, ...], float]:
    """gpuwise_action_transitions_total now, by (namespace, trainingjob, action, state)."""
    family = next(iter(ACTIONS.collect()))
    return {
        tuple(s.labels[k] for k in ("namespace", "trainingjob", "action", "state")): s.value for s in family.samples
    }


# --- which jobs the runner acts on ------------------------------------------------------------------


def recommend_mode(body: dict[str, Any]) -> None:
    body["spec"]["efficiency"]["mode"] = "Recommend"


def pending_phase(body: dict[str, Any]) -> None:
    body["status"]["phase"] = "Pending"


def unreadable_overrides(body: dict[str, Any]) -> None:
    body["metadata"].setdefault("annotations", {})[job_overrides.ANNOTATION_OVERRIDES] = "{not json"


def invalid_spec(body: dict[str, Any]) -> None:
    del body["spec"]["trainer"]["image"]


@pytest.mark.parametrize("edit", [recommend_mode, pending_phase, unreadable_overrides, invalid_spec])
async def test_only_a_running_enforce_job_with_a_valid_spec_starts_an_action(
    job: Job, events: Events, edit: Callable[[dict[str, Any]], None]
) -> None:
    body = copy.deepcopy(job.body())
    edit(body)
    await job.runner.run(body, job.pods(), [body], [MORE_WORKERS])
    assert records_of(job.body()) == [] and drained(events) == []


async def test_a_job_being_deleted_is_left_alone(job: Job, events: Events) -> None:
    body = job.body()
    body["metadata"]["deletionTimestamp"] = job.start.isoformat()
    assert not job.runner.pending(body, job.pods(), [MORE_WORKERS])
    await job.runner.run(body, job.pods(), [body], [MORE_WORKERS])
    assert records_of(job.body()) == [] and drained(events) == []


async def test_an_action_in_flight_moves_on_after_its_job_left_enforce_mode(job: Job) -> None:
    job.store(record_in(ActionState.PLANNED, job.start))
    job.cluster.patch(TJ_API, "TrainingJob", "bert", {"spec": {"efficiency": {"mode": "Recommend"}}})
    assert job.runner.pending(job.body(), job.pods(), []), "in flight: nothing to recommend needed"
    record = await job.cycle()
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT


async def test_forgetting_a_job_drops_what_the_runner_remembered_of_it(job: Job, events: Events) -> None:
    job.cluster.patch(TJ_API, "TrainingJob", "bert", {"spec": PACK_AND_ADJUST})
    job.runner.forget("default", "never-seen")  # nothing to drop: no error
    assert await job.cycle(SHARE) is None
    assert drained(events) == [NOT_TAKEN]
    assert not job.runner.pending(job.body(), job.pods(), [SHARE])
    job.runner.forget("default", "bert")  # deleted, and created again under the same name
    assert job.runner.pending(job.body(), job.pods(), [SHARE])
    assert await job.cycle(SHARE) is None
    assert drained(events) == [NOT_TAKEN], "told anew"


# --- pure parts -----------------------------------------------------------------------------------


def test_the_runner_s_clock_reads_whole_seconds_in_utc() -> None:
    at = now()
    assert at.tzinfo is UTC and at.microsecond == 0
    assert abs((datetime.now(tz=UTC) - at).total_seconds()) < 2


def test_trimming_drops_the_oldest_dry_runs_first_then_the_oldest_actions() -> None:
    def records(states: str) -> list[ActionRecord]:  # D: done, R: dry run
        state = {"D": ActionState.DONE, "R": ActionState.DRY_RUN}
        return [record_in(state[s], START + timedelta(minutes=i)) for i, s in enumerate(states)]

    full = records("D" * MAX_ACTION_RECORDS)
    assert trimmed(full) == full, "at the limit: all kept"
    two_over = records("DRD" + "D" * (MAX_ACTION_RECORDS - 3) + "RD")
    kept = trimmed(two_over)
    assert kept == [r for i, r in enumerate(two_over) if i not in (1, MAX_ACTION_RECORDS)]
    assert len(two_over) == MAX_ACTION_RECORDS + 2, "the list given is left as it was"
    actions = records("D" * (MAX_ACTION_RECORDS + 1))
    assert trimmed(actions) == actions[1:], "no dry run: the oldest action goes"
    newest_dry = records("D" * MAX_ACTION_RECORDS + "R")
    assert trimmed(newest_dry) == newest_dry[1:], "the newest record stays, dry run or not"
