"""Operator-wide settings: what every injected sidecar looks like and where the operator looks.

They come from a YAML file (the Helm chart mounts it from a ConfigMap) and command-line flags;
pydantic validates both and names the offending key, so a typo fails at start-up rather than at
the first TrainingJob.
"""

from __future__ import annotations

import pathlib
from typing import Any

import yaml
from pydantic import Field, ValidationError

from gpuwise.act.action_settings import ActionSettings
from gpuwise.api.base import ApiModel
from gpuwise.api.core import PullPolicy, ResourceRequirements
from gpuwise.kube.pod_security import Level


class SidecarSettings(ApiModel):
    image: str = Field(default="ghcr.io/gpuwise/gpuwise:0.1.0", min_length=1)
    image_pull_policy: PullPolicy = PullPolicy.IF_NOT_PRESENT
    resources: ResourceRequirements = Field(
        default_factory=lambda: ResourceRequirements(
            requests={"cpu": "20m", "memory": "64Mi"}, limits={"memory": "128Mi"}
        )
    )
    startup_timeout_seconds: int = Field(default=60, ge=1, description="How long the trainer waits for it.")


class OperatorSettings(ApiModel):
    sidecar: SidecarSettings = Field(default_factory=SidecarSettings)
    namespaces: list[str] = Field(default_factory=list, description="Watched namespaces; empty: all.")
    resync_seconds: float = Field(default=60.0, gt=0, description="Periodic re-check of every job.")
    prometheus_url: str | None = Field(
        default=None, pattern=r"^https?://", description="Where to read metrics from; unset: no evaluation."
    )
    evaluation_seconds: float = Field(default=30.0, gt=0, description="How often every running job is diagnosed.")
    status_refresh_seconds: float = Field(
        default=300.0,
        gt=0,
        description="How old a job's efficiency figures may get in status when none moved by its tolerance.",
    )
    query_step_seconds: float = Field(
        default=15.0, ge=1, description="Resolution of the range queries: set it to Prometheus' scrape interval."
    )
    actions: ActionSettings = Field(
        default_factory=ActionSettings, description="Guardrails of Enforce mode: budgets, cooldowns, dry run."
    )
    pod_security: Level = Field(
        default=Level.RESTRICTED,
        description="The Pod Security level TrainingJobs' pods must pass: how far a spec may loosen gpuwise's "
        "restricted defaults. A job whose pods would break it gets no Job, and Accepted=False.",
    )


class SettingsError(ValueError):
    """A settings file that cannot be used, with a message that says what to fix."""


def load_settings(path: pathlib.Path | None, overrides: dict[str, Any] | None = None) -> OperatorSettings:
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SettingsError(f"cannot read settings file {path}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise SettingsError(f"settings file {path} must hold a mapping, not {type(loaded).__name__}")
        raw = loaded
    raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return OperatorSettings.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
        raise SettingsError(f"invalid operator settings ({path or 'flags'}): {problems}") from exc
