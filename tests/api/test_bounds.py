"""Every numeric and length limit of the API, from both sides: just inside it the models and the
API server take the object, just outside both refuse it, at the same field, and the models'
message says what to fix (the bound, or what a good value looks like).

The models decide for `gpuwise run` and for the operator; the API server (tests/support/apiserver.py
plays its part: schema and CEL rules) decides for `kubectl apply`. A bound drawn in one place only
would let a TrainingJob in that the operator then marks Invalid, or refuse one it would run.
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from gpuwise.api.trainingjob import TrainingJob
from tests.support.apiserver import dotted, refusals, schema_errors

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "trainingjob.yaml").read_text())
WORKER = {"pod": "p", "phase": "Running"}


def with_value(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(EXAMPLE)
    *parents, last = path.split(".")
    target = doc
    for name in parents:
        target = target.setdefault(name, {})
    target[last] = value
    return doc


def model_errors(doc: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        TrainingJob.model_validate(doc)
    except ValidationError as error:
        return [(dotted(e["loc"]), e["msg"]) for e in error.errors()]
    return []


def api_server_errors(doc: dict[str, Any]) -> set[str]:
    return {path for path, _ in schema_errors(doc) | refusals(doc)}


# (where the value goes, just inside, just outside, what the models say, the field refused if not where)
BOUNDS: list[tuple[str, Any, Any, str, str | None]] = [
    ("spec.trainer.numNodes", 1, 0, "greater than or equal to 1", None),
    ("spec.trainer.numNodes", 100_000, 100_001, "less than or equal to 100000", None),
    ("spec.trainer.numProcPerNode", 1, 0, "greater than or equal to 1", None),
    ("spec.trainer.image", "x", "", "at least 1 character", None),
    ("spec.trainer.shmSize", "0", "-1", "'-1' is negative: an amount of a resource is 0 or more", None),
    ("spec.trainer.shmSize", 0, -1, "-1 is negative: an amount of a resource is 0 or more", None),
    (
        "spec.trainer.resourcesPerNode",
        {"limits": {"cpu": 0}},
        {"limits": {"cpu": -1}},
        "-1 is negative",
        "spec.trainer.resourcesPerNode.limits.cpu",
    ),
    (
        "spec.trainer.env",
        [{"name": "A" * 253}],
        [{"name": "A" * 254}],
        "at most 253 characters",
        "spec.trainer.env[0].name",
    ),
    (
        "spec.trainer.securityContext",
        {"runAsUser": 0},
        {"runAsUser": -1},
        "greater than or equal to 0",
        "spec.trainer.securityContext.runAsUser",
    ),
    (
        "spec.pod.securityContext",
        {"runAsUser": 1},
        {"runAsUser": 0},
        "greater than or equal to 1",
        "spec.pod.securityContext.runAsUser",
    ),
    (
        "spec.pod.gang",
        {"scheduler": "Volcano", "queue": "q" * 63},
        {"scheduler": "Volcano", "queue": "q" * 64},
        "at most 63 characters",
        "spec.pod.gang.queue",
    ),
    ("spec.runPolicy.backoffLimit", 0, -1, "greater than or equal to 0", None),
    ("spec.runPolicy.activeDeadlineSeconds", 1, 0, "greater than or equal to 1", None),
    ("spec.runPolicy.ttlSecondsAfterFinished", 0, -1, "greater than or equal to 0", None),
    ("spec.checkpoint.timeoutSeconds", 1, 0, "greater than or equal to 1", None),
    ("spec.efficiency.thresholds.gpuUtilization", 0, -0.001, "greater than or equal to 0", None),
    ("spec.efficiency.thresholds.gpuUtilization", 100, 100.001, "less than or equal to 100", None),
    ("spec.efficiency.window", "24h", "24h1ms", "must be at most 24h", None),
    ("spec.efficiency.window", "1ms", "0s", "duration '0s' must be longer than zero", None),
    ("spec.efficiency.window", "1s" * 16, "1s" * 15 + "10s", "at most 32 characters", None),
    ("spec.efficiency.idle.after", "1ms", "0ms", "duration '0ms' must be longer than zero", None),
    ("spec.efficiency.idle.after", "1s" * 16, "1s" * 15 + "10s", "at most 32 characters", None),
    (
        "spec.efficiency.tunables.batchSize",
        {"env": "B", "min": 0, "max": 0},
        {"env": "B", "min": -1, "max": 0},
        "greater than or equal to 0",
        "spec.efficiency.tunables.batchSize.min",
    ),
    (
        "spec.efficiency.tunables.batchSize",
        {"env": "B", "min": 8, "max": 8},
        {"env": "B", "min": 9, "max": 8},
        "min (9) must not exceed max (8)",
        None,
    ),
    ("spec.telemetry.sampleIntervalSeconds", 0.1, 0.0999, "greater than or equal to 0.1", None),
    ("spec.telemetry.sampleIntervalSeconds", 3600, 3600.001, "less than or equal to 3600", None),
    ("status.restarts", 0, -1, "greater than or equal to 0", None),
    (
        "status.workers",
        [{"index": 0, **WORKER}],
        [{"index": -1, **WORKER}],
        "greater than or equal to 0",
        "status.workers[0].index",
    ),
    (
        "status.efficiency",
        {"smActivity": 1},
        {"smActivity": 1.001},
        "less than or equal to 1",
        "status.efficiency.smActivity",
    ),
    (
        "status.efficiency",
        {"gpuUtilization": 100},
        {"gpuUtilization": 100.001},
        "less than or equal to 100",
        "status.efficiency.gpuUtilization",
    ),
]


@pytest.mark.parametrize(
    ("path", "inside", "outside", "says", "where"),
    BOUNDS,
    ids=[f"{path}={outside!r}"[:80] for path, _, outside, _, _ in BOUNDS],
)
def test_both_sides_draw_the_line_at_the_same_place(
    path: str, inside: Any, outside: Any, says: str, where: str | None
) -> None:
    where = where or path
    assert model_errors(with_value(path, inside)) == []
    assert api_server_errors(with_value(path, inside)) == set()
    refused = model_errors(with_value(path, outside))
    assert [loc for loc, _ in refused] == [where], refused
    assert says in refused[0][1], refused
    assert api_server_errors(with_value(path, outside)) == {where}
