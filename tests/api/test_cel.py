"""The CRD's CEL rules, run: the emulator has none, so these tests play the API server's part.

Every `x-kubernetes-validations` rule of the generated schema is evaluated with cel-python the way
the API server runs it (tests/support/apiserver.py says how): each case names the rules that
refuse it by their node and message, as the API server's answer does, and every rule must both
admit and refuse one of the cases. The models' own validators must refuse the same creates, at
the same field: a spec `gpuwise run` takes from a file is the spec the API server would take.
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import pytest
import yaml
from pydantic import ConfigDict, ValidationError

from gpuwise.api import crd
from gpuwise.api.base import ApiModel, cel
from gpuwise.api.trainingjob import TrainingJobSpec
from tests.support.apiserver import MISSING, SCHEMA, refusals, rule_outcomes, validations

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "trainingjob.yaml").read_text())

IMMUTABLE = "is immutable once the job runs: delete and re-create the TrainingJob to change it"
WINDOW = "spec.efficiency.window must be at most 24h"
EXAMPLES = "(examples: 90s, 15m, 1h30m)"
ZERO_WINDOW = ("spec.efficiency.window", f"spec.efficiency.window must be longer than zero {EXAMPLES}")
ZERO_IDLE = ("spec.efficiency.idle.after", f"spec.efficiency.idle.after must be longer than zero {EXAMPLES}")
SECCOMP = "localhostProfile is set with type Localhost, and only then"
NO_QUEUE = "the queue names a Volcano or KAI queue: scheduler-plugins' coscheduling has none"
KAI_QUEUE = "KAI Scheduler places a job only in a queue: name one"
SCHEDULER_CONFLICT = (
    "spec.pod.schedulerName conflicts with spec.pod.gang: leave it out, or give the gang scheduler's own "
    "(volcano for Volcano, kai-scheduler for KAI; any name your scheduler-plugins deployment runs as for Coscheduling)"
)
MIN_MAX = "min must not exceed max"


def immutable(section: str) -> tuple[str, str]:
    return f"spec.{section}", f"spec.{section} {IMMUTABLE}"


def edited(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `doc` with the dotted `path` set to `value` (MISSING: removed)."""
    out = copy.deepcopy(doc)
    *parents, last = path.split(".")
    target = out
    for name in parents:
        target = target.setdefault(name, {})
    if value is MISSING:
        target.pop(last, None)
    else:
        target[last] = value
    return out


