"""The slice of core/v1 that a TrainingJob passes through to its pods.

Typed where users make mistakes we can name (env, resources, tolerations); volume sources and
affinity keep their unknown fields, because core/v1 has dozens of them and the API server
validates them again when the Job is created — an error there reaches the TrainingJob's
conditions with the server's own message.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator

from gpuwise.api.base import PRESERVE_UNKNOWN, ApiModel, EnvVarName, Quantity, list_map


class ObjectKeySelector(ApiModel):
    name: str = Field(min_length=1)
    key: str = Field(min_length=1)
    optional: bool | None = None


class ObjectFieldSelector(ApiModel):
    field_path: str = Field(min_length=1)
    api_version: str | None = None


class ResourceFieldSelector(ApiModel):
    resource: str = Field(min_length=1)
    container_name: str | None = None
    divisor: Quantity | None = None


class EnvVarSource(ApiModel):
    config_map_key_ref: ObjectKeySelector | None = None
    secret_key_ref: ObjectKeySelector | None = None
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None


class EnvVar(ApiModel):
    name: EnvVarName
    value: str | None = None
    value_from: EnvVarSource | None = None

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError(f"env {self.name!r}: set either value or valueFrom, not both")
        return self


class NamedReference(ApiModel):
    name: str = Field(min_length=1)
    optional: bool | None = None


class EnvFromSource(ApiModel):
    prefix: str | None = None
    config_map_ref: NamedReference | None = None
    secret_ref: NamedReference | None = None


class ResourceRequirements(ApiModel):
    limits: dict[str, Quantity] | None = None
    requests: dict[str, Quantity] | None = None


class VolumeMount(ApiModel):
    name: str = Field(min_length=1)
    mount_path: str = Field(pattern=r"^/")
    read_only: bool | None = None
    sub_path: str | None = None


class Volume(ApiModel):
    """A pod volume: its name is checked here, its source by the API server."""

    model_config = ConfigDict(extra="allow", json_schema_extra=PRESERVE_UNKNOWN)
    name: str = Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(ApiModel):
    key: str | None = None
    operator: TolerationOperator | None = None
    value: str | None = None
    effect: TaintEffect | None = None
    toleration_seconds: int | None = None


class PullPolicy(StrEnum):
    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


EnvList = Annotated[list[EnvVar], Field(json_schema_extra=list_map("name"))]
VolumeList = Annotated[list[Volume], Field(json_schema_extra=list_map("name"))]
MountList = Annotated[list[VolumeMount], Field(json_schema_extra=list_map("mountPath"))]
FreeForm = Annotated[dict[str, Any], Field(json_schema_extra=PRESERVE_UNKNOWN)]
