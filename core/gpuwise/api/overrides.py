"""What gpuwise changed on a TrainingJob, on top of the spec the user wrote.

`spec.trainer` and `spec.pod` are immutable (CEL) and spec is the user's, so an action never edits
them. What an action changes instead lives in the TrainingJob's annotation `gpuwise.io/overrides`
as this model (JSON, camelCase), and the operator renders the Job from spec plus overrides. The
annotation is visible with `kubectl get tj -o yaml`, survives operator restarts, and deleting it
(followed by a restart of the job) returns the job to exactly what its spec says.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import Field, StringConstraints, field_validator

from gpuwise.api.base import ApiModel, Quantity

RESOURCE_NAME_PATTERN: Final = r"^([a-z0-9.-]+/)?[a-zA-Z0-9._-]+$"
ENV_NAME_PATTERN: Final = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
ResourceName = Annotated[str, StringConstraints(pattern=RESOURCE_NAME_PATTERN, max_length=253)]
NodeName = Annotated[str, StringConstraints(min_length=1, max_length=253)]


def _keys(names: dict[str, object], pattern: str, what: str) -> None:
    # Map keys are checked here: a CRD's structural schema cannot constrain them (no patternProperties).
    for name in names:
        if not re.match(pattern, name) or len(name) > 253:
            raise ValueError(f"{name!r} is not a valid {what} name")


class JobOverrides(ApiModel):
    """Changes gpuwise renders into the Job: each field wins over the spec's value."""

    env: dict[str, str] = Field(
        default_factory=dict, description="Trainer environment variables (the job's declared tunables)."
    )
    avoid_nodes: list[NodeName] = Field(
        default_factory=list, description="Nodes the workers must not run on (required node anti-affinity)."
    )
    prefer_nodes: list[NodeName] = Field(
        default_factory=list,
        description="Nodes the workers should run on when they can (preferred node affinity): where a "
        "node-side action made room for them.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels added to spec.pod.nodeSelector (e.g. another GPU class)."
    )
    resources: dict[str, Quantity] = Field(
        default_factory=dict,
        description="Trainer resources set in both requests and limits, e.g. nvidia.com/mig-3g.40gb: 1.",
    )
    remove_resources: list[ResourceName] = Field(
        default_factory=list, description="Trainer resources dropped from requests and limits, e.g. nvidia.com/gpu."
    )
    resume_from: str | None = Field(
        default=None,
        max_length=1024,
        description="The checkpoint the trainer acknowledged before gpuwise's last restart (its path, as the trainer "
        "gave it): the trainer gets it as GPUWISE_RESUME_FROM.",
    )
    suspend: bool = Field(default=False, description="Hold the Job suspended while an action prepares nodes for it.")

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        _keys(dict(value), ENV_NAME_PATTERN, "environment variable")
        return value

    @field_validator("resources")
    @classmethod
    def _resource_names(cls, value: dict[str, int | str]) -> dict[str, int | str]:
        _keys(dict(value), RESOURCE_NAME_PATTERN, "resource")
        return value

    def placement(self) -> JobOverrides:
        """The overrides a Job is rendered from, without `suspend` (which a running Job follows)."""
        return self.model_copy(update={"suspend": False})
