"""A TrainingJob object as the API server delivers it: its spec checked, and what its Job follows.

The reconciler, the evaluation and the action runner all read TrainingJobs as plain dicts from
watches and lists; each needs the validated spec (or the problem that names the bad field), to
post Events about the object, and to keep the running Job's mutable fields in line with the spec
and with what an action holds. One place for each, below the reconciler and the runner alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

import kopf
from pydantic import ValidationError

from gpuwise.api.overrides import JobOverrides
from gpuwise.api.trainingjob import TrainingJobSpec
from gpuwise.kube import job_overrides, queues
from gpuwise.kube.client import Kube

JsonDict = dict[str, Any]

# Job and pod names are "<name>-<index>-<suffix>" and must stay DNS labels (63 characters).
MAX_NAME_LENGTH: Final = 52
NAME_PATTERN: Final = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


@dataclass(frozen=True)
class SpecProblem:
    """Why the current spec is not what runs: a reason and a message naming the field."""

    # InvalidSpec | ImmutableFieldChanged | OwnershipConflict | JobRejected | SpecTooLarge | PodSecurityViolation
    # | PodGroupRejected
    reason: str
    message: str


# --- checking the spec ----------------------------------------------------------------------


def _describe(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        path = ".".join(str(part) for part in ("spec", *err["loc"]))
        problems.append(f"{path}: {err['msg']}")
    return "; ".join(problems)


SpecResult = tuple[TrainingJobSpec | None, SpecProblem | None]


def parse_spec(body: Mapping[str, Any]) -> SpecResult:
    """The validated spec, or the problem that names the field and what is wrong with it."""
    spec, problem = _validated(body.get("metadata", {}).get("name", ""), body.get("spec") or {})
    if spec is not None and (refused := queues.suspend_refusal(body, spec.run_policy.suspend)) is not None:
        return None, SpecProblem("InvalidSpec", refused)
    return spec, problem


def _validated(name: str, raw: Any) -> SpecResult:
    if len(name) > MAX_NAME_LENGTH or not re.match(NAME_PATTERN, name):
        message = (
            f"metadata.name {name!r} must be a DNS label of at most {MAX_NAME_LENGTH} characters "
            "(lower-case letters, digits and '-', starting with a letter): pods are named after it"
        )
        return None, SpecProblem("InvalidSpec", message)
    try:
        return TrainingJobSpec.model_validate(raw), None
    except ValidationError as exc:
        return None, SpecProblem("InvalidSpec", _describe(exc))


def as_body(raw: JsonDict) -> kopf.Body:
    """kopf's view of a plain object, for posting Events about it."""
    return kopf.Body(cast(kopf.RawBody, raw))


def mutable_job_fields(
    spec: TrainingJobSpec, overrides: JobOverrides = job_overrides.NONE, *, queued: bool = False
) -> JsonDict:
    """The parts of a running Job's spec that follow the TrainingJob after creation.

    A `queued` Job's suspend is Kueue's alone (gpuwise.kube.queues): it is not among them.
    """
    run = spec.run_policy
    fields: JsonDict = {"activeDeadlineSeconds": run.active_deadline_seconds}
    if not queued:
        fields["suspend"] = run.suspend or overrides.suspend
    return fields


async def follow_mutable_fields(job: JsonDict, spec: TrainingJobSpec, overrides: JobOverrides, kube: Kube) -> None:
    """Suspend and deadline follow the spec (and an action holding the job) without a new Job;
    a Job in a Kueue queue keeps the suspend Kueue gave it."""
    if job["metadata"].get("deletionTimestamp"):
        return  # an action is replacing it
    wanted = mutable_job_fields(spec, overrides, queued=queues.queue_of(job) is not None)
    current = {key: job.get("spec", {}).get(key) for key in wanted}
    if current != wanted:
        meta = job["metadata"]
        await kube.patch("batch/v1", "Job", meta["namespace"], meta["name"], {"spec": wanted})
