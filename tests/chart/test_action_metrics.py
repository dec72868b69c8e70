"""The operator's count of actions taken: one per transition, where the runner posts its Event."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import kopf
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gpuwise.act import runner
from gpuwise.act.machine import JobView, Plan, new_record, transition
from gpuwise.act.transitions import ActionTransitions
from gpuwise.api.kinds import ActionKind
from gpuwise.api.overrides import JobOverrides
from gpuwise.api.trainingjob import ActionState
from gpuwise.metrics import catalog
from tests.sidecar.support import parse


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def exposed(actions: ActionTransitions) -> dict[tuple[str, str, str], float]:
    registry = CollectorRegistry()
    registry.register(actions)
    series = parse(generate_latest(registry).decode())
    return {
        (s.labels["trainingjob"], s.labels["action"], s.labels["state"]): s.value
        for s in series
        if s.name == catalog.ACTION_TRANSITIONS.name
    }


def test_every_transition_is_counted_with_its_event(monkeypatch: pytest.MonkeyPatch) -> None:
    posted: list[tuple[str, str]] = []
    monkeypatch.setattr(kopf, "info", lambda body, *, reason, message: posted.append(("info", reason)))
    monkeypatch.setattr(kopf, "warn", lambda body, *, reason, message: posted.append(("warn", reason)))
    actions = ActionTransitions()
    monkeypatch.setattr(runner, "ACTIONS", actions)
    body: dict[str, Any] = {"apiVersion": "gpuwise.io/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "bert"}}
    job = cast(JobView, SimpleNamespace(namespace="team", name="bert", body=body))
    now = datetime(2025, 1, 1, tzinfo=UTC)
    plan = Plan(JobOverrides(), "more DataLoader workers")
    record = new_record(ActionKind.ADJUST_CONFIG, "InputBound", plan, JobOverrides(), now)
    emit = runner.Runner._event
    emit(cast(runner.Runner, None), job, record)
    emit(cast(runner.Runner, None), job, transition(record, ActionState.FAILED, "CheckpointTimeout", "none", now))
    assert posted == [("info", "Planned"), ("warn", "CheckpointTimeout")]
    assert exposed(actions) == {("bert", "AdjustConfig", "Planned"): 1, ("bert", "AdjustConfig", "Failed"): 1}


def test_a_quiet_jobs_series_end_after_the_retention() -> None:
    clock = Clock()
    actions = ActionTransitions(clock, retention=3600)
    actions.count("team", "bert", "Pack", "Planned")
    actions.count("team", "bert", "Pack", "Planned")
    clock.now = 1800
    actions.count("team", "gpt", "Reschedule", "Done")
    assert exposed(actions) == {("bert", "Pack", "Planned"): 2, ("gpt", "Reschedule", "Done"): 1}
    clock.now = 3601  # bert has been quiet for the retention: its series end (a deleted job's too)
    assert exposed(actions) == {("gpt", "Reschedule", "Done"): 1}
    actions.count("team", "bert", "Pack", "Planned")  # acting again starts anew, as after a restart
    assert exposed(actions)[("bert", "Pack", "Planned")] == 1
