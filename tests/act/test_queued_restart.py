"""An action's restart of a job in a Kueue queue goes back through the queue (issue 18).

The runner deletes the Job and the reconciler renders the new one: for a queued job that one is
suspended with the queue label again, and neither the runner nor the reconciler releases it; only
Kueue does. The test drives the runner from `Applying` (no checkpoint, so no Prometheus is asked)
and the reconciler's own `ensure_workload`, against the emulator over HTTP.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from kopf._core.engines import posting

from gpuwise.act.action_settings import ActionSettings
from gpuwise.act.checkpoint import Acks
from gpuwise.act.kinds import AVAILABLE
from gpuwise.act.machine import Plan, new_record, transition
from gpuwise.act.measure import Meter
from gpuwise.act.runner import Runner
from gpuwise.api.kinds import ActionKind
from gpuwise.api.overrides import JobOverrides
from gpuwise.api.trainingjob import ActionRecord, ActionState
from gpuwise.kube import job_overrides, queues
from gpuwise.kube.client import Kube
from gpuwise.kube.trainingjob import parse_spec
from gpuwise.operator.config import OperatorSettings
from gpuwise.operator.reconcile import ReconcileContext, ensure_workload
from gpuwise.prometheus.client import Prometheus
from tests.act.scenario import TJ_API, trainingjob
from tests.integration.conftest import Cluster
from tests.support.waiting import eventually

START = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)
SETTINGS = ActionSettings(apply_timeout="30m")
TARGET = JobOverrides(env={"NUM_WORKERS": "4"})


class Clock:
    def __init__(self) -> None:
        self.at = START

    def __call__(self) -> datetime:
        return self.at


def body_of(cluster: Cluster) -> dict[str, Any]:
    found = cluster.get(TJ_API, "TrainingJob", "bert")
    assert found is not None
    return found


def job_of(cluster: Cluster) -> dict[str, Any] | None:
    return cluster.get("batch/v1", "Job", "bert")


async def render(cluster: Cluster, kube: Kube) -> dict[str, Any]:
    """The reconciler's step for a missing Job: `ensure_workload` with the overrides the job wants."""
    body = body_of(cluster)
    spec, _ = parse_spec(body)
    assert spec is not None
    job, problem = await ensure_workload(
        body, spec, job_overrides.wanted(body), ReconcileContext(kube, OperatorSettings())
    )
    assert job is not None and problem is None
    return job


async def test_a_restarted_queued_job_waits_in_its_queue_again(
    cluster: Cluster, kube: Kube, events: asyncio.Queue[posting.K8sEvent]
) -> None:
    manifest = trainingjob("bert")
    manifest["metadata"]["labels"] = {queues.QUEUE_LABEL: "team-a"}
    cluster.create(manifest)
    first = await render(cluster, kube)
    assert first["spec"]["suspend"] is True
    cluster.patch("batch/v1", "Job", "bert", {"spec": {"suspend": False}})  # Kueue admits it
    record = new_record(
        ActionKind.ADJUST_CONFIG, "InputBound", Plan(target=TARGET, message="m"), job_overrides.NONE, START
    )
    record = transition(record, ActionState.APPLYING, "CheckpointAcknowledged", "m", START)
    status = {"phase": "Running", "startTime": (START - timedelta(hours=1)).isoformat(), "actions": [record.to_k8s()]}
    cluster.patch(TJ_API, "TrainingJob", "bert", {"status": status}, status=True)

    clock = Clock()
    source = Prometheus("http://127.0.0.1:9")  # never asked: the action is past its checkpoint
    runner = Runner(
        kube,
        SETTINGS,
        Acks(source, cycle_seconds=0),
        Meter(source, window_seconds=300, cycle_seconds=0),
        kinds=AVAILABLE,
        clock=clock,
    )

    async def cycle(phase: str | None = None) -> ActionRecord:
        if phase is not None:
            cluster.patch(TJ_API, "TrainingJob", "bert", {"status": {"phase": phase}}, status=True)
        body = body_of(cluster)
        await runner.run(body, [], [body], [])
        return ActionRecord.model_validate((body_of(cluster)["status"]["actions"])[-1])

    await cycle()  # writes the new overrides
    assert job_overrides.wanted(body_of(cluster)) == TARGET
    await cycle()  # deletes the Job rendered with the old ones
    eventually(lambda: job_of(cluster) is None, what="the old Job deleted")

    second = await render(cluster, kube)
    assert second["spec"]["suspend"] is True, "back through the queue, not around it"
    assert second["metadata"]["labels"][queues.QUEUE_LABEL] == "team-a"
    assert job_overrides.applied(second) == TARGET

    record = await cycle(phase="Queued")
    assert record.state is ActionState.VERIFYING
    assert (job_of(cluster) or {})["spec"]["suspend"] is True, "the runner does not release a queued Job"
    clock.at += timedelta(hours=2)  # past applyTimeout, still in the queue
    record = await cycle()
    assert record.state is ActionState.VERIFYING, "waiting in the queue is not a failure to run"
    assert (job_of(cluster) or {})["spec"]["suspend"] is True
