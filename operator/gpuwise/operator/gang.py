"""Gang scheduling: what each gang scheduler needs to place all of a job's workers at once or none.

Each of them groups pods through a PodGroup with a minimum member count, and finds a pod's group
its own way. gpuwise creates the PodGroup itself (named after the TrainingJob, owned by it, with
`minMember = numNodes`) before the Job, and ties the pod template to it. The contracts followed,
from each project's documentation:

- Volcano (v1.9+): PodGroup `scheduling.volcano.sh/v1beta1` (`spec.minMember`, `spec.queue`); pods
  annotated `scheduling.k8s.io/group-name: <group>`, scheduler `volcano`.
- scheduler-plugins' coscheduling (v0.28+): PodGroup `scheduling.x-k8s.io/v1alpha1`
  (`spec.minMember`); pods labelled `scheduling.x-k8s.io/pod-group: <group>`, scheduler as the
  deployment names it (`scheduler-plugins-scheduler` by default).
- KAI Scheduler (v0.15+, the first to take a PodGroup made by someone else): its podgrouper groups a
  plain batch Job with `minMember: 1` (its pods scheduled independently), so gpuwise makes the
  PodGroup `scheduling.run.ai/v2alpha2` (`spec.minMember`, `spec.queue`) and annotates the pods
  `pod-group-name: <group>` and `kai.scheduler/skip-podgrouper: "true"`; they also carry the queue
  label `kai.scheduler/queue`, and scheduler `kai-scheduler`.
"""

from __future__ import annotations

from typing import Any, Final

from gpuwise.api.trainingjob import Gang, GangScheduler, TrainingJobSpec

JsonDict = dict[str, Any]

KIND: Final = "PodGroup"
API_VERSIONS: Final = {
    GangScheduler.VOLCANO: "scheduling.volcano.sh/v1beta1",
    GangScheduler.COSCHEDULING: "scheduling.x-k8s.io/v1alpha1",
    GangScheduler.KAI: "scheduling.run.ai/v2alpha2",
}
VOLCANO_GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
COSCHEDULING_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
KAI_GROUP_ANNOTATION: Final = "pod-group-name"
KAI_SKIP_PODGROUPER_ANNOTATION: Final = "kai.scheduler/skip-podgrouper"
KAI_QUEUE_LABEL: Final = "kai.scheduler/queue"


def group_spec(spec: TrainingJobSpec) -> JsonDict:
    """The PodGroup's spec: every worker or none, in the gang's queue, at the pods' priority."""
    gang = spec.pod.gang
    assert gang is not None
    group: JsonDict = {"minMember": spec.trainer.num_nodes}
    if gang.scheduler is not GangScheduler.COSCHEDULING:  # its PodGroup has neither field
        if gang.queue is not None:
            group["queue"] = gang.queue
        if spec.pod.priority_class_name is not None:
            group["priorityClassName"] = spec.pod.priority_class_name
    return group


def pod_labels(group: str, gang: Gang | None) -> dict[str, str]:
    """Labels that put a worker pod in `group`."""
    if gang is None:
        return {}
    if gang.scheduler is GangScheduler.COSCHEDULING:
        return {COSCHEDULING_GROUP_LABEL: group}
    if gang.scheduler is GangScheduler.KAI and gang.queue is not None:
        return {KAI_QUEUE_LABEL: gang.queue}
    return {}


def pod_annotations(group: str, gang: Gang | None) -> dict[str, str]:
    """Annotations that put a worker pod in `group`."""
    if gang is None:
        return {}
    if gang.scheduler is GangScheduler.VOLCANO:
        return {VOLCANO_GROUP_ANNOTATION: group}
    if gang.scheduler is GangScheduler.KAI:
        return {KAI_GROUP_ANNOTATION: group, KAI_SKIP_PODGROUPER_ANNOTATION: "true"}
    return {}
