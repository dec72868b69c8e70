"""Kueue's contract for `batch/v1` Jobs, as gpuwise keeps it (Kueue v0.9/v0.10 documentation).

A Job labelled `kueue.x-k8s.io/queue-name` is Kueue's to start: it is created suspended, Kueue
unsuspends it when its Workload is admitted (adding the flavor's nodeSelectors to the pod template
as it does), and suspends it again on preemption. So a TrainingJob with that label renders a Job
that carries it and starts suspended, and from then on gpuwise never writes that Job's `suspend`:
not to start it (that would go around the queue), and not to stop it (Kueue would start it again
while its Workload stays admitted). A restart by an action deletes the Job and renders a new one,
suspended with the label again, so it goes back through the queue.

Which Job is queued is read from the Job's own labels, not the TrainingJob's: the Job keeps the
label it was created with, and Kueue's webhook refuses to change it while the Job runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL: Final = "kueue.x-k8s.io/priority-class"
# The TrainingJob's labels that its Job carries for Kueue.
PASSED_LABELS: Final = (QUEUE_LABEL, PRIORITY_CLASS_LABEL)


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return labels


def job_labels(trainingjob: Mapping[str, Any]) -> dict[str, str]:
    """The Kueue labels of the TrainingJob, for its Job (none: Kueue leaves the Job alone)."""
    labels = _labels(trainingjob)
    return {key: labels[key] for key in PASSED_LABELS if labels.get(key)}


def queue_of(obj: Mapping[str, Any]) -> str | None:
    """The Kueue LocalQueue a TrainingJob asks for, or a Job was created in; None: not queued."""
    return _labels(obj).get(QUEUE_LABEL) or None


def suspend_refusal(trainingjob: Mapping[str, Any], suspend: bool) -> str | None:
    """Why a queued TrainingJob cannot ask for `spec.runPolicy.suspend` (None: it does not, or is not queued).

    Kueue would admit and start the Job whatever gpuwise wrote; saying so beats a setting that
    silently does nothing.
    """
    queue = queue_of(trainingjob)
    if not suspend or queue is None:
        return None
    return (
        f"spec.runPolicy.suspend: Kueue decides when a TrainingJob in a queue runs (label {QUEUE_LABEL}: "
        f"{queue}), so gpuwise leaves the Job's suspend to it; to hold the job, set the spec.active of its Kueue "
        "Workload to false instead"
    )
