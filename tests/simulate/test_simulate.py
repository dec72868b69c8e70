"""``gpuwise simulate packing`` end to end: the CLI, the curve reading, and the real trace."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuwise import cli
from gpuwise.simulate.cluster_trace import load_nodes, load_pods
from gpuwise.simulate.experiment import PolicyResult, SeedResult, paired_wins, run_seed
from gpuwise.simulate.replay import Curve
from gpuwise.simulate.report import table
from gpuwise.simulate.simulate_command import main

REPO = Path(__file__).resolve().parents[2]
OPENB = REPO.parent / "shared" / "data" / "openb"
NODES_CSV = OPENB / "openb_node_list_gpu_node.csv"
needs_trace = pytest.mark.skipif(
    not NODES_CSV.exists(), reason=f"the Alibaba openb trace is not at {OPENB} (see shared/data/README.md)"
)


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        "a,32000,131072,4,T4\nb,16000,65536,2,T4\nc,64000,262144,8,V100\nd,8000,32768,1,V100\n"
    )
    shapes = ["4000,8192,1,500", "8000,16384,1,1000", "2000,4096,1,250", "16000,65536,4,1000", "6000,8192,0,0"]
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(f"p{i},{shapes[i % 5]}\n" for i in range(30))
    )
    return nodes, pods


DOCUMENTED = {
    "policy": str,
    "seeds": int,
    "alloc_at_100": float,
    "alloc_at_130": float,
    "frag_at_100": float,
    "migrations": float,
    "seconds": float,
}
"""The keys of the issue's JSON and their types; the rest of an object is extra."""
PER_SEED = ("alloc_at_100", "alloc_at_130", "frag_at_100", "migrations", "seconds")


