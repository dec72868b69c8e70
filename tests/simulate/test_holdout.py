"""The leave-one-out choice of gpuwise's parameters never looks at the trace it is scored on."""

from __future__ import annotations

from pathlib import Path

from bench.packing_holdout import DEFAULTS, GRID, SELECTION_SEEDS, Results, choose


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
