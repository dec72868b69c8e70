"""Operator-wide settings: what every injected sidecar looks like and where the operator looks.

They come from a YAML file (the Helm chart mounts it from a ConfigMap) and command-line flags;
pydantic validates both and names the offending key, so a typo fails at start-up rather than at
the first TrainingJob.
"""

from __future__ import annotations

import logging
import pathlib
import time
from typing import Any, Final

import yaml
from pydantic import Field, ValidationError

from gpuwise.act.action_settings import ActionSettings
from gpuwise.api.base import ApiModel
from gpuwise.api.core import PullPolicy, ResourceRequirements
from gpuwise.kube.pod_security import Level

logger: Final = logging.getLogger(__name__)


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


class LiveSettings:
    """The settings file, read again when it changes, so a platform team can turn actions off now.

    The chart mounts the settings from a ConfigMap as a directory (not `subPath`), so the kubelet
    replaces the file when the ConfigMap changes, typically within a minute. `actions` (the kill
    switch `actions.enabled`, budgets, dry run…) takes effect at the next evaluation cycle; the
    rest shapes what the operator built at start-up (watched namespaces, the sidecar it injects)
    and takes a restart, which the log says. A file that no longer validates changes nothing: the
    operator keeps what it had and says why, once per version of the file.
    """

    def __init__(
        self,
        path: pathlib.Path,
        settings: OperatorSettings,
        overrides: dict[str, Any] | None = None,
        *,
        check_seconds: float = 1.0,
    ) -> None:
        self.path = path
        self.settings = settings
        self._overrides = overrides
        self._check_seconds = check_seconds
        self._checked = time.monotonic()
        self._version = self._stat()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()  # follows the ConfigMap volume's `..data` link: a new file, a new inode
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def current(self) -> OperatorSettings:
        """The settings as the file says now (looked at most once per `check_seconds`)."""
        if time.monotonic() - self._checked < self._check_seconds:
            return self.settings
        self._checked = time.monotonic()
        version = self._stat()
        if version == self._version:
            return self.settings
        self._version = version
        try:
            loaded = load_settings(self.path, self._overrides)
        except SettingsError as exc:
            logger.error("%s; keeping the settings in use", exc)
            return self.settings
        if loaded != self.settings:
            later = sorted(
                key
                for key in OperatorSettings.model_fields
                if key != "actions" and getattr(loaded, key) != getattr(self.settings, key)
            )
            if loaded.actions != self.settings.actions:
                logger.warning(
                    "settings file %s changed: new actions settings in effect (enabled: %s)",
                    self.path,
                    loaded.actions.enabled,
                )
            if later:
                logger.warning("settings file %s changed %s: takes effect after a restart", self.path, ", ".join(later))
            self.settings = self.settings.model_copy(update={"actions": loaded.actions})
        return self.settings
