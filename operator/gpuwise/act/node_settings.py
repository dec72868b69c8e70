"""What a platform team configures for the node-side actions (MigRepartition, Pack).

gpuwise drives NVIDIA's own components through node labels and never configures them itself, so
it must be told the names they know: the MIG configs in MIG Manager's `mig-parted` ConfigMap and
the time-slicing config in the device plugin's ConfigMap. A name gpuwise is not told about is
never set on a node. Validated at start-up with the rest of the operator settings.
"""

from __future__ import annotations

from typing import Final

from pydantic import Field, field_validator

from gpuwise.api.base import ApiModel, Duration
from gpuwise.decide.packing.registry import POLICIES
from gpuwise.hardware.mig_profiles import GPU_MODELS

PROFILE_PATTERN: Final = r"^[1-7]g\.[0-9]+gb$"


class MigSettings(ApiModel):
    config_timeout: Duration = Field(
        default="15m",
        description="How long nvidia.com/mig.config.state may stay pending or rebooting before the change is "
        "rolled back (MIG Manager may reboot the node).",
    )
    configs: dict[str, dict[str, int]] = Field(
        default_factory=dict,
        description="MIG configs your MIG Manager's mig-parted ConfigMap defines beyond NVIDIA's default "
        "all-<profile> ones, as instances per GPU, e.g. {balanced: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}}.",
    )

    @field_validator("configs")
    @classmethod
    def _profiles(cls, value: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        known = {p.name for model in GPU_MODELS.values() for p in model.profiles}
        for name, counts in value.items():
            for profile, count in counts.items():
                if profile not in known:
                    raise ValueError(f"config {name!r}: {profile!r} is not a MIG profile of any known GPU model")
                if count < 1:
                    raise ValueError(f"config {name!r}: {profile} needs a count of at least 1, got {count}")
        return value


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
