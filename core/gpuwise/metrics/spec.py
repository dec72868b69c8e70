"""What a metric is, as data: name, type, unit, help and the labels its series carry.

The catalog is read by code that must stay light (the sidecar next to every training pod) and by
code that generates other artefacts from it (operator PromQL, alert rules, Grafana dashboards).
So a metric is a frozen record built from the standard library alone, and the label sets are
named once here rather than spelled out in every consumer.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final


class Kind(enum.StrEnum):
    """The Prometheus metric type, as written on the `# TYPE` line."""

    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


class Scope(enum.StrEnum):
    """What one series stands for; it decides the labels the series carries."""

    DEVICE = "device"  # a GPU or a MIG instance, labelled the way dcgm-exporter labels it
    GPU = "gpu"  # a GPU or MIG instance, for gpuwise's own per-device series (fewer labels)
    PROCESS = "process"  # one training process (one rank) reporting steps
    SIDECAR = "sidecar"  # the exporter itself
    TRAININGJOB = "trainingjob"  # one TrainingJob as a whole, published by the operator


# dcgm-exporter's device labels, spelled as it spells them (dashboards and alerts match on them).
DEVICE_LABELS: Final = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
# Present only on series of a MIG instance: the GPU instance's profile name and id.
MIG_LABELS: Final = ("GPU_I_PROFILE", "GPU_I_ID")
# Which pod and container the GPU works for; dcgm-exporter adds the same three when it maps pods
# to devices (`container` only where the sidecar knows the one container using the GPUs).
POD_LABELS: Final = ("pod", "namespace", "container")
# Which training job and worker a gpuwise series belongs to.
JOB_LABELS: Final = ("namespace", "pod", "trainingjob", "worker")
# A whole TrainingJob: the operator's per-job series (findings, recommendations, summary).
TRAININGJOB_LABELS: Final = ("namespace", "trainingjob")
# The short device identity on gpuwise's own per-device series.
GPU_LABELS: Final = ("gpu", "UUID", "GPU_I_ID")
# Every series whose values a simulated backend produced carries simulated="true".
SIMULATED_LABEL: Final = "simulated"
# A training process is one rank of the worker (torchrun's LOCAL_RANK).
RANK_LABEL: Final = "local_rank"

# Keep series under this many labels: the storage and query cost of a series grows with them.
MAX_LABELS: Final = 12

_SCOPE_LABELS: Final[dict[Scope, tuple[str, ...]]] = {
    Scope.DEVICE: (*DEVICE_LABELS, *MIG_LABELS, *POD_LABELS, SIMULATED_LABEL),
    Scope.GPU: (*GPU_LABELS, *JOB_LABELS, SIMULATED_LABEL),
    Scope.PROCESS: (*JOB_LABELS, RANK_LABEL),
    Scope.SIDECAR: JOB_LABELS,
    Scope.TRAININGJOB: TRAININGJOB_LABELS,
}


def scope_labels(scope: Scope) -> tuple[str, ...]:
    """The labels every series of this scope may carry (a metric may add its extra labels)."""
    return _SCOPE_LABELS[scope]


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric family.

    `name` is the exact series name as exposed (DCGM counters carry no `_total`, as in
    dcgm-exporter); `unit` is for people and generators, it is never appended to the name.
    `labels` is the most a series may carry: labels without a value are left out of a series.
    """

    name: str
    kind: Kind
    unit: str
    help: str
    scope: Scope
    extra_labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()

    @property
    def labels(self) -> tuple[str, ...]:
        return scope_labels(self.scope) + self.extra_labels

    @property
    def dcgm(self) -> bool:
        """Whether this mirrors a dcgm-exporter metric (name, unit and labels as NVIDIA's)."""
        return self.name.startswith("DCGM_")