def packing_json(capsys: pytest.CaptureFixture[str], nodes: Path, pods: Path, *options: str) -> Any:
    assert main(["packing", "--nodes", str(nodes), "--pods", str(pods), *options, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def assert_documented(result: dict[str, Any], policy: str, seeds: list[int]) -> None:
    """The documented keys have their types, and each is the mean of the seeds' own figures."""
    for key, kind in DOCUMENTED.items():
        assert type(result[key]) is kind, f"{key}: {result[key]!r}"
    assert result["policy"] == policy and result["seeds"] == len(seeds)
    assert [seed["seed"] for seed in result["per_seed"]] == seeds
    for key in PER_SEED:
        values = [seed[key] for seed in result["per_seed"]]
        assert result[key] == pytest.approx(statistics.fmean(values), abs=0.051), key
    for key in ("alloc_at_100", "alloc_at_130"):
        values = [seed[key] for seed in result["per_seed"]]
        assert result[f"{key}_stdev"] == pytest.approx(statistics.stdev(values), abs=1e-3)
        assert all(0 <= value <= 100 for value in values)
    assert all(type(seed["migrations"]) is int and seed["seconds"] >= 0 for seed in result["per_seed"])
    if not result["repack"]:
        assert result["migrations"] == 0.0 and result["max_migrations"] == 0


def test_json_for_one_policy_is_one_object_whose_figures_are_the_seeds_means(
    trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = trace
    result = packing_json(capsys, nodes, pods, "--policy", "gpuwise", "--seeds", "3")
    assert isinstance(result, dict)
    assert_documented(result, "gpuwise", [42, 43, 44])
    assert "Alibaba clusterdata" in result["source"] and result["trace"] == str(pods)
    # Each seed's figures are that seed's replay, and the seeds differ (so a mean is a mean).
    loaded = load_nodes(nodes)
    replays = [run_seed(loaded, load_pods(pods, loaded), "gpuwise", seed) for seed in (42, 43, 44)]
    for key in ("alloc_at_100", "alloc_at_130", "frag_at_100"):
        expected = [getattr(seed, key) for seed in replays]
        assert [seed[key] for seed in result["per_seed"]] == pytest.approx(expected, abs=1e-3)
    assert len({seed["alloc_at_100"] for seed in result["per_seed"]}) > 1


def test_json_figures_mean_allocation_and_fragmentation_in_percent_of_capacity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Four GPUs, pods of 600 milli: one pod per GPU, then every pod is dropped. The 7th pod
    arrives at 105 %, so at 100 % six have arrived and four are placed: 2,400 of 4,000 milli is
    60 % allocated, and the 4 x 400 milli left, which no 600-milli pod can use, is 40 % fragmented.
    Nothing more is placed up to 130 % (8 pods, 120 %)."""
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\na,64000,262144,4,T4\n")
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(f"p{i},1000,1024,1,600\n" for i in range(3))
    )
    for policy in ("random", "bestfit", "fgd", "gpuwise"):
        result = packing_json(capsys, nodes, pods, "--policy", policy, "--seeds", "2")
        assert_documented(result, policy, [42, 43])
        assert (result["alloc_at_100"], result["alloc_at_130"], result["frag_at_100"]) == (60.0, 60.0, 40.0)


def test_json_for_several_policies_or_repack_is_a_list_in_the_order_they_ran(
    trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Three 2-GPU nodes and pods of 810, 160, 500 and 1000 milli: on seed 44 a whole-GPU pod
    # gets in only by moving two pods.
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"{n},32000,131072,2,T4\n" for n in "abc"))
    pods = tmp_path / "pods.csv"
    shapes = (810, 160, 1000, 500)
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(f"p{m},1000,1024,1,{m}\n" for m in shapes)
    )
    results = packing_json(capsys, nodes, pods, "--policy", "fgd,gpuwise", "--seeds", "4", "--repack")
    assert [(r["policy"], r["repack"], r["max_migrations"]) for r in results] == [
        ("fgd", False, 0),
        ("fgd", True, 2),
        ("gpuwise", False, 0),
        ("gpuwise", True, 2),
    ]
    for result in results:
        assert_documented(result, result["policy"], [42, 43, 44, 45])
        assert (result["migrations"] > 0) == result["repack"]
    nodes, pods = trace
    one = packing_json(capsys, nodes, pods, "--policy", "gpuwise", "--seeds", "2", "--repack", "--max-migrations", "1")
    assert [r["max_migrations"] for r in one] == [0, 1]
    several = packing_json(capsys, nodes, pods, "--policy", "all", "--seeds", "1")
    assert [r["policy"] for r in several] == ["random", "bestfit", "fgd", "gpuwise"]


def test_paired_wins_compare_the_same_seeds() -> None:
    def result(policy: str, allocations: dict[int, float]) -> PolicyResult:
        seeds = tuple(SeedResult(seed, a, a, 0.0, 0, 1.0, ()) for seed, a in allocations.items())
        return PolicyResult(policy, 0, seeds)

    mine = result("gpuwise", {42: 95.0, 43: 94.0, 44: 96.0, 45: 90.0})
    theirs = result("fgd", {42: 94.0, 43: 94.0, 44: 97.0, 46: 10.0})
    # 42 more, 43 a tie, 44 less; 45 and 46 ran under one policy only.
    assert paired_wins(mine, theirs, "alloc_at_100") == (1, 1, 3)
    assert "gpuwise allocates more / less than fgd on 1 / 1 of 3 seeds at 100 % arrived" in table(
        [theirs, mine], "t.csv"
    )


def test_all_policies_with_repack_print_a_table_a_plot_and_the_source(
    trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = trace
    argv = ["simulate", "packing", "--nodes", str(nodes), "--pods", str(pods), "--policy", "all", "--seeds", "1"]
    assert cli.main([*argv, "--repack"]) == 0
    out = capsys.readouterr().out
    for label in ("random", "bestfit", "fgd", "gpuwise", "gpuwise --repack", "fgd --repack"):
        assert f"\n{label} " in out
    assert "allocated % of capacity" in out and "legend: R random" in out
    assert "paired by seed (same arrivals): gpuwise allocates more / less than fgd on" in out
    assert "Alibaba clusterdata cluster-trace-gpu-v2023 (CC BY 4.0)" in out


def test_bad_input_exits_2_and_says_what_to_fix(
    trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, _ = trace
    broken = tmp_path / "broken.csv"
    broken.write_text("name,cpu_milli,num_gpu,gpu_milli\np,1,1,500\n")
    assert main(["packing", "--nodes", str(nodes), "--pods", str(broken), "--policy", "fgd"]) == 2
    assert "missing column(s) memory_mib" in capsys.readouterr().err
    assert main(["packing", "--nodes", str(nodes), "--pods", str(broken), "--policy", "tetris"]) == 2
    assert "unknown policy 'tetris'; choose from: random, bestfit, fgd, gpuwise, all" in capsys.readouterr().err


def test_allocation_is_read_at_whole_percents_of_arrival() -> None:
    capacity = 1000
    curve = Curve(
        arrived=np.array([990, 996, 1003, 1006, 1300]),
        allocated=np.array([900, 910, 920, 930, 940]),
        fragmented=np.zeros(5),
        capacity=capacity,
    )
    # 99.6 % and 100.3 % round to 100 %; 100.6 % rounds to 101 %.
    assert curve.allocation_at(100) == pytest.approx(91.5)
    assert curve.allocation_at(130) == pytest.approx(94.0)
    # No event rounds to 120 %: what was allocated after the last event before it.
    assert curve.allocation_at(120) == pytest.approx(93.0)
    assert curve.allocation_at(50) == 0.0


@needs_trace
def test_the_shared_trace_is_the_one_of_the_paper() -> None:
    nodes = load_nodes(NODES_CSV)
    pods = load_pods(OPENB / "openb_pod_list_default.csv", nodes)
    assert len(nodes) == 1213 and nodes.gpu_capacity_milli == 6212 * 1000
    assert len(pods) == 8152


@needs_trace
@pytest.mark.slow
@pytest.mark.parametrize(
    ("trace", "fgd_published", "gpuwise_floor", "lead"),
    [
        # With the weight 0.9 gpuwise allocates more than fgd on 10/10 seeds of 42-51 at both
        # levels of every shared trace, by +0.40 to +0.48 on average; on seed 42 by 0.35 or more.
        ("default", (95.23, 95.39), (95.65, 95.73), 0.2),
        ("multigpu20", (95.53, 95.65), (95.96, 96.13), 0.2),
        # The paper publishes no figure here.
        ("gpushare20", None, (96.90, 96.95), 0.2),
    ],
)
def test_trace_regression(
    trace: str, fgd_published: tuple[float, float] | None, gpuwise_floor: tuple[float, float], lead: float
) -> None:
    """Seed 42 (the reference's first) on each shared trace: fgd as the paper publishes it (its
    mean over 10 seeds, within 0.3 points), gpuwise not below its seed-42 figures in the run
    behind the README's table (floors a few hundredths under them), and ahead of fgd by more
    than ``lead`` points at 100 % and at 130 % arrived. (Speed is bench/packing.py's, not a
    test's; the figures over all seeds are in the README.)"""
    nodes = load_nodes(NODES_CSV)
    pods = load_pods(OPENB / f"openb_pod_list_{trace}.csv", nodes)
    fgd = run_seed(nodes, pods, "fgd", 42)
    gpuwise = run_seed(nodes, pods, "gpuwise", 42)
    if fgd_published is not None:
        assert abs(fgd.alloc_at_100 - fgd_published[0]) < 0.3 and abs(fgd.alloc_at_130 - fgd_published[1]) < 0.3
    assert gpuwise.alloc_at_100 >= gpuwise_floor[0] and gpuwise.alloc_at_130 >= gpuwise_floor[1]
    assert gpuwise.alloc_at_100 - fgd.alloc_at_100 > lead and gpuwise.alloc_at_130 - fgd.alloc_at_130 > lead
