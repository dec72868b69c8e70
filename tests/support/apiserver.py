"""What the API server does with a TrainingJob that the emulator does not: the CRD's schema, run.

The emulator (tests/support/emulator.py) stores whatever it is given, so the tests play this part
of the API server themselves, from the generated CRD's openAPIV3Schema:

- structural validation: types, bounds, patterns, enums, required fields (jsonschema's Draft 4,
  whose boolean `exclusiveMinimum` OpenAPI v3.0 shares; it ignores the `x-kubernetes-*` keys);
- the `x-kubernetes-validations` CEL rules, evaluated with cel-python the way the API server runs
  them: on the object after schema defaulting (applied to the stored object too) and typed by the
  schema, with `self` the value at the rule's node and, for a transition rule (one that reads
  `oldSelf`), `oldSelf` the stored value; a transition rule runs only on an update where both
  values exist, a rule that cannot be evaluated (a missing field) refuses the request, and a rule
  without a message refuses with `failed rule: <rule>`. cel-python has none of Kubernetes' CEL
  libraries, which the rules do not use;
- list types (`x-kubernetes-list-type`): a `map` list's items are merged by their key fields
  (`x-kubernetes-list-map-keys`), so two items with the same key are the API server's `Duplicate
  value`, as are two equal items of a `set` list; and the CRD's own list markers must be ones the
  API server accepts when the CRD is created (`list_type_problems`).

Paths are dotted from the object's root, a list item's index in brackets: `spec.trainer.env[1]`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import celpy
import jsonschema
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from gpuwise.api import crd

SCHEMA: dict[str, Any] = crd.schema()
MISSING: Any = object()
ENV = celpy.Environment()
SCALAR_TYPES = frozenset({"string", "integer", "number", "boolean"})


def validations(schema: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], list[Any]]]:
    """Each schema node with CEL rules, by its path of property names, with the rules as written."""
    if "x-kubernetes-validations" in schema:
        yield path, schema["x-kubernetes-validations"]
    for name, sub in schema.get("properties", {}).items():
        yield from validations(sub, (*path, name))
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found = list(validations(schema[key], (*path, "[]")))
            assert not found, f"rules under list or map values {found}: teach this harness to pair old and new"


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


def holds(rule: str, value: Any, old: Any = MISSING) -> bool:
    activation = {"self": json_to_cel(value)}
    if old is not MISSING:
        activation["oldSelf"] = json_to_cel(old)
    try:
        result = ENV.program(ENV.compile(rule)).evaluate(activation)
    except CELEvalError:
        return False
    return isinstance(result, celtypes.BoolType) and bool(result)


def is_transition(rule: dict[str, Any]) -> bool:
    return "oldSelf" in rule["rule"]


def rule_outcomes(
    new: dict[str, Any], old: dict[str, Any] | None = None, schema: dict[str, Any] = SCHEMA
) -> Iterator[tuple[str, str, bool]]:
    """(path, message, holds) of every rule that runs on this create (old None) or update."""
    new = as_stored(schema, new)
    stored = as_stored(schema, old) if old is not None else None
    for path, rules in validations(schema):
        value, before = at(new, path), at(stored, path) if stored is not None else MISSING
        if value is MISSING:
            continue
        for rule in rules:
            if is_transition(rule) and before is MISSING:
                continue
            message = rule.get("message") or f"failed rule: {rule['rule']}"
            yield ".".join(path), message, holds(rule["rule"], value, before)


def refusals(
    new: dict[str, Any], old: dict[str, Any] | None = None, schema: dict[str, Any] = SCHEMA
) -> set[tuple[str, str]]:
    """(path, message) of each CEL rule that refuses this create (old None) or update."""
    return {(path, message) for path, message, ok in rule_outcomes(new, old, schema) if not ok}


def schema_errors(doc: dict[str, Any], schema: dict[str, Any] = SCHEMA) -> set[tuple[str, str]]:
    """(path, message) of each structural validation error of `doc`."""
    return {
        (dotted(error.absolute_path), error.message) for error in jsonschema.Draft4Validator(schema).iter_errors(doc)
    }


def dotted(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def lists(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Each node with a list marker (`x-kubernetes-list-*`) or of type array, by its dotted path."""
    if schema.get("type") == "array" or any(key.startswith("x-kubernetes-list-") for key in schema):
        yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from lists(sub, f"{path}.{name}" if path else name)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from lists(schema[key], f"{path}[]")


def list_type_problems(schema: dict[str, Any]) -> list[str]:
    """What the API server says of the CRD's list markers when the CRD is created (empty: accepted).

    apiextensions' rules: a list type is `atomic`, `set` or `map`, on an array only; a `set` holds
    scalars; a `map` holds objects and names its keys, each a scalar property of the items that is
    required or has a default (every item must have it); keys only with `map`.
    """
    problems = []
    for path, node in lists(schema):
        kind, keys = node.get("x-kubernetes-list-type"), node.get("x-kubernetes-list-map-keys")
        items = node.get("items", {})
        if kind is None:
            if keys is not None:
                problems.append(f"{path}: x-kubernetes-list-map-keys without x-kubernetes-list-type: map")
            continue
        if kind not in {"atomic", "set", "map"}:
            problems.append(f"{path}: x-kubernetes-list-type {kind!r} is not one of atomic, set, map")
        if node.get("type") != "array":
            problems.append(f"{path}: x-kubernetes-list-type on a {node.get('type')}, not an array")
        if kind == "set" and items.get("type") not in SCALAR_TYPES:
            problems.append(f"{path}: a set of {items.get('type')}, not of scalars")
        if kind != "map":
            if keys is not None:
                problems.append(f"{path}: x-kubernetes-list-map-keys on a list of type {kind}")
            continue
        if items.get("type") != "object":
            problems.append(f"{path}: a map list of {items.get('type')}, not of objects")
        if not keys:
            problems.append(f"{path}: a map list without x-kubernetes-list-map-keys")
        for key in keys or ():
            prop = items.get("properties", {}).get(key)
            if prop is None:
                problems.append(f"{path}: map key {key!r} is not a property of the items")
                continue
            if prop.get("type") not in SCALAR_TYPES:
                problems.append(f"{path}: map key {key!r} is of type {prop.get('type')}, not a scalar")
            if key not in items.get("required", ()) and "default" not in prop:
                problems.append(f"{path}: map key {key!r} is neither required nor defaulted")
    return problems


def duplicates(value: Any, schema: dict[str, Any] = SCHEMA) -> list[str]:
    """The paths of the API server's `Duplicate value` errors in `value` (defaults filled in first):
    an item of a `map` list whose keys an earlier item has, or a `set` item equal to an earlier one."""
    return _duplicates(as_stored(schema, value), schema, "")


def _duplicates(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    found = []
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                found += _duplicates(value[name], sub, f"{path}.{name}" if path else name)
    elif isinstance(value, list):
        kind, keys = schema.get("x-kubernetes-list-type"), schema.get("x-kubernetes-list-map-keys") or []
        seen: list[Any] = []
        for index, item in enumerate(value):
            identity = tuple(item.get(key) for key in keys) if kind == "map" and isinstance(item, dict) else item
            if kind in {"map", "set"} and identity in seen:
                found.append(f"{path}[{index}]")
            seen.append(identity)
            found += _duplicates(item, schema.get("items", {}), f"{path}[{index}]")
    return found
