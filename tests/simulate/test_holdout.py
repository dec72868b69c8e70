"""The leave-one-out choice of gpuwise's parameters never looks at the trace it is scored on."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.packing_holdout import (
    DEFAULTS,
    GENERATED_TRACES,
    GRID,
    SELECTION_SEEDS,
    Results,
    choose,
    from_file,
    goal_report,
    load_trace,
    never_seen,
)

from gpuwise.simulate.variants import parse, share

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,96000,393216,8,V100\n"
HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
DEFAULT = HEADER + "".join(f"p{i},1000,0,{n},{m},\n" for i, (n, m) in enumerate([(1, 500), (2, 1000), (1, 1000)] * 4))


def results_with(gains: dict[tuple[str, int], tuple[float, float]]) -> Results:
    """FGD at 90 % on every trace and seed; grid point i at 90 + its gain on each trace."""
    results = Results(Path("unused"), cache=None, jobs=1)
    for (trace, point), (at_100, at_130) in gains.items():
        for seed in SELECTION_SEEDS:
            results.known[(trace, "fgd", seed)] = (90.0, 90.0)
            results.known[(trace, GRID[point].label, seed)] = (90.0 + at_100, 90.0 + at_130)
    return results


def test_the_point_whose_worst_trace_is_best_is_chosen() -> None:
    gains = {(trace, point): (0.1, 0.1) for trace in ("a", "b", "c") for point in range(len(GRID))}
    gains[("a", 0)] = (0.5, 0.4)  # best on a, worst on b
    gains[("b", 0)] = (-0.2, 0.3)
    gains[("a", 1)] = (0.3, 0.2)  # good on both
    gains[("b", 1)] = (0.2, 0.25)
    gains[("c", 1)] = (-1.0, -1.0)  # and bad on c, the trace held out
    results = results_with(gains)
    assert choose(results, ["a", "b"]) == GRID[1]
    assert choose(results, ["a", "b", "c"]) != GRID[1]


def test_ties_go_to_the_defaults() -> None:
    results = results_with({(trace, point): (0.1, 0.1) for trace in ("a", "b") for point in range(len(GRID))})
    assert DEFAULTS in GRID
    assert choose(results, ["a", "b"]) == DEFAULTS


def openb_dir(tmp_path: Path, **traces: str) -> Path:
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(NODES)
    (tmp_path / "openb_pod_list_default.csv").write_text(DEFAULT)
    for name, text in traces.items():
        (tmp_path / f"openb_pod_list_{name}.csv").write_text(text)
    return tmp_path


def test_a_trace_file_wins_over_the_stand_in_generated_for_its_name(tmp_path: Path) -> None:
    data = openb_dir(tmp_path, gpushare40=HEADER + "q0,2000,0,1,250,V100\nq1,2000,0,1,750,\n")
    assert from_file(data, "gpushare40") and not from_file(data, "gpushare60")
    real = load_trace(data, "gpushare40")[1]
    assert real.gpu_milli.tolist() == [250, 750]
    assert real.request(0).allowed_models.tolist() == [False, True], "the file's gpu_spec is kept"
    generated = load_trace(data, "gpushare60", 1)[1]
    assert len(generated) == 12 and set(generated.gpu_milli.tolist()) <= {500, 1000}


def test_the_goal_is_told_apart_for_trace_files_and_generated_stand_ins(tmp_path: Path) -> None:
    data = openb_dir(tmp_path, gpushare20=DEFAULT, gpuspec33=DEFAULT)
    met = {"default": True, "gpushare20": True, "gpuspec33": False, "gpushare40": True, "multigpu30": False}
    assert goal_report(met, data)[1:] == [
        f"  traces read from {data}: 2 of 3, missed on gpuspec33",
        "  traces generated: 1 of 2, missed on multigpu30",
    ]
    met["gpuspec33"] = True
    assert goal_report(met, data)[1] == f"  traces read from {data}: 3 of 3, met"


def test_every_other_trace_file_is_scored_as_never_seen(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    assert never_seen(openb_dir(bare)) == GENERATED_TRACES
    data = openb_dir(tmp_path, gpushare20=DEFAULT, gpushare40=DEFAULT, gpuspec33=DEFAULT, nomem=DEFAULT)
    assert never_seen(data) == (*GENERATED_TRACES, "gpuspec33", "nomem")


def test_every_generated_trace_is_drawn_from_the_default_one_with_its_share(tmp_path: Path) -> None:
    shapes = [(1, 500), (2, 1000), (1, 1000), (0, 0)]
    default = HEADER + "".join(f"p{i},1000,0,{n},{m},\n" for i, (n, m) in enumerate(shapes * 50))
    data = openb_dir(tmp_path, default=default)
    for trace in GENERATED_TRACES:
        kind, wanted = parse(trace)
        pods = load_trace(data, trace)[1]
        assert share(pods, kind) == pytest.approx(wanted, abs=0.03), trace
