"""The slice of core/v1 that a TrainingJob passes through to its pods.

Typed where users make mistakes we can name (env, resources, tolerations); volume sources and
affinity keep their unknown fields, because core/v1 has dozens of them and the API server
validates them again when the Job is created — an error there reaches the TrainingJob's
conditions with the server's own message.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from gpuwise.api.base import PRESERVE_UNKNOWN, ApiModel, EnvVarName, Quantity, cel, list_map


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


# --- security contexts: what a TrainingJob may say about how its pods run ------------------------
# Only the fields a training pod needs. gpuwise fills in the Pod Security "restricted" defaults
# where these say nothing, and the operator's `podSecurity` setting decides how far they may loosen
# them (see gpuwise.kube.pod_security); the rest of core/v1's securityContext (SELinux, AppArmor,
# sysctls, Windows options) cannot be set, so it needs no policy.


class SeccompProfileType(StrEnum):
    RUNTIME_DEFAULT = "RuntimeDefault"
    LOCALHOST = "Localhost"
    UNCONFINED = "Unconfined"


class SeccompProfile(ApiModel):
    type: SeccompProfileType
    localhost_profile: str | None = Field(
        default=None, min_length=1, description="The profile's path under the kubelet's seccomp directory."
    )

    @model_validator(mode="after")
    def _profile_with_localhost(self) -> SeccompProfile:
        if (self.type is SeccompProfileType.LOCALHOST) != (self.localhost_profile is not None):
            raise ValueError("localhostProfile is set with type Localhost, and only then")
        return self

    model_config = ConfigDict(
        json_schema_extra=cel(
            "(self.type == 'Localhost') == has(self.localhostProfile)",
            "localhostProfile is set with type Localhost, and only then",
        )
    )


Capability = Annotated[str, StringConstraints(pattern=r"^[A-Z][A-Z_]*$", max_length=64)]


class Capabilities(ApiModel):
    add: list[Capability] | None = None
    drop: list[Capability] | None = Field(default=None, description="gpuwise drops ALL unless this says otherwise.")


class SecurityContext(ApiModel):
    """The trainer container's securityContext; unset fields get gpuwise's restricted defaults."""

    run_as_user: int | None = Field(
        default=None, ge=0, description="UID of the trainer; images that run as root need a non-zero one here."
    )
    run_as_group: int | None = Field(default=None, ge=0)
    run_as_non_root: bool | None = None
    allow_privilege_escalation: bool | None = Field(
        default=None, description="gpuwise sets false unless privileged or SYS_ADMIN asks for it."
    )
    privileged: bool | None = None
    read_only_root_filesystem: bool | None = None
    capabilities: Capabilities | None = None
    seccomp_profile: SeccompProfile | None = None

    @model_validator(mode="after")
    def _escalation_fits_privileged(self) -> SecurityContext:
        if self.allow_privilege_escalation is False and self.privileged:
            raise ValueError("allowPrivilegeEscalation cannot be false in a privileged container: remove one of them")
        return self


class FsGroupChangePolicy(StrEnum):
    ON_ROOT_MISMATCH = "OnRootMismatch"
    ALWAYS = "Always"


class PodSecurityContext(ApiModel):
    """The worker pods' securityContext; it applies to gpuwise's sidecar too, hence no root UID here."""

    run_as_user: int | None = Field(
        default=None,
        ge=1,
        description=(
            "UID of every container without its own; not 0: the sidecar runs as non-root "
            "(set 0 in spec.trainer.securityContext instead)."
        ),
    )
    run_as_group: int | None = Field(default=None, ge=0)
    run_as_non_root: bool | None = Field(default=None, description="gpuwise sets true unless this says otherwise.")
    fs_group: int | None = Field(default=None, ge=0)
    fs_group_change_policy: FsGroupChangePolicy | None = None
    supplemental_groups: list[Annotated[int, Field(ge=0)]] | None = None
    seccomp_profile: SeccompProfile | None = Field(
        default=None, description="gpuwise sets RuntimeDefault unless this says otherwise."
    )
