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
    columns: dict[str, list[int]] = {name: [] for name in POD_COLUMNS[1:]}
    accepted: list[list[str]] = []
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
        columns["cpu_milli"].append(_integer(path, line, row, "cpu_milli"))
        columns["memory_mib"].append(_integer(path, line, row, "memory_mib"))
        columns["num_gpu"].append(num_gpu)
        columns["gpu_milli"].append(gpu_milli)
        accepted.append(_accepted_models(path, line, row, nodes.models))
    return Pods.build(
        names=[row["name"] for _, row in rows],
        cpu_milli=columns["cpu_milli"],
        memory_mib=columns["memory_mib"],
        num_gpu=columns["num_gpu"],
        gpu_milli=columns["gpu_milli"],
        gpu_models=accepted,
        models=nodes.models,
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


def _accepted_models(path: Path, line: int, row: dict[str, str], models: Sequence[str]) -> list[str]:
    wanted = [model.strip() for model in (row.get(GPU_SPEC_COLUMN) or "").split("|") if model.strip()]
    unknown = sorted({model for model in wanted if model not in models})
    if unknown:
        raise TraceError(
            f"{path}:{line}: pod {row['name']!r} asks for GPU model(s) {', '.join(unknown)} that no node has; "
            f"known models: {', '.join(sorted(models))}"
        )
    return wanted
