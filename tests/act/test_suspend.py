"""Suspend, walked one cycle at a time: an idle job checkpoints, gives its GPUs back, and resumes
from that checkpoint when its user says so (issue 18). The harness is `tests.act.cycles`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kopf._core.engines import posting

from gpuwise import wiring
from gpuwise.act.machine import request_id
from gpuwise.api.kinds import IDLE_SECONDS_CHANGE, ActionKind, FindingKind
from gpuwise.api.trainingjob import ActionState, Recommendation
from gpuwise.kube import job_overrides
from gpuwise.kube.client import Kube
from gpuwise.kube.trainingjob import follow_mutable_fields, parse_spec
from tests.act.conftest import drained
from tests.act.cycles import SETTINGS, Job, acknowledge
from tests.act.scenario import TJ_API, env_of
from tests.integration.conftest import Cluster
from tests.support.prometheus import AVAILABLE as HAS_PROMETHEUS
from tests.support.prometheus import Prometheus
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not HAS_PROMETHEUS, reason="needs prometheus (make system-deps)"),
]

CHECKPOINT = "/checkpoints/step-00000400.pt"
SUSPENDS = {"actions": ["Suspend"], "idle": {"after": "1h"}}


def idle_for(seconds: float) -> Recommendation:
    """What the Idle rule recommends for a job idle this long (see diagnose.rules.idle)."""
    return Recommendation(
        action=ActionKind.SUSPEND, finding=FindingKind.IDLE, message="m", changes={IDLE_SECONDS_CHANGE: f"{seconds}"}
    )


def idle_job(cluster: Cluster, kube: Kube, prometheus: Prometheus, **spec: Any) -> Job:
    return Job(cluster, kube, prometheus, SETTINGS, efficiency={**SUSPENDS, **spec.pop("efficiency", {})}, **spec)


def trainingjob_spec(job: Job) -> dict[str, Any]:
    spec: dict[str, Any] = job.body()["spec"]
    return spec


def batch_job(job: Job) -> dict[str, Any]:
    found = job.cluster.get("batch/v1", "Job", "bert")
    assert found is not None
    return found


async def test_an_idle_job_is_suspended_from_its_checkpoint_and_resumes_from_it(
    cluster: Cluster, kube: Kube, prometheus: Prometheus, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    job = idle_job(cluster, kube, prometheus)
    assert await job.cycle(idle_for(1800)) is None, "idle for 30 min of the hour: not yet"
    assert drained(events) == [("Normal", "ActionNotTaken")]

    record = await job.cycle(idle_for(3600), after=1800)
    assert record is not None and record.state is ActionState.WAITING_FOR_CHECKPOINT
    acknowledge(prometheus, worker=0, rid=request_id(record), at=job.clock().timestamp(), path=CHECKPOINT)
    record = await job.cycle(after=10)
    assert record is not None and record.state is ActionState.APPLYING
    assert record.overrides_target is not None and record.overrides_target.resume_from == CHECKPOINT

    await job.cycle(after=10)  # the Job is replaced by one that resumes from the checkpoint, held suspended
    eventually(lambda: job.cluster.get("batch/v1", "Job", "bert") is None, what="the old Job deleted")
    job.render()
    held = batch_job(job)
    assert held["spec"]["suspend"] is True, "created held: its pods never start"
    assert env_of(held)[wiring.ENV_RESUME_FROM] == CHECKPOINT

    record = await job.cycle(after=10)  # the TrainingJob itself is suspended
    assert trainingjob_spec(job)["runPolicy"]["suspend"] is True
    record = await job.cycle(after=10)
    assert record is not None and record.state is ActionState.DONE and record.reason == "IdleReclaimed"
    assert record.message == (
        "Suspended after 60 min idle (1.0 GPU-hours unused): 1 GPU(s) freed. Set spec.runPolicy.suspend: false "
        f"to resume from checkpoint {CHECKPOINT!r}."
    )
    assert batch_job(job)["spec"]["suspend"] is True, "released by the action, held by the spec"
    assert ("Normal", "IdleReclaimed") in drained(events)

    # The user resumes it: the reconciler lets the Job run, and its trainer finds the checkpoint.
    job.cluster.patch(TJ_API, "TrainingJob", "bert", {"spec": {"runPolicy": {"suspend": False}}})
    body = job.body()
    spec, _ = parse_spec(body)
    assert spec is not None
    await follow_mutable_fields(batch_job(job), spec, job_overrides.wanted(body), kube)
    resumed = batch_job(job)
    assert resumed["spec"]["suspend"] is False
    assert env_of(resumed)[wiring.ENV_RESUME_FROM] == CHECKPOINT


async def test_a_job_without_the_handshake_is_suspended_only_if_its_user_allows_it(
    cluster: Cluster, kube: Kube, prometheus: Prometheus, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    job = idle_job(cluster, kube, prometheus, checkpoint={"enabled": False})
    assert await job.cycle(idle_for(4000)) is None
    (event,) = [events.get_nowait() for _ in range(events.qsize())]
    assert event.reason == "ActionNotTaken" and "(CheckpointDisabled)" in event.message


async def test_allowed_without_a_checkpoint_it_asks_for_none(
    cluster: Cluster, kube: Kube, prometheus: Prometheus
) -> None:
    job = idle_job(
        cluster,
        kube,
        prometheus,
        checkpoint={"enabled": False},
        efficiency={"idle": {"after": "1h", "allowWithoutCheckpoint": True}},
    )
    record = await job.cycle(idle_for(4000))
    assert record is not None and record.state is ActionState.APPLYING, "no checkpoint request"
    assert record.checkpoint_requested_at is None and job.request() is None
    for _ in range(3):
        record = await job.cycle(after=10)
    assert record is not None and record.state is ActionState.DONE and record.reason == "IdleReclaimed"
    assert "resume from" not in record.message, "no checkpoint named: nothing to promise"
    assert trainingjob_spec(job)["runPolicy"]["suspend"] is True
    assert batch_job(job)["spec"]["suspend"] is True


async def test_dry_run_says_what_would_happen_and_does_nothing(
    cluster: Cluster, kube: Kube, prometheus: Prometheus
) -> None:
    job = idle_job(cluster, kube, prometheus)
    job.runner.settings = SETTINGS.model_copy(update={"dry_run": True})
    record = await job.cycle(idle_for(4000))
    assert record is not None and record.state is ActionState.DRY_RUN
    assert record.message.startswith("Dry run, not done: Suspend the job, idle for 67 min, after a checkpoint")
    assert job.request() is None and not trainingjob_spec(job).get("runPolicy", {}).get("suspend")
    assert batch_job(job)["spec"].get("suspend") is not True


async def test_turning_actions_off_while_held_resumes_the_job(
    cluster: Cluster, kube: Kube, prometheus: Prometheus
) -> None:
    job = idle_job(cluster, kube, prometheus)
    record = await job.cycle(idle_for(4000))
    assert record is not None
    acknowledge(prometheus, worker=0, rid=request_id(record), at=job.clock().timestamp(), path=CHECKPOINT)
    record = await job.cycle(after=10)
    assert record is not None and record.state is ActionState.APPLYING
    job.runner.settings = SETTINGS.model_copy(update={"enabled": False})
    record = await job.cycle(after=10)
    assert record is not None and record.reverting and record.reason == "ActionsDisabled"
    assert not trainingjob_spec(job).get("runPolicy", {}).get("suspend"), "never suspended"
