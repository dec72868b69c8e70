"""API server faults (issue 20): conflicts, throttling, server errors and cut watches.

The real operator process runs against the emulator, which answers chosen requests with the
API server's errors (`Emulator.fail_next`) and cuts its watch streams mid-event
(`EmulatorThread.cut_watches`). What holds: every TrainingJob still gets its status and exactly
one Job, changes made after a cut stream are still seen, and the operator never exits.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.conftest import Cluster, Operator
from tests.integration.test_operator import TJ_API, job_of, manifest
from tests.support.emulator import Emulator, EmulatorThread
from tests.support.waiting import eventually

JOBS = "batch/v1/jobs"
TRAININGJOBS = "gpuwise.io/v1alpha1/trainingjobs"


@pytest.fixture
def api(emulator: EmulatorThread) -> Iterator[Emulator]:
    assert emulator.emulator is not None
    yield emulator.emulator


def created(cluster: Cluster, name: str) -> bool:
    condition = cluster.condition(name, "Created")
    return bool(condition and condition["status"] == "True")


def only_one_job(cluster: Cluster, api: Emulator, name: str) -> None:
    assert [j["metadata"]["name"] for j in cluster.list("batch/v1", "Job")].count(name) == 1
    assert api.create_attempts[f"{JOBS} default/{name}"] == 1, "no second Job was even tried"


def alive(operator: Operator) -> bool:
    return operator.process is not None and operator.process.poll() is None


def test_a_conflict_on_the_status_write_is_retried(cluster: Cluster, operator: Operator, api: Emulator) -> None:
    conflict = api.fail_next("PATCH", TRAININGJOBS, 409, times=2, subresource="status")
    cluster.create(manifest())
    eventually(lambda: created(cluster, "bert"), timeout=30, what="the status, past two conflicts")
    assert conflict.answered == 2
    only_one_job(cluster, api, "bert")
    assert alive(operator)


@pytest.mark.parametrize("code", [500, 429])
def test_a_job_create_refused_is_retried_into_exactly_one_job(
    cluster: Cluster, operator: Operator, api: Emulator, code: int
) -> None:
    refused = api.fail_next("POST", JOBS, code, times=2)
    cluster.create(manifest())
    eventually(lambda: created(cluster, "bert"), timeout=30, what=f"the Job created past two {code}s")
    assert refused.answered == 2
    assert job_of(cluster, "bert") is not None
    only_one_job(cluster, api, "bert")
    assert alive(operator)


def test_a_watch_ended_between_events_is_watched_again(
    cluster: Cluster, operator: Operator, api: Emulator, emulator: EmulatorThread
) -> None:
    cluster.create(manifest("first"))
    eventually(lambda: created(cluster, "first"), what="the first job handled")
    emulator.cut_watches()
    cluster.create(manifest("second"))
    eventually(lambda: created(cluster, "second"), timeout=30, what="a job created after the cut, handled")
    cluster.patch(TJ_API, "TrainingJob", "first", {"spec": {"runPolicy": {"suspend": True}}})
    eventually(
        lambda: (job_of(cluster, "first") or {}).get("spec", {}).get("suspend") is True,
        timeout=30,
        what="a change after the cut followed into the Job",
    )
    only_one_job(cluster, api, "first")
    only_one_job(cluster, api, "second")
    assert alive(operator)


def test_a_watch_cut_in_the_middle_of_an_event_restarts_the_operator_and_loses_nothing(
    cluster: Cluster, operator: Operator, api: Emulator, emulator: EmulatorThread
) -> None:
    """kopf (1.45) takes a watch stream that ends inside a line as fatal: the operator exits non-zero,
    so its Deployment starts it again, rather than living on blind. What it missed meanwhile is
    handled by the new process, with no second Job."""
    cluster.create(manifest("first"))
    eventually(lambda: created(cluster, "first"), what="the first job handled")
    emulator.cut_watches(mid_event=True)
    assert operator.process is not None
    assert operator.process.wait(timeout=20) != 0, "an exit a Deployment restarts, not a hang"
    cluster.create(manifest("second"))
    cluster.patch(TJ_API, "TrainingJob", "first", {"spec": {"runPolicy": {"suspend": True}}})
    operator.start()
    eventually(lambda: created(cluster, "second"), timeout=30, what="the job created while it was down")
    eventually(lambda: (job_of(cluster, "first") or {}).get("spec", {}).get("suspend") is True, timeout=30)
    only_one_job(cluster, api, "first")
    only_one_job(cluster, api, "second")
