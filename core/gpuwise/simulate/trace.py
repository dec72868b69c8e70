"""Read a cluster trace in the Alibaba GPU trace format (clusterdata, cluster-trace-gpu-v2023).

The trace of Weng et al., USENIX ATC'23 ("Beware of Fragmentation"), published by Alibaba under
CC BY 4.0: a node list (``sn, cpu_milli, memory_mib, gpu, model``) and pod lists (``name,
cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec]``; other columns are ignored). A file that
does not have what the simulator needs is rejected with a message that names the file, the line
and what to fix.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from gpuwise.decide.packing.cluster import MILLI, Nodes, Pods

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
GPU_SPEC_COLUMN = "gpu_spec"
"""Optional: ``|``-separated GPU models a pod accepts; empty or absent means any model."""

SOURCE = (
    "Alibaba clusterdata cluster-trace-gpu-v2023 (CC BY 4.0); Weng et al., "
    '"Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient '
    'Descent", USENIX ATC 2023'
)


class TraceError(ValueError):
    """The trace file cannot be used as it is; the message says what to fix."""


def load_nodes(path: Path) -> Nodes:
    rows = list(_rows(path, NODE_COLUMNS))
    if not rows:
        raise TraceError(f"{path}: no nodes (the file has a header but no rows)")
    for line, row in rows:
        if not row["model"].strip() and _integer(path, line, row, "gpu") > 0:
            raise TraceError(f"{path}:{line}: node {row['sn']!r} has GPUs but an empty 'model'")
    return Nodes.build(
        names=[row["sn"] for _, row in rows],
        cpu_milli=[_integer(path, line, row, "cpu_milli") for line, row in rows],
        memory_mib=[_integer(path, line, row, "memory_mib") for line, row in rows],
        gpus=[_integer(path, line, row, "gpu") for line, row in rows],
        models=[row["model"].strip() for _, row in rows],
    )


def load_pods(path: Path, nodes: Nodes) -> Pods:
    """Pods of ``path``; GPU models in ``gpu_spec`` must be models some node of ``nodes`` has."""
    rows = list(_rows(path, POD_COLUMNS))
    if not rows:
        raise TraceError(f"{path}: no pods (the file has a header but no rows)")
    specs: dict[str, int] = {}
    columns: dict[str, list[int]] = {name: [] for name in (*POD_COLUMNS[1:], "spec")}
    for line, row in rows:
        num_gpu = _integer(path, line, row, "num_gpu")
        gpu_milli = _integer(path, line, row, "gpu_milli") if num_gpu else 0
        if num_gpu and not 0 < gpu_milli <= MILLI:
            raise TraceError(f"{path}:{line}: pod {row['name']!r} asks for gpu_milli={gpu_milli}; use 1..{MILLI}")
        if num_gpu > 1 and gpu_milli != MILLI:
            raise TraceError(
                f"{path}:{line}: pod {row['name']!r} shares GPUs across {num_gpu} GPUs "
                f"(gpu_milli={gpu_milli}); multi-GPU pods must use whole GPUs (gpu_milli={MILLI})"
            )
        spec = _spec(path, line, row, nodes.models)
        columns["cpu_milli"].append(_integer(path, line, row, "cpu_milli"))
        columns["memory_mib"].append(_integer(path, line, row, "memory_mib"))
        columns["num_gpu"].append(num_gpu)
        columns["gpu_milli"].append(gpu_milli)
        columns["spec"].append(specs.setdefault(spec, len(specs)))
    allowed = np.array([_allowed(spec, nodes.models) for spec in specs], dtype=np.bool_)
    arrays = {name: np.asarray(values, dtype=np.int64) for name, values in columns.items()}
    return Pods(
        names=tuple(row["name"] for _, row in rows),
        cpu_milli=arrays["cpu_milli"],
        memory_mib=arrays["memory_mib"],
        num_gpu=arrays["num_gpu"],
        gpu_milli=arrays["gpu_milli"],
        spec=arrays["spec"],
        allowed=allowed,
    )


def _rows(path: Path, required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace file ({exc.strerror})") from exc
    with handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        missing = [column for column in required if column not in header]
        if missing:
            raise TraceError(
                f"{path}: missing column(s) {', '.join(missing)}; "
                f"the file needs {', '.join(required)} (found: {', '.join(header) or 'no header'})"
            )
        for row in reader:
            yield reader.line_num, row


def _integer(path: Path, line: int, row: dict[str, str], column: str) -> int:
    text = (row.get(column) or "").strip()
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise TraceError(f"{path}:{line}: column {column!r} must be a non-negative integer, got {text!r}")
    return value


def _spec(path: Path, line: int, row: dict[str, str], models: Sequence[str]) -> str:
    wanted = [model for model in (row.get(GPU_SPEC_COLUMN) or "").split("|") if model.strip()]
    unknown = sorted({model for model in wanted if model not in models})
    if unknown:
        raise TraceError(
            f"{path}:{line}: pod {row['name']!r} asks for GPU model(s) {', '.join(unknown)} that no node has; "
            f"known models: {', '.join(sorted(models))}"
        )
    return "|".join(sorted(set(wanted)))


def _allowed(spec: str, models: Sequence[str]) -> list[bool]:
    wanted = set(spec.split("|")) if spec else set(models)
    return [model in wanted for model in models]
