"""One TrainingJob and an action runner driven one cycle at a time, on a clock the test moves.

The API server is the emulator over HTTP and the checkpoint acknowledgements are in a real
Prometheus (scraping an exposition the test writes, as the sidecars would); the test plays the Job
controller and the reconciler where the operator would (it renders the Job with the operator's
code). Used by the runner's state-machine tests and the scenario tests of single action kinds.
Their Prometheus is one for the session (`tests/act/conftest.py`): each test's own hour and pod
names keep its series apart, and a mutation run (`make mutation`) starts one per mutant, not one
per test file.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kopf._core.engines import posting

from gpuwise import wiring
from gpuwise.act.action_settings import ActionSettings
from gpuwise.act.checkpoint import Acks
from gpuwise.act.kinds import AVAILABLE
from gpuwise.act.machine import Plan, new_record, transition
from gpuwise.act.measure import Meter
from gpuwise.act.runner import Runner
from gpuwise.api.kinds import ActionKind
from gpuwise.api.trainingjob import ActionRecord, ActionState, Recommendation
from gpuwise.kube import job_overrides
from gpuwise.kube.client import Kube
from gpuwise.kube.trainingjob import parse_spec
from gpuwise.operator.config import SidecarSettings
from gpuwise.operator.workload import render_job
from gpuwise.prometheus.client import Prometheus as Source
from tests.act.scenario import TJ_API, trainingjob
from tests.integration.conftest import Cluster
from tests.support.prometheus import Prometheus
from tests.support.waiting import eventually

START = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)
SETTINGS = ActionSettings(min_runtime="10m", verify_window="5m", apply_timeout="30m")
HOURS = itertools.count()
MORE_WORKERS = Recommendation(
    action=ActionKind.ADJUST_CONFIG,
    finding="InputBound",
    message="m",
    changes={"NUM_WORKERS": "4"},
    expected_effect="up to 2.5x steps per second: 60% of step time is input wait",
    expected_speedup=2.5,
)
"""The recommendation most tests act on: a restart with more DataLoader workers."""


# What the sidecars export: the acknowledgements a test has put here so far, by worker and request,
# and samples counters by pod: (samples per second, the unix time the counter started at 0). A pod
# belongs to the TrainingJob its name begins with (bert-0-3: bert).
ACKS: dict[str, str] = {}
SAMPLES: dict[str, tuple[float, float]] = {}


def record_in(
    state: ActionState,
    at: datetime = START,
    kind: ActionKind = ActionKind.ADJUST_CONFIG,
    *,
    reason: str = "Test",
    changes: Mapping[str, str] | None = None,
    **update: Any,
) -> ActionRecord:
    """An action of `kind` for InputBound started at `at` and in `state` since then (entered for
    `reason`; `changes` are its plan's), with `update` to the record."""
    plan = Plan(target=job_overrides.NONE, message="m", changes=changes or {})
    record = new_record(kind, "InputBound", plan, job_overrides.NONE, at)
    if state is not ActionState.PLANNED:
        record = transition(record, state, reason, "m", at)
    return record.model_copy(update=update)


def exposition() -> bytes:
    now = time.time()
    counters = "".join(
        f'gpuwise_samples_total{{namespace="default",trainingjob="{pod.split("-")[0]}",pod="{pod}"}} '
        f"{rate * (now - since)}\n"
        for pod, (rate, since) in list(SAMPLES.items())
    )
    return (
        "# TYPE gpuwise_checkpoint_ack_timestamp_seconds gauge\n"
        + "".join(ACKS.values())
        + "# TYPE gpuwise_samples_total counter\n"
        + counters
    ).encode()


def acknowledge(prometheus: Prometheus, worker: int, rid: str, at: float, path: str = "") -> None:
    """A worker's sidecar exports its acknowledgement of `rid`; wait until Prometheus holds it."""
    ACKS[f"{worker}/{rid}"] = (
        f'gpuwise_checkpoint_ack_timestamp_seconds{{namespace="default",trainingjob="bert",'
        f'worker="{worker}",request_id="{rid}",path="{path}"}} {at}\n'
    )
    wanted = f'gpuwise_checkpoint_ack_timestamp_seconds{{worker="{worker}",request_id="{rid}"}}'
    eventually(lambda: prometheus.query(wanted), what=f"worker {worker}'s ack scraped")


@dataclass
class Clock:
    at: datetime

    def __call__(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> datetime:
        self.at += timedelta(seconds=seconds)
        return self.at


class Job:
    """The TrainingJob bert, running for an hour at START, with worker 0's pod; and a runner for it."""

    def __init__(
        self, cluster: Cluster, kube: Kube, prometheus: Prometheus, settings: ActionSettings, **spec: Any
    ) -> None:
        self.cluster = cluster
        # Each test's own hour: its request ids (named by the time) are new to Prometheus.
        self.start = START + timedelta(hours=next(HOURS))
        self.clock = Clock(self.start)
        self._kube, self._source = kube, Source(prometheus.url)
        self.meter_window = 300.0  # seconds of throughput a measurement spans
        self.runner = self.new_runner(settings)
        cluster.create(trainingjob("bert", **spec))  # spec: sections to update, as scenario.trainingjob takes them
        started = (self.start - timedelta(hours=1)).isoformat()
        status = {"status": {"phase": "Running", "startTime": started}}
        cluster.patch(TJ_API, "TrainingJob", "bert", status, status=True)
        self.render()
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "bert-0",
                "labels": {wiring.LABEL_TRAININGJOB: "bert", wiring.JOB_COMPLETION_INDEX_ANNOTATION: "0"},
                "annotations": {wiring.JOB_COMPLETION_INDEX_ANNOTATION: "0"},
            },
            "spec": {"containers": [{"name": "trainer", "image": "x"}]},
        }
        cluster.create(pod)

    def new_runner(self, settings: ActionSettings) -> Runner:
        """A runner that knows nothing but what the cluster holds: an operator (re)started now."""
        return Runner(
            self._kube,
            settings,
            Acks(self._source, cycle_seconds=0),  # every cycle reads again: the test's cycles are instants
            Meter(self._source, window_seconds=self.meter_window, cycle_seconds=0),
            kinds=AVAILABLE,
            clock=self.clock,
        )

    def body(self) -> dict[str, Any]:
        found = self.cluster.get(TJ_API, "TrainingJob", "bert")
        assert found is not None
        return found

    def pods(self) -> list[dict[str, Any]]:
        return self.cluster.list("v1", "Pod", label_selector=f"{wiring.LABEL_TRAININGJOB}=bert")

    def render(self) -> None:
        """Play the reconciler: the Job for the spec and the overrides the TrainingJob wants now."""
        body = self.body()
        spec, _ = parse_spec(body)
        assert spec is not None
        self.cluster.create(render_job(body, spec, SidecarSettings(), job_overrides.wanted(body)))

    def request(self) -> str | None:
        annotations = self.pods()[0]["metadata"].get("annotations") or {}
        value: str | None = annotations.get(wiring.ANNOTATION_CHECKPOINT_REQUEST)
        return value

    async def cycle(self, *recommendations: Recommendation, after: float = 0) -> ActionRecord | None:
        """One evaluation cycle, `after` seconds after the last; the job's last action afterwards."""
        self.clock.advance(after)
        body = self.body()
        await self.runner.run(body, self.pods(), [body], list(recommendations))
        actions = (self.body().get("status") or {}).get("actions") or []
        return ActionRecord.model_validate(actions[-1]) if actions else None

    def store(self, *records: ActionRecord) -> None:
        """Actions in status (the last one in flight), as an operator restarted in the middle finds them."""
        self.cluster.patch(
            TJ_API, "TrainingJob", "bert", {"status": {"actions": [r.to_k8s() for r in records]}}, status=True
        )


@pytest.fixture(name="job")
def job_fixture(cluster: Cluster, kube: Kube, prometheus: Prometheus, events: asyncio.Queue[posting.K8sEvent]) -> Job:
    ACKS.clear()
    SAMPLES.clear()
    return Job(cluster, kube, prometheus, SETTINGS)
