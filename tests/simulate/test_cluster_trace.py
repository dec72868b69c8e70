"""The trace loader accepts the Alibaba format and rejects what it cannot use, saying what to fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuwise.decide.packing.cluster import MILLI
from gpuwise.simulate.arrivals import arrival_order
from gpuwise.simulate.cluster_trace import TraceError, load_nodes, load_pods

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,96000,393216,8,V100\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
    "p0,4000,8192,1,500,,LS\n"
    "p1,8000,16384,2,1000,V100,BE\n"
    "p2,1000,1024,0,0,,LS\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_loads_nodes_and_pods(tmp_path: Path) -> None:
    nodes = load_nodes(write(tmp_path, "nodes.csv", NODES))
    pods = load_pods(write(tmp_path, "pods.csv", PODS), nodes)
    assert nodes.models == ("T4", "V100")
    assert nodes.gpu_capacity_milli == 10 * MILLI
    assert pods.total_gpu_milli.tolist() == [500, 2000, 0]
    assert pods.request(0).allowed_models.tolist() == [True, True]
    assert pods.request(1).allowed_models.tolist() == [False, True]
    assert pods.request(0).shares_gpu and not pods.request(1).shares_gpu


def test_gpu_spec_column_is_optional(tmp_path: Path) -> None:
    nodes = load_nodes(write(tmp_path, "nodes.csv", NODES))
    pods = load_pods(write(tmp_path, "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,300\n"), nodes)
    assert pods.request(0).allowed_models.all()


def test_missing_column_names_the_column_and_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.csv", "name,cpu_milli,memory_mib,num_gpu\np,1,1,1\n")
    nodes = load_nodes(write(tmp_path, "nodes.csv", NODES))
    with pytest.raises(TraceError, match=r"pods\.csv: missing column\(s\) gpu_milli; the file needs"):
        load_pods(path, nodes)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("p,abc,1,1,500", r"pods\.csv:2: column 'cpu_milli' must be a non-negative integer, got 'abc'"),
        ("p,1,1,1,1500", r"gpu_milli=1500; use 1\.\.1000"),
        ("p,1,1,2,500", "multi-GPU pods must use whole GPUs"),
        ("p,1,1,1,500,A100", r"GPU model\(s\) A100 that no node has; known models: T4, V100"),
    ],
)
def test_bad_rows_say_what_to_fix(tmp_path: Path, row: str, message: str) -> None:
    nodes = load_nodes(write(tmp_path, "nodes.csv", NODES))
    path = write(tmp_path, "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + row + "\n")
    with pytest.raises(TraceError, match=message):
        load_pods(path, nodes)


def test_unreadable_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read the trace file"):
        load_nodes(tmp_path / "absent.csv")


def test_arrivals_reach_but_do_not_pass_the_target(tmp_path: Path) -> None:
    nodes = load_nodes(write(tmp_path, "nodes.csv", NODES))
    pods = load_pods(write(tmp_path, "pods.csv", PODS), nodes)
    order = arrival_order(pods, nodes.gpu_capacity_milli, np.random.default_rng(1), ratio=1.3)
    arrived = pods.total_gpu_milli[order].sum()
    assert sorted(order[:3].tolist()) == [0, 1, 2]  # the trace first, shuffled
    assert arrived <= 1.3 * nodes.gpu_capacity_milli < arrived + 2000


def test_arrivals_drop_random_pods_when_the_trace_asks_for_more(tmp_path: Path) -> None:
    nodes = load_nodes(write(tmp_path, "nodes.csv", NODES))
    pods = load_pods(write(tmp_path, "pods.csv", PODS), nodes)
    order = arrival_order(pods, nodes.gpu_capacity_milli, np.random.default_rng(3), ratio=0.1)
    assert pods.total_gpu_milli[order].sum() <= 0.1 * nodes.gpu_capacity_milli
    assert len(set(order.tolist())) == len(order)
