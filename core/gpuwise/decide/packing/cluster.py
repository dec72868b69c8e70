"""The cluster and the pods as the packing planners see them: plain numpy arrays.

A planner scores every node for every pod, so the representation is a struct of arrays (one
entry per node) rather than a list of node objects: scoring 1,213 nodes is then a handful of
vector operations instead of 1,213 Python calls.

Units follow the Alibaba GPU trace and the Kubernetes GPU-sharing device plugins: CPU in
milli-cores, memory in MiB, GPU in milli-GPUs (1000 = one whole GPU).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MILLI = 1000
"""One whole GPU in milli-GPUs."""

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Nodes:
    """The static shape of a cluster: what each node has when nothing runs on it."""

    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    gpus: IntArray
    model: IntArray
    """Index into :attr:`models` of each node's GPU model."""
    models: tuple[str, ...]

    def __post_init__(self) -> None:
        sizes = {len(self.names), *(len(a) for a in (self.cpu_milli, self.memory_mib, self.gpus, self.model))}
        if len(sizes) != 1:
            raise ValueError(f"node arrays differ in length: {sorted(sizes)}")

    @classmethod
    def build(
        cls,
        *,
        names: Sequence[str],
        cpu_milli: Sequence[int],
        memory_mib: Sequence[int],
        gpus: Sequence[int],
        models: Sequence[str],
    ) -> Nodes:
        """Nodes from per-node columns; GPU model names are interned into indices."""
        model_names = tuple(dict.fromkeys(models))
        index = {name: i for i, name in enumerate(model_names)}
        return cls(
            names=tuple(names),
            cpu_milli=np.asarray(cpu_milli, dtype=np.int64),
            memory_mib=np.asarray(memory_mib, dtype=np.int64),
            gpus=np.asarray(gpus, dtype=np.int64),
            model=np.asarray([index[m] for m in models], dtype=np.int64),
            models=model_names,
        )

    def __len__(self) -> int:
        return len(self.names)

    @property
    def max_gpus(self) -> int:
        return int(self.gpus.max(initial=0))

    @property
    def gpu_capacity_milli(self) -> int:
        return int(self.gpus.sum()) * MILLI


@dataclass(frozen=True)
class Pods:
    """A list of pod requests, one entry per pod.

    ``gpu_milli`` is per GPU: a sharing pod asks for ``gpu_milli < 1000`` of one GPU, a pod with
    ``num_gpu >= 1`` and ``gpu_milli == 1000`` asks for that many whole GPUs, and a CPU-only pod
    has ``num_gpu == 0`` and ``gpu_milli == 0``. ``spec`` indexes :attr:`allowed`, a
    ``(specs, models)`` table of the GPU models each distinct ``gpu_spec`` accepts.
    """

    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    num_gpu: IntArray
    gpu_milli: IntArray
    spec: IntArray
    allowed: BoolArray

    @classmethod
    def build(
        cls,
        *,
        names: Sequence[str],
        cpu_milli: Sequence[int],
        memory_mib: Sequence[int],
        num_gpu: Sequence[int],
        gpu_milli: Sequence[int],
        gpu_models: Sequence[Collection[str]],
        models: Sequence[str],
    ) -> Pods:
        """Pods from per-pod columns. ``gpu_models`` lists the models each pod accepts (empty:
        any); ``models`` are the cluster's models, in :attr:`Nodes.models` order."""
        specs: dict[frozenset[str], int] = {}
        spec = []
        for accepted in gpu_models:
            unknown = sorted(set(accepted) - set(models))
            if unknown:
                raise ValueError(f"GPU model(s) {', '.join(unknown)} not in the cluster ({', '.join(models)})")
            spec.append(specs.setdefault(frozenset(accepted), len(specs)))
        allowed = np.array([[not accepted or m in accepted for m in models] for accepted in specs], dtype=np.bool_)
        return cls(
            names=tuple(names),
            cpu_milli=np.asarray(cpu_milli, dtype=np.int64),
            memory_mib=np.asarray(memory_mib, dtype=np.int64),
            num_gpu=np.asarray(num_gpu, dtype=np.int64),
            gpu_milli=np.asarray(gpu_milli, dtype=np.int64),
            spec=np.asarray(spec, dtype=np.int64),
            allowed=allowed.reshape(len(specs), len(models)),
        )

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpu_milli(self) -> IntArray:
        """GPU milli each pod asks for in all (``num_gpu * gpu_milli``)."""
        return self.num_gpu * self.gpu_milli

    def take(self, rows: IntArray) -> Pods:
        """The pods at ``rows``, in that order; a pod taken twice gets a second, distinct name."""
        seen: dict[int, int] = {}
        names = []
        for row in rows.tolist():
            copy = seen[row] = seen.get(row, -1) + 1
            names.append(self.names[row] if not copy else f"{self.names[row]}~{copy}")
        return Pods(
            names=tuple(names),
            cpu_milli=self.cpu_milli[rows],
            memory_mib=self.memory_mib[rows],
            num_gpu=self.num_gpu[rows],
            gpu_milli=self.gpu_milli[rows],
            spec=self.spec[rows],
            allowed=self.allowed,
        )

    def request(self, index: int) -> PodRequest:
        return PodRequest(
            cpu_milli=int(self.cpu_milli[index]),
            memory_mib=int(self.memory_mib[index]),
            num_gpu=int(self.num_gpu[index]),
            gpu_milli=int(self.gpu_milli[index]),
            allowed_models=self.allowed[self.spec[index]],
        )


@dataclass(frozen=True)
class PodRequest:
    """One pod's request, the unit every planner decides about."""

    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    allowed_models: BoolArray
    """Which GPU models (indices into :attr:`Nodes.models`) this pod accepts."""

    @property
    def shares_gpu(self) -> bool:
        """A fraction of one GPU, placed on a specific GPU next to other sharing pods."""
        return self.num_gpu == 1 and 0 < self.gpu_milli < MILLI

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli


@dataclass(frozen=True)
class Placement:
    """Where a pod runs: a node and the GPU indices on it (empty for CPU-only pods)."""

    node: int
    gpus: tuple[int, ...]
