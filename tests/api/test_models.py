"""The TrainingJob models: defaults users rely on, and errors that name what to fix."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import yaml
from pydantic import ValidationError

from gpuwise.api.base import parse_duration
from gpuwise.api.core import SeccompProfile, SeccompProfileType, SecurityContext
from gpuwise.api.trainingjob import (
    Condition,
    EfficiencyMode,
    Finding,
    Instrumentation,
    Phase,
    TrainingJobSpec,
    TrainingJobStatus,
)


def spec(**overrides: object) -> dict[str, object]:
    return {"trainer": {"image": "pytorch/pytorch:latest"}, **overrides}


def errors(raw: dict[str, object]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as caught:
        TrainingJobSpec.model_validate(raw)
    return [(".".join(map(str, e["loc"])), e["msg"]) for e in caught.value.errors()]


def test_defaults_are_the_documented_ones() -> None:
    parsed = TrainingJobSpec.model_validate(spec())
    assert (parsed.trainer.num_nodes, parsed.trainer.num_proc_per_node) == (1, 1)
    assert parsed.efficiency.mode is EfficiencyMode.RECOMMEND
    assert parsed.efficiency.window == "15m"
    assert parsed.telemetry.instrumentation is Instrumentation.AUTO
    assert parsed.telemetry.sample_interval_seconds == 1.0
    assert parsed.checkpoint.enabled is False
    assert parsed.run_policy.suspend is False


def test_round_trip_is_camel_case_without_nulls() -> None:
    raw = spec(efficiency={"tunables": {"batchSize": {"env": "BATCH_SIZE", "min": 8, "max": 512}}})
    out = TrainingJobSpec.model_validate(raw).to_k8s()
    assert out["trainer"] == {
        "image": "pytorch/pytorch:latest",
        "numNodes": 1,
        "numProcPerNode": 1,
        "env": [],
        "envFrom": [],
        "volumeMounts": [],
        "resourcesPerNode": {},
    }
    assert out["efficiency"]["tunables"]["batchSize"] == {"env": "BATCH_SIZE", "min": 8, "max": 512}
    assert TrainingJobSpec.model_validate(out) == TrainingJobSpec.model_validate(raw)


@pytest.mark.parametrize(
    ("raw", "where", "says"),
    [
        ({"trainer": {}}, "trainer.image", "Field required"),
        (spec(trainer={"image": "x", "numNodes": 0}), "trainer.numNodes", "greater than or equal to 1"),
        (spec(trainer={"image": "x", "numNode": 2}), "trainer.numNode", "Extra inputs are not permitted"),
        (
            spec(trainer={"image": "x", "resourcesPerNode": {"limits": {"memory": "lots"}}}),
            "trainer.resourcesPerNode.limits.memory",
            "is not a Kubernetes quantity",
        ),
        (
            spec(efficiency={"window": "fifteen minutes"}),
            "efficiency.window",
            "is not a duration (examples: 90s",
        ),
        (
            spec(efficiency={"mode": "Auto"}),
            "efficiency.mode",
            "Input should be 'Observe', 'Recommend' or 'Enforce'",
        ),
        (
            spec(efficiency={"thresholds": {"gpuUtilization": 120}}),
            "efficiency.thresholds.gpuUtilization",
            "less than or equal to 100",
        ),
        (spec(efficiency={"actions": ["Pack", "Pack"]}), "efficiency", "actions must not repeat"),
        (
            spec(efficiency={"tunables": {"batchSize": {"env": "B", "min": 64, "max": 8}}}),
            "efficiency.tunables.batchSize",
            "min (64) must not exceed max (8)",
        ),
        # The sidecar's own floor (NVML GPM): a spec the API takes never makes a sidecar that exits.
        (
            spec(telemetry={"sampleIntervalSeconds": 0.05}),
            "telemetry.sampleIntervalSeconds",
            "greater than or equal to 0.1",
        ),
        (spec(efficiency={"window": "25h"}), "efficiency.window", "must be at most 24h"),
        (spec(trainer={"image": "x", "numNodes": 1_000_000}), "trainer.numNodes", "less than or equal to 100000"),
        (spec(trainer={"image": "my image"}), "trainer.image", "String should match pattern"),
        (spec(trainer={"image": "   "}), "trainer.image", "String should match pattern"),
        (spec(trainer={"image": "x", "shmSize": "-1Gi"}), "trainer.shmSize", "is negative"),
        (
            spec(trainer={"image": "x", "resourcesPerNode": {"requests": {"cpu": -2}}}),
            "trainer.resourcesPerNode.requests.cpu",
            "is negative",
        ),
        (spec(checkpoint={"timeoutSeconds": 0}), "checkpoint.timeoutSeconds", "greater than or equal to 1"),
        (
            spec(
                trainer={
                    "image": "x",
                    "env": [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
                }
            ),
            "trainer.env.0",
            "set either value or valueFrom, not both",
        ),
        # The pod's UID applies to gpuwise's sidecar too, which runs as non-root.
        (
            spec(pod={"securityContext": {"runAsUser": 0}}),
            "pod.securityContext.runAsUser",
            "greater than or equal to 1",
        ),
        (
            spec(trainer={"image": "x", "securityContext": {"seccompProfile": {"type": "Localhost"}}}),
            "trainer.securityContext.seccompProfile",
            "localhostProfile is set with type Localhost, and only then",
        ),
        (
            spec(trainer={"image": "x", "securityContext": {"privileged": True, "allowPrivilegeEscalation": False}}),
            "trainer.securityContext",
            "allowPrivilegeEscalation cannot be false in a privileged container",
        ),
        (
            spec(trainer={"image": "x", "securityContext": {"capabilities": {"add": ["sys admin"]}}}),
            "trainer.securityContext.capabilities.add.0",
            "String should match pattern",
        ),
    ],
)
def test_bad_input_names_the_field(raw: dict[str, object], where: str, says: str) -> None:
    problems = errors(raw)
    assert any(loc == where and says in msg for loc, msg in problems), problems


def test_yaml_off_is_not_an_instrumentation_mode() -> None:
    # YAML 1.1 reads an unquoted Off as the boolean false (every enum is checked in test_crd.py).
    raw = yaml.safe_load("trainer: {image: x}\ntelemetry: {instrumentation: Off}\n")
    assert raw["telemetry"]["instrumentation"] is False
    assert errors(raw)[0][0] == "telemetry.instrumentation"


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("15m", 900), ("1h30m", 5400), ("250ms", 0.25)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "15", "0s", "1d", "m15"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def plain_json(value: object) -> bool:
    """Whether `value` is made of JSON's own types only (no enum, datetime or other subclass)."""
    if isinstance(value, dict):
        return all(type(k) is str and plain_json(v) for k, v in value.items())
    if isinstance(value, list):
        return all(plain_json(item) for item in value)
    return value is None or type(value) in {str, int, float, bool}


def test_to_k8s_is_what_travels_as_json() -> None:
    """Status patches and rendered pods carry to_k8s(): enums as plain strings, times as RFC 3339."""
    since = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    finding = Finding(kind="DataLoaderBound", confidence=0.5, since=since, message="m", evidence={"a": "b"})
    status = TrainingJobStatus(
        phase=Phase.RUNNING,
        conditions=[Condition(type="Ready", status="True", reason="Up", last_transition_time=since)],
        findings=[finding],
    )
    out = status.to_k8s()
    assert plain_json(out), out
    assert out["phase"] == "Running"
    assert out["conditions"][0]["lastTransitionTime"] == "2026-01-02T03:04:05Z"
    assert finding.to_k8s()["since"] == "2026-01-02T03:04:05Z"
    context = SecurityContext(seccomp_profile=SeccompProfile(type=SeccompProfileType.RUNTIME_DEFAULT)).to_k8s()
    assert context == {"seccompProfile": {"type": "RuntimeDefault"}} and plain_json(context)
    assert yaml.safe_load(yaml.safe_dump(out)) == out  # the safe dumper refuses anything but plain types
