"""The rehearsal-speed benchmark builds its small clusters from the trace's commonest GPU node and
sees only the pods that node's GPU model can run."""

from __future__ import annotations

import pytest
from bench.packing_rehearsal import copies_of_commonest_node, rehearsal_speed

from gpuwise.decide.packing.cluster import Nodes, Pods


def trace_nodes() -> Nodes:
    return Nodes.build(
        names=["cpu-a", "cpu-b", "cpu-c", "t4-a", "t4-b", "v100"],
        cpu_milli=[64000, 64000, 64000, 32000, 32000, 96000],
        memory_mib=[1 << 18] * 6,
        gpus=[0, 0, 0, 2, 2, 8],
        models=["", "", "", "T4", "T4", "V100"],
    )


def test_the_cluster_is_copies_of_the_commonest_gpu_node_never_a_cpu_only_one() -> None:
    nodes = trace_nodes()
    cluster = copies_of_commonest_node(nodes, 5)
    assert len(cluster) == 5 and len(set(cluster.names)) == 5
    assert cluster.gpus.tolist() == [2] * 5 and cluster.cpu_milli.tolist() == [32000] * 5
    assert {cluster.models[model] for model in cluster.model} == {"T4"}


def test_pods_the_node_cannot_run_are_left_out_and_sizes_below_one_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    nodes = trace_nodes()
    pods = Pods.build(
        names=["anywhere", "t4-only", "v100-only", "cpu-only"],
        cpu_milli=[1000, 1000, 1000, 1000],
        memory_mib=[1, 1, 1, 1],
        num_gpu=[1, 1, 1, 0],
        gpu_milli=[500, 1000, 1000, 0],
        gpu_models=[[], ["T4"], ["V100"], []],
        models=nodes.models,
    )
    with pytest.raises(SystemExit, match="1 node or more"):
        rehearsal_speed(nodes, pods, [2, 0])
    assert rehearsal_speed(nodes, pods, [1]) == 0
    out = capsys.readouterr().out
    assert "2 x T4 GPUs, 32 CPUs; 3 of 4 pods accept it" in out
    assert out.splitlines()[-1].split()[0] == "1"
