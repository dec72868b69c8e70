"""Read, write and render `JobOverrides`: what gpuwise changed, kept beside the user's spec.

The TrainingJob's annotation `gpuwise.io/overrides` says what the job *should* run with; the Job's
annotation `gpuwise.io/applied-overrides` says what it *was rendered* with. The two differ only
while an action restarts the job, which is how the reconciler and the action runner tell a
pending restart from drift, and how a restarted operator knows whether the new Job exists yet.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from gpuwise import wiring
from gpuwise.api.overrides import JobOverrides

JsonDict = dict[str, Any]
ANNOTATION_OVERRIDES: Final = f"{wiring.API_GROUP}/overrides"
ANNOTATION_APPLIED_OVERRIDES: Final = f"{wiring.API_GROUP}/applied-overrides"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
NONE: Final = JobOverrides()


class OverridesError(ValueError):
    """The overrides annotation cannot be read; the message says what to fix."""


def encode(overrides: JobOverrides) -> str:
    """Compact, canonical JSON (defaults left out), so equal overrides are equal strings."""
    dumped = overrides.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return json.dumps(dumped, sort_keys=True, separators=(",", ":"))


def decode(text: str | None, where: str) -> JobOverrides:
    if not text:
        return NONE
    try:
        return JobOverrides.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors())
        raise OverridesError(
            f"{where} is not valid: {problems}. Fix or remove the annotation; gpuwise rewrites it on its next action."
        ) from exc


def _annotation(obj: Mapping[str, Any], key: str) -> str | None:
    value: str | None = (obj.get("metadata", {}).get("annotations") or {}).get(key)
    return value


def wanted(trainingjob: Mapping[str, Any]) -> JobOverrides:
    """What the TrainingJob should run with now (its annotation; none when absent)."""
    return decode(_annotation(trainingjob, ANNOTATION_OVERRIDES), f"annotation {ANNOTATION_OVERRIDES}")


def applied(job: Mapping[str, Any]) -> JobOverrides:
    """What a Job was rendered with; a Job from before overrides existed was rendered with none."""
    try:
        return decode(_annotation(job, ANNOTATION_APPLIED_OVERRIDES), f"Job annotation {ANNOTATION_APPLIED_OVERRIDES}")
    except OverridesError:
        return NONE  # only gpuwise writes it; an unreadable one is replaced with the next Job


def annotation_patch(overrides: JobOverrides) -> JsonDict:
    """A merge patch for the TrainingJob that records `overrides` (removing the annotation for none)."""
    value = encode(overrides) if overrides != NONE else None
    return {"metadata": {"annotations": {ANNOTATION_OVERRIDES: value}}}


# --- rendering ------------------------------------------------------------------------------


def _set_env(container: JsonDict, env: Mapping[str, str]) -> None:
    if not env:
        return
    kept = [e for e in container.get("env") or [] if e.get("name") not in env]
    container["env"] = kept + [{"name": name, "value": value} for name, value in sorted(env.items())]


def _set_resources(container: JsonDict, overrides: JobOverrides) -> None:
    if not overrides.resources and not overrides.remove_resources:
        return
    resources = container.setdefault("resources", {})
    for side in ("requests", "limits"):
        amounts = {k: v for k, v in (resources.get(side) or {}).items() if k not in overrides.remove_resources}
        # Extended resources (GPUs, MIG slices) must have equal requests and limits.
        amounts.update(overrides.resources)
        resources[side] = amounts


def _avoid_nodes(pod: JsonDict, nodes: list[str]) -> None:
    """Require nodes other than `nodes`: added to every required term (terms are ORed)."""
    if not nodes:
        return
    avoid = {"key": HOSTNAME_LABEL, "operator": "NotIn", "values": sorted(nodes)}
    node_affinity = pod.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term["matchExpressions"] = [*term.get("matchExpressions", []), avoid]
    required["nodeSelectorTerms"] = terms


def _prefer_nodes(pod: JsonDict, nodes: list[str]) -> None:
    """Prefer `nodes` (the strongest preference): the scheduler still may go elsewhere if they fail."""
    if not nodes:
        return
    prefer = {"key": HOSTNAME_LABEL, "operator": "In", "values": sorted(nodes)}
    node_affinity = pod.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    preferred = node_affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", [])
    preferred.append({"weight": 100, "preference": {"matchExpressions": [prefer]}})


def node_selector(selector: Mapping[str, str] | None, overrides: JobOverrides) -> dict[str, str]:
    """The nodeSelector a pod runs with: its own ``selector``, the overrides' labels on top."""
    return {**(selector or {}), **overrides.node_selector}


def render(pod_spec: JsonDict, container_name: str, overrides: JobOverrides) -> JsonDict:
    """The pod spec with the overrides applied to it and to its `container_name` container."""
    if overrides.placement() == NONE:
        return pod_spec
    pod = copy.deepcopy(pod_spec)
    for container in pod.get("containers") or []:
        if container.get("name") == container_name:
            _set_env(container, overrides.env)
            if overrides.resume_from is not None:
                _set_env(container, {wiring.ENV_RESUME_FROM: overrides.resume_from})
            _set_resources(container, overrides)
    if overrides.node_selector:
        pod["nodeSelector"] = node_selector(pod.get("nodeSelector"), overrides)
    _avoid_nodes(pod, list(overrides.avoid_nodes))
    _prefer_nodes(pod, list(overrides.prefer_nodes))
    return pod
