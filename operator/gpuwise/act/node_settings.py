"""What a platform team configures for the node-side actions (MigRepartition, Pack).

gpuwise drives NVIDIA's own components through node labels, so it must be told where their
configs are: MIG Manager's `mig-parted` ConfigMap (where gpuwise reads what a node's MIG config
makes of its GPUs, and adds the one config per node it generates; it sets no other MIG name) and
the time-slicing config in the device plugin's ConfigMap (a name gpuwise is told, never one of its
own). Validated at start-up with the rest of the operator settings.
"""

from __future__ import annotations

from typing import Final

from pydantic import Field, field_validator

from gpuwise.api.base import ApiModel, Duration
from gpuwise.decide.packing.registry import POLICIES

DNS_LABEL: Final = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_SUBDOMAIN: Final = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"


class ConfigMapRef(ApiModel):
    namespace: str = Field(default="gpu-operator", pattern=DNS_LABEL, description="The GPU Operator's namespace.")
    name: str = Field(default="custom-mig-config", pattern=DNS_SUBDOMAIN, description="The ConfigMap's name.")

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class MigSettings(ApiModel):
    config_timeout: Duration = Field(
        default="15m",
        description="How long nvidia.com/mig.config.state may stay pending or rebooting before the change is "
        "rolled back (MIG Manager may reboot the node).",
    )
    config_map: ConfigMapRef = Field(
        default_factory=ConfigMapRef,
        description="MIG Manager's mig-parted ConfigMap: the one your ClusterPolicy's migManager.config.name names "
        "(key config.yaml). gpuwise reads what each node's config makes of its GPUs there, and adds a config per "
        "node it repartitions (gpuwise-<node>-<digest>), keeping every other config.",
    )


class TimeSlicingSettings(ApiModel):
    config: str | None = Field(
        default=None,
        min_length=1,
        description="The device plugin config (a key of its ConfigMap) that time-slices every GPU of a node; "
        "unset: Pack never time-slices.",
    )
    replicas: int = Field(default=4, ge=2, le=64, description="Jobs per GPU under that config.")
    resource: str = Field(
        default="nvidia.com/gpu.shared",
        pattern=r"^[a-z0-9.-]+/[a-zA-Z0-9._-]+$",
        description="What a shared replica is called under that config (renameByDefault: true gives "
        "nvidia.com/gpu.shared).",
    )
    config_timeout: Duration = Field(
        default="5m", description="How long the device plugin may take to offer the shares after the label is set."
    )


class NodeActionSettings(ApiModel):
    drain_timeout: Duration = Field(
        default="10m",
        description="How long evictions refused by PodDisruptionBudgets are retried before the action gives up "
        "and uncordons the node.",
    )
    evict_namespaces: list[str] = Field(
        default_factory=list,
        description="Namespaces whose GPU pods MigRepartition may evict to idle a node; empty: any. TrainingJob "
        "workers and pods annotated gpuwise.io/do-not-disrupt are never evicted.",
    )
    mig: MigSettings = Field(default_factory=MigSettings)
    time_slicing: TimeSlicingSettings = Field(default_factory=TimeSlicingSettings)
    packing_policy: str = Field(default="gpuwise", description="The packing planner's policy: gpuwise or bestfit.")

    @field_validator("packing_policy")
    @classmethod
    def _policy(cls, value: str) -> str:
        if value not in POLICIES:
            raise ValueError(f"{value!r} is not a packing policy; choose one of: {', '.join(POLICIES)}")
        return value