Refused = set[tuple[str, str]]
TUNABLES = ("batchSize", "dataLoaderWorkers", "gradientAccumulationSteps")
# (what, stored object or None for a create, new object, the rules that refuse it: (node, message))
CASES: list[tuple[str, dict[str, Any] | None, dict[str, Any], Refused]] = [
    ("create the example", None, EXAMPLE, set()),
    ("suspend a running job", EXAMPLE, edited(EXAMPLE, "spec.runPolicy.suspend", True), set()),
    ("change the efficiency mode", EXAMPLE, edited(EXAMPLE, "spec.efficiency.mode", "Enforce"), set()),
    ("change nothing", EXAMPLE, copy.deepcopy(EXAMPLE), set()),
    *[
        (f"a window of {window}", None, edited(EXAMPLE, "spec.efficiency.window", window), refused)
        for window, refused in [
            ("24h", set()),
            ("23h59m60s", set()),
            ("1440m", set()),
            ("86400s", set()),
            ("1ms", set()),
            ("24h1ms", {("spec.efficiency.window", WINDOW)}),
            ("86401s", {("spec.efficiency.window", WINDOW)}),
            ("1441m", {("spec.efficiency.window", WINDOW)}),
            ("25h", {("spec.efficiency.window", WINDOW)}),
            # The pattern takes a zero; the operator's parse_duration does not, so neither may the API server.
            ("0s", {ZERO_WINDOW}),
            ("0m0s", {ZERO_WINDOW}),
            ("0.0h", {ZERO_WINDOW}),
        ]
    ],
    *[
        (f"idle after {after}", None, edited(EXAMPLE, "spec.efficiency.idle", {"after": after}), refused)
        for after, refused in [("1ms", set()), ("48h", set()), ("0s", {ZERO_IDLE}), ("0ms0s", {ZERO_IDLE})]
    ],
    ("change the image", EXAMPLE, edited(EXAMPLE, "spec.trainer.image", "pytorch/pytorch:2.5"), {immutable("trainer")}),
    ("change numNodes", EXAMPLE, edited(EXAMPLE, "spec.trainer.numNodes", 4), {immutable("trainer")}),
    (
        "spell out the default numNodes",
        edited(EXAMPLE, "spec.trainer.numNodes", MISSING),
        edited(EXAMPLE, "spec.trainer.numNodes", 1),
        set(),
    ),
    ("change a nodeSelector", EXAMPLE, edited(EXAMPLE, "spec.pod.nodeSelector", {"pool": "a100"}), {immutable("pod")}),
    (
        "change the instrumentation",
        EXAMPLE,
        edited(EXAMPLE, "spec.telemetry.instrumentation", "Manual"),
        {immutable("telemetry")},
    ),
    (
        "change the sample interval",
        EXAMPLE,
        edited(EXAMPLE, "spec.telemetry.sampleIntervalSeconds", 2),
        {immutable("telemetry")},
    ),
    # Sections the job was created without: the API server defaults them, so the rules still run.
    ("add spec.pod to a job created without", edited(EXAMPLE, "spec.pod", MISSING), EXAMPLE, {immutable("pod")}),
    (
        "spell out the default telemetry",
        edited(EXAMPLE, "spec.telemetry", MISSING),
        edited(EXAMPLE, "spec.telemetry", {"instrumentation": "Auto", "sampleIntervalSeconds": 1}),
        set(),
    ),
    (
        "add a telemetry that differs",
        edited(EXAMPLE, "spec.telemetry", MISSING),
        edited(EXAMPLE, "spec.telemetry", {"instrumentation": "Disabled"}),
        {immutable("telemetry")},
    ),
    *[
        (f"create with {where} seccomp {profile}", None, edited(EXAMPLE, f"spec.{where}.securityContext", context), bad)
        for where in ("trainer", "pod")
        for profile, context, bad in [
            ("RuntimeDefault", {"seccompProfile": {"type": "RuntimeDefault"}}, set()),
            ("Unconfined", {"seccompProfile": {"type": "Unconfined"}}, set()),
            (
                "Localhost with its profile",
                {"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}},
                set(),
            ),
            (
                "Localhost without a profile",
                {"seccompProfile": {"type": "Localhost"}},
                {(f"spec.{where}.securityContext.seccompProfile", SECCOMP)},
            ),
            (
                "a profile without Localhost",
                {"seccompProfile": {"type": "RuntimeDefault", "localhostProfile": "p.json"}},
                {(f"spec.{where}.securityContext.seccompProfile", SECCOMP)},
            ),
        ]
    ],
    *[
        (f"create with gang {gang}", None, edited(EXAMPLE, "spec.pod.gang", gang), bad)
        for gang, bad in [
            ({"scheduler": "Volcano"}, set()),
            ({"scheduler": "Volcano", "queue": "research"}, set()),
            ({"scheduler": "Coscheduling"}, set()),
            ({"scheduler": "KAI", "queue": "research"}, set()),
            ({"scheduler": "KAI"}, {("spec.pod.gang", KAI_QUEUE)}),
            ({"scheduler": "Coscheduling", "queue": "research"}, {("spec.pod.gang", NO_QUEUE)}),
        ]
    ],
    *[
        (f"create with gang {scheduler} and schedulerName {name}", None, edited(EXAMPLE, "spec.pod", pod), bad)
        for scheduler, name, bad in [
            ("Volcano", "volcano", set()),
            ("Volcano", "default-scheduler", {("spec.pod", SCHEDULER_CONFLICT)}),
            ("Volcano", "kai-scheduler", {("spec.pod", SCHEDULER_CONFLICT)}),
            ("KAI", "kai-scheduler", set()),
            ("KAI", "volcano", {("spec.pod", SCHEDULER_CONFLICT)}),
            ("Coscheduling", "my-coscheduler", set()),
        ]
        for pod in [
            {
                **EXAMPLE["spec"].get("pod", {}),
                "schedulerName": name,
                "gang": {"scheduler": scheduler, **({"queue": "q"} if scheduler == "KAI" else {})},
            }
        ]
    ],
    ("create with a schedulerName and no gang", None, edited(EXAMPLE, "spec.pod.schedulerName", "volcano"), set()),
    *[
        (f"create with {name} {bounds}", None, edited(EXAMPLE, f"spec.efficiency.tunables.{name}", bounds), bad)
        for name in TUNABLES
        for bounds, bad in [
            ({"env": "X", "min": 9, "max": 8}, {(f"spec.efficiency.tunables.{name}", MIN_MAX)}),
            ({"env": "X", "min": 8, "max": 8}, set()),
            ({"env": "X", "max": 8}, set()),  # min defaults to 1
            ({"env": "X", "max": 0}, {(f"spec.efficiency.tunables.{name}", MIN_MAX)}),  # ... so 1 > 0
            ({"env": "X", "min": 0, "max": 0}, set()),
        ]
    ],
]


@pytest.mark.parametrize(("old", "new", "refused"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_rules(old: dict[str, Any] | None, new: dict[str, Any], refused: Refused) -> None:
    assert refusals(new, old) == refused


def test_every_rule_both_admits_and_refuses_a_case() -> None:
    every = {(".".join(path), rule["message"]) for path, rules in validations(SCHEMA) for rule in rules}
    assert {immutable("trainer"), immutable("pod"), immutable("telemetry"), ("spec.pod.gang", KAI_QUEUE)} <= every
    seen: dict[tuple[str, str], set[bool]] = {rule: set() for rule in every}
    for _, old, new, _ in CASES:
        for path, message, ok in rule_outcomes(new, old):
            seen[(path, message)].add(ok)
    assert {rule: outcomes for rule, outcomes in seen.items() if outcomes != {True, False}} == {}


def test_every_rule_says_what_to_fix() -> None:
    for path, rules in validations(SCHEMA):
        for rule in rules:
            assert set(rule) == {"rule", "message"}, path
            assert len(rule["message"]) >= 20, f"{path}: {rule['message']!r} says too little"


CREATES = [case for case in CASES if case[1] is None]


@pytest.mark.parametrize(("new", "refused"), [case[2:] for case in CREATES], ids=[case[0] for case in CREATES])
def test_the_models_refuse_the_creates_the_api_server_refuses(new: dict[str, Any], refused: Refused) -> None:
    try:
        TrainingJobSpec.model_validate(new["spec"])
    except ValidationError as error:
        where = {".".join(["spec", *map(str, e["loc"])]) for e in error.errors()}
    else:
        where = set()
    assert where == {path for path, _ in refused}


def test_a_rule_made_by_cel_is_run_and_refuses_with_its_message() -> None:
    # cel() runs once per rule as the models are defined; this one is made here, so that a test
    # sees cel() itself (mutation testing switches a mutant on after the models exist).
    class Window(ApiModel):
        model_config = ConfigDict(json_schema_extra=cel("self.low <= self.high", "low must not exceed high"))
        low: int
        high: int

    schema = crd.structural(Window.model_json_schema(by_alias=True))
    assert refusals({"low": 2, "high": 2}, schema=schema) == set()
    assert refusals({"low": 3, "high": 2}, schema=schema) == {("", "low must not exceed high")}
