"""Building blocks shared by every API model: camelCase on the wire, strict input, k8s scalars.

Models refuse unknown fields (`extra="forbid"`) so that a typo such as `numNode` is an error
that names the field, instead of a silently ignored setting. Schema-only hints for the CRD
(`x-kubernetes-*` markers, CEL rules) ride along in `json_schema_extra` and are the only place
where the CRD differs from what pydantic itself enforces.
"""

from __future__ import annotations

import functools
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=False,
    )

    def to_k8s(self) -> dict[str, Any]:
        """The object as it travels over the API: camelCase, enums as strings, no nulls."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# Kubernetes' resource.Quantity grammar (apimachinery's quantity regex), less the minus sign: every
# quantity of the API is an amount (resources, /dev/shm), and a negative one is refused.
QUANTITY_PATTERN = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)


def _check_quantity(value: int | str) -> int | str:
    # A negative quantity ("-16Gi") is one by Kubernetes' grammar: say what is wrong with it.
    if isinstance(value, str) and not _QUANTITY_RE.match(value.removeprefix("-")):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (examples: 1, 500m, 16Gi)")
    if (value < 0) if isinstance(value, int) else value.startswith("-"):
        raise ValueError(f"{value!r} is negative: an amount of a resource is 0 or more")
    return value


# The pattern applies to strings only; `minimum` to numbers only: the API server needs both.
Quantity = Annotated[
    int | str,
    AfterValidator(_check_quantity),
    Field(json_schema_extra={"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN, "minimum": 0}),
]

# A C identifier-ish environment variable name, as Kubernetes accepts it.
EnvVarName = Annotated[str, StringConstraints(pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", max_length=253)]

# Durations as Go and Prometheus write them: 90s, 15m, 1h30m.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@functools.lru_cache(maxsize=256)  # a handful of distinct windows, parsed for every job every cycle
def parse_duration(text: str) -> float:
    """Seconds in a duration such as `1h30m`; raises ValueError naming the expected form."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"{text!r} is not a duration (examples: 90s, 15m, 1h30m)")
    seconds = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))
    if seconds <= 0:
        raise ValueError(f"duration {text!r} must be longer than zero")
    return seconds


def _check_duration(value: str) -> str:
    parse_duration(value)
    return value


# The API server checks the pattern; pydantic runs the validator, whose message is friendlier.
Duration = Annotated[str, AfterValidator(_check_duration), Field(json_schema_extra={"pattern": DURATION_PATTERN})]

# CamelCase machine-readable reasons, as Kubernetes conditions use them.
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


def list_map(key: str) -> dict[str, Any]:
    """Schema markers for a list merged by key (env by name, volumes by name…)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]}


LIST_SET: dict[str, Any] = {"x-kubernetes-list-type": "set"}
PRESERVE_UNKNOWN: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}


def cel(rule: str, message: str) -> dict[str, Any]:
    """A CEL validation rule evaluated by the API server (Kubernetes ≥ 1.25)."""
    return {"x-kubernetes-validations": [{"rule": rule, "message": message}]}
