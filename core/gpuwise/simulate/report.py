"""Human output of a packing simulation: a comparison table and the allocation curves as text."""

from __future__ import annotations

from collections.abc import Sequence

from gpuwise.simulate.cluster_trace import SOURCE
from gpuwise.simulate.experiment import CURVE_POINTS, PolicyResult, paired_wins

MARKERS = "RBFG*+ox"


def table(results: Sequence[PolicyResult], trace: str) -> str:
    header = (
        f"{'policy':<18} {'seeds':>5} {'alloc@100%':>12} {'alloc@130%':>12} {'frag@100%':>10} "
        f"{'migrations':>10} {'s/seed':>7}"
    )
    lines = [f"trace: {trace}", header, "-" * len(header)]
    for result in results:
        lines.append(
            f"{result.label:<18} {len(result.seeds):>5} "
            f"{result.mean('alloc_at_100'):>6.2f} ±{result.stdev('alloc_at_100'):4.2f} "
            f"{result.mean('alloc_at_130'):>6.2f} ±{result.stdev('alloc_at_130'):4.2f} "
            f"{result.mean('frag_at_100'):>10.2f} {result.mean('migrations'):>10.1f} {result.mean('seconds'):>7.1f}"
        )
    lines += ["", *_paired(results)]
    lines += [
        "alloc: allocated GPU as % of cluster capacity when the arrived GPU demand is 100 % / 130 % of it",
        "(mean ± stdev over seeds); frag: FGD fragmentation as % of capacity at 100 % arrived.",
        f"Data: {SOURCE}.",
    ]
    return "\n".join(lines)


def _paired(results: Sequence[PolicyResult], challenger: str = "gpuwise", reference: str = "fgd") -> list[str]:
    """Per seed, how often ``challenger`` allocates more than ``reference`` (without repacking)."""
    by_policy = {result.policy: result for result in results if not result.max_migrations}
    if challenger not in by_policy or reference not in by_policy:
        return []
    wins = [paired_wins(by_policy[challenger], by_policy[reference], f"alloc_at_{at}") for at in (100, 130)]
    (more_100, less_100, seeds), (more_130, less_130, _) = wins
    return [
        f"paired by seed (same arrivals): {challenger} allocates more / less than {reference} on "
        f"{more_100} / {less_100} of {seeds} seeds at 100 % arrived, {more_130} / {less_130} at 130 %."
    ]


def plot(results: Sequence[PolicyResult], width: int = 66, height: int = 16, low: float = 80.0) -> str:
    """The mean allocation curves, allocation % (from ``low``) against arrived %, as text."""
    grid = [[" "] * width for _ in range(height)]
    last = CURVE_POINTS[-1]
    for marker, result in zip(MARKERS, results, strict=False):
        for point, allocation in zip(CURVE_POINTS, result.curve, strict=True):
            if allocation < low:
                continue
            column = round(point / last * (width - 1))
            row = height - 1 - round((allocation - low) / (100.0 - low) * (height - 1))
            grid[max(row, 0)][column] = marker
    lines = [f"{100 - (100 - low) * i / (height - 1):5.1f} |{''.join(row)}" for i, row in enumerate(grid)]
    axis = "      +" + "-" * width
    ticks = "       0" + f"{'arrived % of capacity':^{width - 8}}" + f"{last}"
    legend = "   ".join(f"{marker} {result.label}" for marker, result in zip(MARKERS, results, strict=False))
    return "\n".join(["allocated % of capacity", *lines, axis, ticks, f"legend: {legend}"])
