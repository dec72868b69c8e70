"""The CRD's CEL rules, run: the emulator has none, so this test plays the API server's part.

Every `x-kubernetes-validations` rule of the generated schema is evaluated with cel-python the way
the API server runs it: on the object after schema defaulting (applied to the stored object too)
and typed by the schema, with `self` the value at the rule's node and, for a transition rule (one
that reads `oldSelf`), `oldSelf` the stored value; a transition rule runs only on an update where
both values exist, and a rule that cannot be evaluated (a missing field) refuses the request.
cel-python has none of Kubernetes' CEL libraries, which the rules do not use.
"""

from __future__ import annotations

import copy
import pathlib
from collections.abc import Iterator
from typing import Any

import celpy
import pytest
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from gpuwise.api import crd

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "trainingjob.yaml").read_text())
SCHEMA = crd.schema()
MISSING: Any = object()
ENV = celpy.Environment()


def rules(schema: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], list[str]]]:
    """Each schema node with rules, by its path of property names."""
    if schema.get("x-kubernetes-validations"):
        yield path, [v["rule"] for v in schema["x-kubernetes-validations"]]
    for name, sub in schema.get("properties", {}).items():
        yield from rules(sub, (*path, name))
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found = list(rules(schema[key], (*path, "[]")))
            assert not found, f"rules under list or map values {found}: teach this test to pair old and new"


def as_stored(schema: dict[str, Any], value: Any) -> Any:
    """`value` as CEL sees it on the API server: defaults filled in (parents first), and a
    `type: number` always a double (cel-python finds the int 1 and the double 1.0 unequal)."""
    if isinstance(value, dict) and "properties" in schema:
        value = dict(value)
        for name, sub in schema["properties"].items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = as_stored(sub, value[name])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        value = [as_stored(schema["items"], item) for item in value]
    elif schema.get("type") == "number" and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    return value


def at(doc: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        if not isinstance(doc, dict) or name not in doc:
            return MISSING
        doc = doc[name]
    return doc


def holds(rule: str, value: Any, old: Any) -> bool:
    activation = {"self": json_to_cel(value)}
    if old is not MISSING:
        activation["oldSelf"] = json_to_cel(old)
    try:
        result = ENV.program(ENV.compile(rule)).evaluate(activation)
    except CELEvalError:
        return False
    return isinstance(result, celtypes.BoolType) and bool(result)


def verdicts(new: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, bool]:
    """For each rule node that runs on this create (old None) or update: whether its rules hold."""
    new = as_stored(SCHEMA, new)
    stored = as_stored(SCHEMA, old) if old is not None else None
    found = {}
    for path, texts in rules(SCHEMA):
        value, before = at(new, path), at(stored, path) if stored is not None else MISSING
        if value is MISSING:
            continue
        run = [t for t in texts if "oldSelf" not in t or before is not MISSING]
        if run:
            found[".".join(path)] = all(holds(t, value, before) for t in run)
    return found


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


TUNABLES = ("batchSize", "dataLoaderWorkers", "gradientAccumulationSteps")
# (what, stored object or None for a create, new object, the rule nodes that refuse it)
CASES: list[tuple[str, dict[str, Any] | None, dict[str, Any], set[str]]] = [
    ("create the example", None, EXAMPLE, set()),
    ("suspend a running job", EXAMPLE, edited(EXAMPLE, "spec.runPolicy.suspend", True), set()),
    ("change the efficiency mode", EXAMPLE, edited(EXAMPLE, "spec.efficiency.mode", "Enforce"), set()),
    ("a window of a day", None, edited(EXAMPLE, "spec.efficiency.window", "23h59m60s"), set()),
    ("a window past a day", None, edited(EXAMPLE, "spec.efficiency.window", "24h1s"), {"spec.efficiency.window"}),
    ("change the image", EXAMPLE, edited(EXAMPLE, "spec.trainer.image", "pytorch/pytorch:2.5"), {"spec.trainer"}),
    ("change numNodes", EXAMPLE, edited(EXAMPLE, "spec.trainer.numNodes", 4), {"spec.trainer"}),
    ("change a nodeSelector", EXAMPLE, edited(EXAMPLE, "spec.pod.nodeSelector", {"pool": "a100"}), {"spec.pod"}),
    (
        "change the instrumentation",
        EXAMPLE,
        edited(EXAMPLE, "spec.telemetry.instrumentation", "Manual"),
        {"spec.telemetry"},
    ),
    # Sections the job was created without: the API server defaults them, so the rules still run.
    ("add spec.pod to a job created without", edited(EXAMPLE, "spec.pod", MISSING), EXAMPLE, {"spec.pod"}),
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
        {"spec.telemetry"},
    ),
    *[
        (f"create with {where} seccomp {profile}", None, edited(EXAMPLE, f"spec.{where}.securityContext", context), bad)
        for where in ("trainer", "pod")
        for profile, context, bad in [
            ("RuntimeDefault", {"seccompProfile": {"type": "RuntimeDefault"}}, set()),
            (
                "Localhost with its profile",
                {"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}},
                set(),
            ),
            (
                "Localhost without a profile",
                {"seccompProfile": {"type": "Localhost"}},
                {f"spec.{where}.securityContext.seccompProfile"},
            ),
            (
                "a profile without Localhost",
                {"seccompProfile": {"type": "RuntimeDefault", "localhostProfile": "p.json"}},
                {f"spec.{where}.securityContext.seccompProfile"},
            ),
        ]
    ],
    *[
        (f"create with gang {gang}", None, edited(EXAMPLE, "spec.pod.gang", gang), bad)
        for gang, bad in [
            ({"scheduler": "Volcano"}, set()),
            ({"scheduler": "KAI", "queue": "research"}, set()),
            ({"scheduler": "KAI"}, {"spec.pod.gang"}),
            ({"scheduler": "Coscheduling", "queue": "research"}, {"spec.pod.gang"}),
        ]
    ],
    *[
        (f"create with gang {scheduler} and schedulerName {name}", None, edited(EXAMPLE, "spec.pod", pod), bad)
        for scheduler, name, bad in [
            ("Volcano", "volcano", set()),
            ("Volcano", "default-scheduler", {"spec.pod"}),
            ("KAI", "volcano", {"spec.pod"}),
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
    *[
        (f"create with {name} min > max", None, edited(EXAMPLE, f"spec.efficiency.tunables.{name}", bad), {path})
        for name in TUNABLES
        for path, bad in [(f"spec.efficiency.tunables.{name}", {"env": "X", "min": 64, "max": 8})]
    ],
    *[
        (f"create with {name} min defaulted", None, edited(EXAMPLE, f"spec.efficiency.tunables.{name}", ok), set())
        for name in TUNABLES
        for ok in [{"env": "X", "max": 8}]
    ],
]


@pytest.mark.parametrize(("old", "new", "refused"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_rules(old: dict[str, Any] | None, new: dict[str, Any], refused: set[str]) -> None:
    assert {path for path, ok in verdicts(new, old).items() if not ok} == refused


def test_every_rule_both_admits_and_refuses_a_case() -> None:
    every = {".".join(path) for path, _ in rules(SCHEMA)}
    assert {"spec.trainer", "spec.pod", "spec.telemetry", "spec.efficiency.tunables.batchSize"} <= every
    seen: dict[str, set[bool]] = {path: set() for path in every}
    for _, old, new, _ in CASES:
        for path, ok in verdicts(new, old).items():
            seen[path].add(ok)
    assert {path: outcomes for path, outcomes in seen.items() if outcomes != {True, False}} == {}
