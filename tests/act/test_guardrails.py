"""Guardrails and their settings: budgets (counts, shares, scopes, cron windows) and per-job limits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuwise import wiring
from gpuwise.act.action_settings import ActionSettings, Budget
from gpuwise.act.guardrails import Fleet, budget_refusal, job_refusal, reverted_before, window_open
from gpuwise.act.machine import JobView, Plan, Refusal, new_record, transition
from gpuwise.api.kinds import ActionKind
from gpuwise.api.trainingjob import ActionState, TrainingJobSpec
from gpuwise.kube.job_overrides import NONE
from gpuwise.operator.config import SettingsError, load_settings

NOW = datetime(2026, 11, 23, 10, 30, tzinfo=UTC)  # a Monday
PLAN = Plan(target=NONE.model_copy(update={"env": {"NUM_WORKERS": "4"}}), message="Set NUM_WORKERS=4.")


def view(annotations: dict[str, str] | None = None, **spec: Any) -> JobView:
    raw: dict[str, Any] = {"trainer": {"image": "x"}, "checkpoint": {"enabled": True}, **spec}
    body = {"metadata": {"namespace": "team-a", "name": "bert", "annotations": annotations or {}}, "spec": raw}
    return JobView("team-a", "bert", body, TrainingJobSpec.model_validate(raw), NONE)


# --- budgets -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("jobs", "running", "allowed"),
    [("10%", 1, 1), ("10%", 10, 1), ("10%", 11, 2), ("0%", 50, 0), ("100%", 7, 7), ("3", 1, 3), ("0", 9, 0)],
)
def test_a_share_rounds_up_and_a_count_is_a_count(jobs: str, running: int, allowed: int) -> None:
    assert Budget(jobs=jobs).allowed(running) == allowed


def test_the_most_restrictive_budget_covering_the_namespace_wins() -> None:
    fleet = Fleet(running={"team-a": 4, "team-b": 16}, disrupted={"team-a": 1, "team-b": 1})
    cluster_wide = Budget(jobs="20%")  # 4 of 20 running: 2 in use, room for 2 more
    assert budget_refusal("team-a", fleet, [cluster_wide], NOW) is None
    per_namespace = Budget(jobs="1", namespace="*")
    refusal = budget_refusal("team-a", fleet, [cluster_wide, per_namespace], NOW)
    assert refusal is not None and refusal.reason == "BudgetExhausted"
    assert refusal.message == "the namespace * budget 1 allows 1 disrupted job(s) of 4 running, and 1 already are"
    only_b = Budget(jobs="0", namespace="team-b")
    assert budget_refusal("team-a", fleet, [cluster_wide, only_b], NOW) is None
    assert budget_refusal("team-b", fleet, [cluster_wide, only_b], NOW) is not None


def test_a_scheduled_budget_holds_only_inside_its_window() -> None:
    office_hours = Budget(jobs="0", schedule="0 9 * * 1-5", duration="8h")
    assert window_open(office_hours, NOW)
    assert window_open(office_hours, NOW.replace(hour=9, minute=0))
    assert not window_open(office_hours, NOW.replace(hour=17, minute=0))
    assert not window_open(office_hours, NOW.replace(hour=8, minute=59))
    assert not window_open(office_hours, NOW + timedelta(days=5))  # Saturday
    fleet = Fleet(running={"team-a": 3}, disrupted={})
    refusal = budget_refusal("team-a", fleet, [Budget(jobs="50%"), office_hours], NOW)
    assert refusal is not None and "'0 9 * * 1-5' for 8h" in refusal.message
    assert budget_refusal("team-a", fleet, [Budget(jobs="50%"), office_hours], NOW.replace(hour=20)) is None


def test_settings_errors_name_the_key_and_the_fix(tmp_path: Any) -> None:
    path = tmp_path / "settings.yaml"
    cases = {
        "actions:\n  budgets: [{jobs: ten}]\n": "actions.budgets.0.jobs",
        "actions:\n  budgets: [{jobs: '150%'}]\n": "a percentage must be at most 100%",
        "actions:\n  budgets: [{jobs: '1', schedule: '0 9 * *'}]\n": "is not a cron expression",
        "actions:\n  budgets: [{jobs: '1', schedule: '0 9 * * *'}]\n": "schedule and duration go together",
        "actions:\n  cooldown: soon\n": "is not a duration",
        "actions:\n  maxActionsPerJob: 11\n": "actions.maxActionsPerJob",
        "actions:\n  gpuClasses: [{name: l4, nodeSelector: {a: b}, gpuModel: L4}, {name: l4, nodeSelector: {a: c}, "
        "gpuModel: L4}]": "not repeat",
        # A class the OversizedGPU finding cannot size could never be recommended.
        "actions:\n  gpuClasses: [{name: l4, nodeSelector: {pool: small}}]": (
            "actions.gpuClasses.0: Value error, GPU class l4: name its GPU model in gpuModel, or select its nodes by "
            "nvidia.com/gpu.product"
        ),
        "actions:\n  gpuClasses: [{name: rtx, nodeSelector: {nvidia.com/gpu.product: NVIDIA-RTX-6000}}]": (
            "GPU class rtx: no datasheet figures for GPU model 'NVIDIA-RTX-6000'; known: NVIDIA H200,"
        ),
    }
    for text, expected in cases.items():
        path.write_text(text)
        with pytest.raises(SettingsError, match="invalid operator settings") as error:
            load_settings(path)
        assert expected in str(error.value), (text, str(error.value))


# --- per job -------------------------------------------------------------------------------------


JOB_SETTINGS = ActionSettings(cooldown="30m", max_actions_per_job=2, min_runtime="10m")
STARTED = NOW - timedelta(hours=1)


def refused(job: JobView, records: list[Any] | None = None, at: datetime = NOW, **kw: Any) -> Refusal | None:
    """`job_refusal` of PLAN (AdjustConfig) under JOB_SETTINGS for a job started an hour before NOW."""
    return job_refusal(
        job,
        kind=kw.get("kind", ActionKind.ADJUST_CONFIG),
        plan=PLAN,
        records=records or [],
        settings=kw.get("settings", JOB_SETTINGS),
        started_at=STARTED,
        now=at,
    )


def test_per_job_guardrails_in_order() -> None:
    settings, started = JOB_SETTINGS, STARTED

    def refusal(job: JobView, records: list[Any] | None = None, at: datetime = NOW, **kw: Any) -> str | None:
        found = refused(job, records, at, **kw)
        return found.reason if found else None

    assert refusal(view()) is None
    assert refusal(view(), settings=settings.model_copy(update={"enabled": False})) == "ActionsDisabled"
    node_side_off = settings.model_copy(update={"kinds": [ActionKind.ADJUST_CONFIG, ActionKind.RESCHEDULE]})
    assert refusal(view(), settings=node_side_off) is None
    assert refusal(view(), settings=node_side_off, kind=ActionKind.PACK) == "ActionKindDisabled"
    assert refusal(view({wiring.ANNOTATION_DO_NOT_DISRUPT: "true"})) == "DoNotDisrupt"
    assert refusal(view(pod={"annotations": {wiring.ANNOTATION_DO_NOT_DISRUPT: "true"}})) == "DoNotDisrupt"
    assert refusal(view({wiring.ANNOTATION_DO_NOT_DISRUPT: "false"})) is None
    assert refusal(view(checkpoint={"enabled": False})) == "CheckpointDisabled"
    assert refusal(view(telemetry={"instrumentation": "Disabled"})) == "InstrumentationDisabled"
    assert refusal(view(telemetry={"instrumentation": "Manual"})) is None
    no_restart = Plan(target=NONE, message="nothing to restart", restart=False)
    assert (
        job_refusal(
            view(checkpoint={"enabled": False}, telemetry={"instrumentation": "Disabled"}),
            kind=ActionKind.RESCHEDULE,
            plan=no_restart,
            records=[],
            settings=settings,
            started_at=started,
            now=NOW,
        )
        is None
    )
    assert refusal(view(), at=started + timedelta(minutes=5)) == "MinRuntime"

    earlier = new_record(ActionKind.ADJUST_CONFIG, "InputBound", PLAN, NONE, NOW - timedelta(hours=2))
    done = transition(earlier, ActionState.DONE, "NoWorse", "kept", NOW - timedelta(minutes=10))
    assert refusal(view(), [done]) == "Cooldown"
    assert refusal(view(), [done], at=NOW + timedelta(minutes=21)) is None
    assert refusal(view(), [done, done], at=NOW + timedelta(hours=1)) == "MaxActions"
    dry = transition(earlier, ActionState.DRY_RUN, "DryRun", "would", NOW - timedelta(hours=1))
    assert refusal(view(), [done, dry]) == "Cooldown"
    assert refusal(view(), [done, dry], at=NOW + timedelta(hours=1)) is None, "dry runs do not count"


def test_a_change_reverted_as_worse_is_not_made_again() -> None:
    """Again means the same settings moved the same way: a recommended figure varies a little from
    one window to the next (4 workers, then 6), and raising the workers made the job slower."""
    job = view(trainer={"image": "x", "env": [{"name": "NUM_WORKERS", "value": "2"}]})
    started = new_record(ActionKind.ADJUST_CONFIG, "InputBound", PLAN, NONE, NOW - timedelta(hours=3))
    started = started.model_copy(update={"changes": {"NUM_WORKERS": "4"}})
    worse = transition(started, ActionState.ROLLED_BACK, "Worse", "slower", NOW - timedelta(hours=2))

    def again(kind: ActionKind = ActionKind.ADJUST_CONFIG, record: Any = worse, **changes: str) -> str | None:
        plan = Plan(target=PLAN.target, message="m", changes=changes)
        refusal = reverted_before(job, kind, plan, [record])
        return refusal.message if refusal else None

    message = again(NUM_WORKERS="6")
    assert message is not None and message.startswith(f"action {started.id} made the same change (NUM_WORKERS=4)")
    lasting = reverted_before(
        job, ActionKind.ADJUST_CONFIG, Plan(PLAN.target, "m", changes={"NUM_WORKERS": "6"}), [worse]
    )
    assert lasting is not None and lasting.lasting, "holds while the records do"
    assert again(NUM_WORKERS="4", AMP="1") is not None, "with something else, still the same change"
    assert again(NUM_WORKERS="1") is None, "the other way"
    assert again(AMP="1") is None, "another setting"
    assert again(ActionKind.RESCHEDULE, NUM_WORKERS="6") is None
    failed = transition(started, ActionState.ROLLED_BACK, "MigConfigFailed", "no", NOW)  # never ran: not judged
    assert again(record=failed, NUM_WORKERS="4") is None
    sliced = worse.model_copy(update={"action": ActionKind.MIG_REPARTITION, "changes": {"migProfile": "1g.10gb"}})
    assert again(ActionKind.MIG_REPARTITION, sliced, migProfile="1g.10gb") is not None
    assert again(ActionKind.MIG_REPARTITION, sliced, migProfile="2g.20gb") is None, "a larger slice may do"


def test_only_refusals_that_wait_on_the_clock_or_the_cluster_do_not_last() -> None:
    # A lasting refusal holds while the job, its records and the recommendation stay as they are,
    # so the runner does not plan that job again until one changes (Refusal.lasting).
    earlier = new_record(ActionKind.ADJUST_CONFIG, "InputBound", PLAN, NONE, NOW - timedelta(hours=2))
    done = transition(earlier, ActionState.DONE, "NoWorse", "kept", NOW - timedelta(minutes=10))
    found = {
        refusal.reason: refusal.lasting
        for refusal in (
            refused(view(), settings=JOB_SETTINGS.model_copy(update={"enabled": False})),
            refused(view(), settings=JOB_SETTINGS.model_copy(update={"kinds": []})),
            refused(view({wiring.ANNOTATION_DO_NOT_DISRUPT: "true"})),
            refused(view(checkpoint={"enabled": False})),
            refused(view(telemetry={"instrumentation": "Disabled"})),
            refused(view(), at=STARTED + timedelta(minutes=5)),
            refused(view(), [done]),
            refused(view(), [done, done], at=NOW + timedelta(hours=1)),
            budget_refusal("team-a", Fleet({"team-a": 1}, {"team-a": 1}), [Budget(jobs="1")], NOW),
        )
        if refusal is not None
    }
    assert found == {
        "ActionsDisabled": True, "ActionKindDisabled": True, "DoNotDisrupt": True, "CheckpointDisabled": True,
        "InstrumentationDisabled": True, "MaxActions": True,
        "MinRuntime": False, "Cooldown": False, "BudgetExhausted": False,
    }  # fmt: skip


def test_min_runtime_and_cooldown_at_their_edges() -> None:
    """A job may be acted on from the second it has run `minRuntime`, and from the second the
    cooldown after its last action is over: not one second before (issue 23)."""

    def reason(records: list[Any], at: datetime) -> str | None:
        found = refused(view(), records, at)
        return found.reason if found else None

    assert reason([], STARTED + timedelta(minutes=10, seconds=-1)) == "MinRuntime"
    assert reason([], STARTED + timedelta(minutes=10)) is None
    ended = NOW  # the job has run an hour: only the cooldown holds it
    last = transition(
        new_record(ActionKind.ADJUST_CONFIG, "InputBound", PLAN, NONE, ended),
        ActionState.DONE,
        "NoWorse",
        "kept",
        ended,
    )
    assert reason([last], ended + timedelta(minutes=30, seconds=-1)) == "Cooldown"
    assert reason([last], ended + timedelta(minutes=30)) is None


@pytest.mark.parametrize(("disrupted", "refused_"), [(0, False), (1, True)])
def test_a_budget_of_one_is_used_up_by_exactly_one_disrupted_job(disrupted: int, refused_: bool) -> None:
    fleet = Fleet(running={"team-a": 4}, disrupted={"team-a": disrupted} if disrupted else {})
    assert (budget_refusal("team-a", fleet, [Budget(jobs="1")], NOW) is not None) is refused_


# --- edges (each found by a mutant that no test told from the original: `make mutation`) ---------


def test_a_window_is_shut_until_its_very_second() -> None:
    office_hours = Budget(jobs="0", schedule="0 9 * * 1-5", duration="8h")
    assert not window_open(office_hours, NOW.replace(hour=8, minute=59, second=59))
    assert window_open(office_hours, NOW.replace(hour=9, minute=0, second=0))


def test_a_budget_that_does_not_apply_does_not_hide_the_next_one() -> None:
    fleet = Fleet(running={"team-a": 4}, disrupted={"team-a": 1})
    other_namespace, shut_window = (
        Budget(jobs="0", namespace="team-b"),
        Budget(jobs="0", schedule="0 3 * * *", duration="1h"),
    )
    refusal = budget_refusal("team-a", fleet, [other_namespace, shut_window, Budget(jobs="1", namespace="*")], NOW)
    assert refusal is not None and refusal.reason == "BudgetExhausted"


def test_a_namespace_the_fleet_has_not_counted_has_nothing_running_or_disrupted() -> None:
    running_only = Fleet(running={"team-a": 3}, disrupted={})
    assert budget_refusal("team-a", running_only, [Budget(jobs="1", namespace="team-a")], NOW) is None
    unseen = Fleet(running={}, disrupted={})
    refusal = budget_refusal("team-a", unseen, [Budget(jobs="50%", namespace="team-a")], NOW)
    assert refusal is not None
    assert (
        refusal.message == "the namespace team-a budget 50% allows 0 disrupted job(s) of 0 running, and 0 already are"
    )
    assert budget_refusal("team-a", unseen, [Budget(jobs="1", namespace="team-a")], NOW) is None


def test_a_body_without_metadata_has_no_annotation() -> None:
    job = view()
    bare = JobView(job.namespace, job.name, {"spec": job.body["spec"]}, job.spec, job.overrides)
    assert refused(bare) is None


def test_each_refusal_says_why_in_its_event() -> None:
    earlier = new_record(ActionKind.ADJUST_CONFIG, "InputBound", PLAN, NONE, NOW - timedelta(hours=2))
    done = transition(earlier, ActionState.DONE, "NoWorse", "kept", NOW - timedelta(minutes=10))
    cases = [
        (
            refused(view(), settings=JOB_SETTINGS.model_copy(update={"enabled": False})),
            "the operator's actions are off (settings actions.enabled, chart actions.enforce)",
        ),
        (
            refused(view(), settings=JOB_SETTINGS.model_copy(update={"kinds": []})),
            "the operator is not set to take AdjustConfig (settings actions.kinds)",
        ),
        (
            refused(view({wiring.ANNOTATION_DO_NOT_DISRUPT: "true"})),
            'the job is annotated gpuwise.io/do-not-disrupt: "true"',
        ),
        (
            refused(view(checkpoint={"enabled": False})),
            "the action restarts the job and spec.checkpoint.enabled is false: gpuwise never restarts it",
        ),
        (
            refused(view(telemetry={"instrumentation": "Disabled"})),
            "the action restarts the job after a checkpoint handshake, and with spec.telemetry.instrumentation "
            "Disabled nothing in the job can answer it",
        ),
        (refused(view(), at=STARTED + timedelta(minutes=5)), "the job has run less than 10m"),
        (refused(view(), [done]), "the last action ended at 10:20:00; the cooldown is 30m"),
        (
            refused(view(), [done, done], at=NOW + timedelta(hours=1)),
            "the job has had 2 action(s), the most allowed",
        ),
    ]
    for refusal, message in cases:
        assert refusal is not None and refusal.message == message


def test_minimum_runtime_and_cooldown_end_on_their_very_second() -> None:
    assert refused(view(), at=STARTED + timedelta(minutes=10)) is None, "ran exactly minRuntime"
    earlier = new_record(ActionKind.ADJUST_CONFIG, "InputBound", PLAN, NONE, NOW - timedelta(hours=2))
    done = transition(earlier, ActionState.DONE, "NoWorse", "kept", NOW - timedelta(minutes=10))
    assert refused(view(), [done], at=NOW + timedelta(minutes=20)) is None, "exactly the cooldown after"


def test_a_reverted_change_is_named_and_found_among_other_records() -> None:
    job = view(trainer={"image": "x", "env": [{"name": "NUM_WORKERS", "value": "2"}]})
    started = new_record(ActionKind.ADJUST_CONFIG, "InputBound", PLAN, NONE, NOW - timedelta(hours=3))
    started = started.model_copy(update={"changes": {"NUM_WORKERS": "4", "AMP": "1"}})
    worse = transition(started, ActionState.ROLLED_BACK, "Worse", "slower", NOW - timedelta(hours=2))
    kept = transition(started, ActionState.DONE, "NoWorse", "kept", NOW - timedelta(hours=2))
    plan = Plan(target=PLAN.target, message="m", changes={"NUM_WORKERS": "6", "AMP": "1"})
    refusal = reverted_before(job, ActionKind.ADJUST_CONFIG, plan, [kept, worse])
    assert refusal is not None and refusal.reason == "RevertedBefore"
    assert f"action {started.id} made the same change (AMP=1, NUM_WORKERS=4) and was reverted at" in refusal.message
    as_now = Plan(target=PLAN.target, message="m", changes={"NUM_WORKERS": "2", "AMP": "1"})
    assert reverted_before(job, ActionKind.ADJUST_CONFIG, as_now, [worse]) is None, "what it runs with is not up"
