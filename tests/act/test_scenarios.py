"""Actions end to end: the real operator process acts on real telemetry, within its guardrails.

See `scenario.py` for what runs. Every test starts an Enforce-mode TrainingJob whose worker is
input-bound for real, so the operator recommends more DataLoader workers (AdjustConfig); what
happens next depends on the test: the whole handshake and restart, a checkpoint never
acknowledged, a job that must not be restarted, a budget used up, a dry run, an operator killed
in the middle, a change that made the job slower.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuwise import wiring
from gpuwise.act.machine import transition
from gpuwise.api.trainingjob import ActionRecord, ActionState
from gpuwise.kube import job_overrides
from tests.act.scenario import (
    FAST_WAIT,
    TJ_API,
    Trainer,
    actions_of,
    env_of,
    events,
    in_state,
    job_of,
    last_action,
    operator_config,
    pods_of,
    run_job,
    show_log,
    start,
    start_operator,
    status_of,
    telemetry,
    trainingjob,
    uid_of_job,
)
from tests.integration.conftest import Cluster, Operator
from tests.support.emulator import EmulatorThread
from tests.support.prometheus import AVAILABLE, Prometheus
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(not AVAILABLE, reason="needs prometheus (make system-deps)"),
]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, dict[str, Trainer]]]:
    with telemetry(tmp_path_factory.mktemp("actions"), [("default", "bert"), ("default", "gpt")]) as running:
        yield running


@pytest.fixture
def prometheus(fleet: tuple[Prometheus, dict[str, Trainer]]) -> Prometheus:
    return fleet[0]


@pytest.fixture
def bert(fleet: tuple[Prometheus, dict[str, Trainer]]) -> Iterator[Trainer]:
    handle = fleet[1]["bert"]
    yield handle
    handle.slow_down(FAST_WAIT)
    handle.request_file.write_text("")


@pytest.fixture
def operator_settings() -> dict[str, object]:
    return {}


@pytest.fixture
def operator(
    emulator: EmulatorThread, prometheus: Prometheus, tmp_path: Path, operator_settings: dict[str, object]
) -> Iterator[Operator]:
    running = start_operator(emulator, tmp_path, prometheus, operator_config(tmp_path, **operator_settings))
    yield running
    running.stop()
    show_log(running)


def kill_and_restart(operator: Operator) -> None:
    """Kill -9, as a node failure or an OOM kill would, then start a new operator process."""
    assert operator.process is not None
    operator.process.send_signal(signal.SIGKILL)
    operator.process.wait()
    operator.start()


def acknowledge(cluster: Cluster, trainer: Trainer, request_id: str) -> None:
    """The kubelet projects the request; the trainer acknowledges it at a step boundary."""
    eventually(lambda: trainer.project(cluster) == request_id, what=f"checkpoint request {request_id} on the pod")


def restarted_job(cluster: Cluster, old_uid: str) -> dict[str, Any]:
    """The replacement Job, once the operator rendered it, started as the Job controller would."""
    job: dict[str, Any] = eventually(
        lambda: (j := job_of(cluster, "bert")) and j["metadata"]["uid"] != old_uid and j, timeout=20, what="a new Job"
    )
    run_job(cluster, job, node="gpu-node-b")
    return job


def test_adjust_config_end_to_end_survives_an_operator_restart(
    cluster: Cluster, operator: Operator, bert: Trainer
) -> None:
    job = start(cluster, trainingjob("bert"))
    waiting = eventually(
        lambda: in_state(cluster, "bert", "WaitingForCheckpoint"), timeout=30, what="a checkpoint request"
    )
    assert waiting["action"] == "AdjustConfig"
    assert waiting["finding"] == "InputBound"
    assert 1 < int(waiting["changes"]["NUM_WORKERS"]) <= 7
    assert waiting["overridesTarget"]["env"] == waiting["changes"]
    assert waiting["baseline"]["samplesPerSecond"] > 0
    (pod,) = pods_of(cluster, "bert")
    assert pod["metadata"]["annotations"][wiring.ANNOTATION_CHECKPOINT_REQUEST] == waiting["id"]

    kill_and_restart(operator)  # the new process resumes the same request, repeating nothing
    acknowledge(cluster, bert, waiting["id"])

    new_job = restarted_job(cluster, job["metadata"]["uid"])
    assert env_of(new_job)["NUM_WORKERS"] == waiting["changes"]["NUM_WORKERS"]
    assert env_of(job)["NUM_WORKERS"] == "1"
    tj = cluster.trainingjob("bert") or {}
    assert wiring.API_GROUP + "/overrides" in tj["metadata"]["annotations"]
    assert (cluster.condition("bert", "Accepted") or {}).get("status") == "True", "reconcile must not fight it"

    done = eventually(lambda: in_state(cluster, "bert", "Done"), timeout=30, what="the action verified")
    assert done["id"] == waiting["id"]
    assert done["reason"] in {"Improved", "NoWorse"}
    assert done["result"]["samplesPerSecond"] > 0
    assert done["checkpointRequestedAt"] == waiting["checkpointRequestedAt"], "the request was not repeated"
    states = [step["state"] for step in done["history"]]
    assert states == ["Planned", "WaitingForCheckpoint", "Applying", "Verifying", "Done"]
    assert len(actions_of(cluster, "bert")) == 1
    assert len(events(cluster, "CheckpointRequested", "bert")) == 1
    assert cluster.emulator.emulator is not None
    assert cluster.emulator.emulator.create_attempts["batch/v1/jobs default/bert"] <= 3  # first, new (+1 raced)
    assert uid_of_job(cluster, "bert") == new_job["metadata"]["uid"]


def test_an_operator_killed_between_the_job_delete_and_its_re_creation(
    cluster: Cluster, operator: Operator, bert: Trainer
) -> None:
    """In Applying the runner writes the new overrides, then deletes the Job; the reconciler renders
    the new one. Killed in between, the new process must render the Job once from the overrides
    and verify it: no second checkpoint request, no second restart. The test writes what the
    killed process had written (the record with the production code, the annotation, the delete)."""
    job = start(cluster, trainingjob("bert"))
    waiting = eventually(
        lambda: in_state(cluster, "bert", "WaitingForCheckpoint"), timeout=30, what="a checkpoint request"
    )
    assert operator.process is not None
    operator.process.send_signal(signal.SIGKILL)
    operator.process.wait()
    acknowledge(cluster, bert, waiting["id"])
    record = ActionRecord.model_validate(waiting)
    record = record.model_copy(update={"checkpoint_acknowledged_at": record.updated_at})
    applying = transition(record, ActionState.APPLYING, "CheckpointAcknowledged", "acknowledged", record.updated_at)
    cluster.patch(TJ_API, "TrainingJob", "bert", {"status": {"actions": [applying.to_k8s()]}}, status=True)
    target = applying.overrides_target
    assert target is not None
    cluster.patch(TJ_API, "TrainingJob", "bert", job_overrides.annotation_patch(target))
    cluster.delete("batch/v1", "Job", "bert")
    assert job_of(cluster, "bert") is None and pods_of(cluster, "bert") == []

    operator.start()
    new_job = restarted_job(cluster, job["metadata"]["uid"])
    assert env_of(new_job)["NUM_WORKERS"] == waiting["changes"]["NUM_WORKERS"]
    verifying = eventually(lambda: in_state(cluster, "bert", "Verifying"), timeout=20, what="Verifying")
    assert verifying["id"] == waiting["id"] and verifying["checkpointRequestedAt"] == waiting["checkpointRequestedAt"]
    assert [step["state"] for step in verifying["history"]] == [
        "Planned", "WaitingForCheckpoint", "Applying", "Verifying"
    ]  # fmt: skip
    assert cluster.emulator.emulator is not None
    # The first Job, then the new one (+1 refused as a conflict if two reconciles raced to render it).
    assert cluster.emulator.emulator.create_attempts["batch/v1/jobs default/bert"] <= 3
    assert uid_of_job(cluster, "bert") == new_job["metadata"]["uid"]
    assert len(events(cluster, "CheckpointRequested", "bert")) == 1


@pytest.mark.parametrize("operator_settings", [{"cooldown": "1s"}])
def test_a_change_that_made_the_job_slower_is_reverted_and_not_made_again(
    cluster: Cluster, operator: Operator, bert: Trainer
) -> None:
    job = start(cluster, trainingjob("bert"))
    waiting = eventually(
        lambda: in_state(cluster, "bert", "WaitingForCheckpoint"), timeout=30, what="a checkpoint request"
    )
    acknowledge(cluster, bert, waiting["id"])
    bert.slow_down(0.15)  # the new configuration runs at a third of the speed
    new_job = restarted_job(cluster, job["metadata"]["uid"])
    eventually(lambda: in_state(cluster, "bert", "Verifying"), timeout=20, what="Verifying")
    kill_and_restart(operator)  # measuring goes on from the record, not from the start

    reverting = eventually(
        lambda: (r := last_action(cluster, "bert")).get("reverting") and r.get("state") == "WaitingForCheckpoint" and r,
        timeout=30,
        what="a revert",
    )
    assert reverting["reason"] == "Worse"
    assert reverting["result"]["samplesPerSecond"] < 0.7 * reverting["baseline"]["samplesPerSecond"]
    acknowledge(cluster, bert, f"{waiting['id']}-revert")
    bert.slow_down(FAST_WAIT)
    reverted = restarted_job(cluster, new_job["metadata"]["uid"])
    assert env_of(reverted)["NUM_WORKERS"] == "1"
    rolled_back = eventually(lambda: in_state(cluster, "bert", "RolledBack"), timeout=20, what="RolledBack")
    assert rolled_back["reason"] == "Worse"
    states = [step["state"] for step in rolled_back["history"]]
    assert states == [
        "Planned", "WaitingForCheckpoint", "Applying", "Verifying", "WaitingForCheckpoint", "Applying", "RolledBack"
    ]  # fmt: skip
    worse = [e["message"].split(":")[0] for e in events(cluster, "Worse", "bert")]
    assert sorted(worse) == [
        f"AdjustConfig {waiting['id']} {state}" for state in ("RolledBack", "WaitingForCheckpoint")
    ]
    tj = cluster.trainingjob("bert") or {}
    overrides = json.loads((tj["metadata"].get("annotations") or {})[wiring.API_GROUP + "/overrides"])
    revert_checkpoint = f"/checkpoints/{waiting['id']}-revert.pt"
    assert overrides == {"resumeFrom": revert_checkpoint}, "the spec's configuration, from the revert's checkpoint"
    assert env_of(job_of(cluster, "bert") or {}).get(wiring.ENV_RESUME_FROM) == revert_checkpoint

    # The cooldown (1 s) is over and more DataLoader workers are still recommended: not tried again.
    (refused,) = eventually(lambda: events(cluster, "ActionNotTaken", "bert"), timeout=20, what="ActionNotTaken")
    assert (
        "(RevertedBefore)" in refused["message"]
        and f"action {waiting['id']} made the same change" in refused["message"]
    )
    time.sleep(2)  # cycles in which it would have been tried again
    assert status_of(cluster, "bert")["recommendations"][0]["action"] == "AdjustConfig", "still recommended"
    assert len(actions_of(cluster, "bert")) == 1


def test_no_acknowledgement_no_restart(cluster: Cluster, operator: Operator, bert: Trainer) -> None:
    job = start(cluster, trainingjob("bert", checkpoint={"timeoutSeconds": 2}))
    failed = eventually(lambda: in_state(cluster, "bert", "Failed"), timeout=30, what="the action to fail")
    assert failed["reason"] == "CheckpointTimeout"
    assert uid_of_job(cluster, "bert") == job["metadata"]["uid"], "never restarted"
    (pod,) = pods_of(cluster, "bert")
    assert wiring.ANNOTATION_CHECKPOINT_REQUEST not in (pod["metadata"].get("annotations") or {}), "withdrawn"
    assert status_of(cluster, "bert")["recommendations"][0]["action"] == "AdjustConfig", "still recommended"
    assert events(cluster, "CheckpointTimeout", "bert")[0]["type"] == "Warning"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"checkpoint": {"enabled": False}}, "CheckpointDisabled"),
        ({"pod": {"annotations": {wiring.ANNOTATION_DO_NOT_DISRUPT: "true"}}}, "DoNotDisrupt"),
        ({"telemetry": {"instrumentation": "Disabled"}}, "InstrumentationDisabled"),  # nothing can answer
    ],
    ids=["checkpoint-disabled", "do-not-disrupt", "instrumentation-disabled"],
)
def test_jobs_that_must_not_be_restarted_keep_recommending(
    cluster: Cluster, operator: Operator, bert: Trainer, change: dict[str, Any], reason: str
) -> None:
    job = start(cluster, trainingjob("bert", **change))
    (event,) = eventually(lambda: events(cluster, "ActionNotTaken", "bert"), timeout=30, what="ActionNotTaken")
    assert f"({reason})" in event["message"]
    assert actions_of(cluster, "bert") == []
    assert status_of(cluster, "bert")["recommendations"][0]["action"] == "AdjustConfig"
    assert uid_of_job(cluster, "bert") == job["metadata"]["uid"]


def test_a_job_refused_until_it_changes_is_acted_on_once_it_does(
    cluster: Cluster, operator: Operator, bert: Trainer
) -> None:
    # Refused for a reason that lasts while the job stays as it is: the runner does not plan it
    # again every cycle, but it must not miss the job's change either.
    start(cluster, trainingjob("bert", checkpoint={"enabled": False}))
    (event,) = eventually(lambda: events(cluster, "ActionNotTaken", "bert"), timeout=30, what="ActionNotTaken")
    assert "(CheckpointDisabled)" in event["message"]
    time.sleep(2)  # cycles in which the refusal stands
    assert actions_of(cluster, "bert") == []
    cluster.patch(TJ_API, "TrainingJob", "bert", {"spec": {"checkpoint": {"enabled": True}}})
    eventually(lambda: in_state(cluster, "bert", "WaitingForCheckpoint"), timeout=30, what="the action, at last")


@pytest.mark.parametrize(
    "efficiency", [{"mode": "Recommend"}, {"actions": ["Reschedule"]}], ids=["recommend-mode", "not-listed"]
)
def test_only_enforce_with_the_action_listed_acts(
    cluster: Cluster, operator: Operator, bert: Trainer, efficiency: dict[str, Any]
) -> None:
    start(cluster, trainingjob("bert", efficiency=efficiency))
    eventually(lambda: status_of(cluster, "bert").get("recommendations"), timeout=30, what="a recommendation")
    time.sleep(3)  # cycles in which an action would have been planned
    assert actions_of(cluster, "bert") == []
    assert events(cluster, "ActionNotTaken", "bert") == [], "nothing to explain: the user did not ask for it"


def test_budget_used_up_by_another_job(cluster: Cluster, operator: Operator, bert: Trainer) -> None:
    start(cluster, trainingjob("bert"))
    eventually(lambda: in_state(cluster, "bert", "WaitingForCheckpoint"), timeout=30, what="bert's action")
    gpt = start(cluster, trainingjob("gpt"))
    (event,) = eventually(lambda: events(cluster, "ActionNotTaken", "gpt"), timeout=30, what="gpt refused")
    assert "(BudgetExhausted)" in event["message"]
    assert "cluster budget 1 allows 1 disrupted job(s) of 2 running, and 1 already are" in event["message"]
    assert actions_of(cluster, "gpt") == []
    assert uid_of_job(cluster, "gpt") == gpt["metadata"]["uid"]


@pytest.mark.parametrize("operator_settings", [{"dryRun": True}])
def test_dry_run_records_what_would_have_happened(cluster: Cluster, operator: Operator, bert: Trainer) -> None:
    job = start(cluster, trainingjob("bert"))
    record = eventually(lambda: in_state(cluster, "bert", "DryRun"), timeout=30, what="a DryRun record")
    assert record["message"].startswith("Dry run, not done: Set NUM_WORKERS=")
    assert record["overridesTarget"]["env"]["NUM_WORKERS"] == record["changes"]["NUM_WORKERS"]
    (pod,) = pods_of(cluster, "bert")
    assert wiring.ANNOTATION_CHECKPOINT_REQUEST not in (pod["metadata"].get("annotations") or {})
    assert uid_of_job(cluster, "bert") == job["metadata"]["uid"]
    assert len(actions_of(cluster, "bert")) == 1, "once per cooldown, not every cycle"


def test_turning_actions_off_in_the_settings_file_stops_an_action_in_flight(
    cluster: Cluster, operator: Operator, bert: Trainer, tmp_path: Path
) -> None:
    job = start(cluster, trainingjob("bert", checkpoint={"timeoutSeconds": 600}))  # the trainer never answers
    waiting = eventually(lambda: in_state(cluster, "bert", "WaitingForCheckpoint"), timeout=30, what="a request")
    operator_config(tmp_path, enabled=False)  # what `helm upgrade --set actions.enforce=false` does to the file
    stopped = eventually(lambda: in_state(cluster, "bert", "Stopped"), timeout=15, what="the action stopped")
    assert stopped["id"] == waiting["id"] and stopped["reason"] == "ActionsDisabled"
    assert uid_of_job(cluster, "bert") == job["metadata"]["uid"], "never restarted"
    (pod,) = pods_of(cluster, "bert")
    assert wiring.ANNOTATION_CHECKPOINT_REQUEST not in (pod["metadata"].get("annotations") or {}), "withdrawn"
    assert events(cluster, "ActionsDisabled", "bert")[0]["type"] == "Warning"
    time.sleep(3)  # cycles in which a new action would have started
    assert len(actions_of(cluster, "bert")) == 1
