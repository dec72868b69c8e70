"""Placement scored on traces its parameters were not chosen on: leave one trace out.

    .venv/bin/python -m bench.packing --leave-one-out [--jobs 2] [--cache FILE]

gpuwise's policy has two parameters (`GpuwiseParameters`: the next-pod horizon's weight and the
resolution at which fragmentation growths tie). Here they are never chosen on the trace they are
scored on:

- **Selection.** Every point of a small grid, and FGD, run on each shared openb trace with the
  selection seeds. A point's margin on a trace is its paired gain over FGD, the lower of the two
  at 100 % and at 130 % arrived; the point chosen for a held-out trace is the one whose smallest
  margin over the *other* traces is largest (the goal is to beat FGD on every trace, so the worst
  trace decides). Ties go to the defaults.
- **Scoring.** The chosen point and FGD on the held-out trace with other seeds (the scoring
  seeds, the README's 42-51), paired: a seed gives both the same arrivals.
- **Traces never seen at all.** The rest of the ATC'23 family, scored with the point chosen on
  all three shared traces: gpushare40 ... multigpu50 and cpu050 ... cpu250 as files where `--data`
  has them, or else as stand-ins generated from the default trace (`gpuwise.simulate.variants`),
  and every other `openb_pod_list_*.csv` in `--data` (gpuspec33, ...) as it is.

The goal (issue 19) is a lead over FGD at 100 % and at 130 % on every trace larger than the
seed-to-seed spread: here, a mean paired gain above the standard deviation of the paired gains.

Results are cached by (trace, policy, seed) in `--cache`, so an interrupted run resumes.

    .venv/bin/python -m bench.packing --mixes multigpu20,multigpu25 [--draw 0,1,2] [--seeds 6] [--jobs 2]

scores the defaults against FGD on the traces named (generated ones drawn with each `--draw`),
paired by seed, beside each workload's multi-GPU share, what gpuwise's rehearsal chose, and the
two horizons without it: a look at mixes and the rehearsal, not a leave-one-out figure.
"""

from __future__ import annotations

import functools
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuwise.decide.packing.cluster import Nodes, Pods
from gpuwise.decide.packing.fragmentation import TargetWorkload
from gpuwise.decide.packing.gpuwise_policy import GpuwiseParameters, GpuwisePolicy
from gpuwise.decide.packing.registry import PolicyChoice, policy_label
from gpuwise.simulate.cluster_trace import load_nodes, load_pods
from gpuwise.simulate.experiment import run_seed
from gpuwise.simulate.replay import empty_cluster_context
from gpuwise.simulate.variants import parse, variant

TRACE_PREFIX = "openb_pod_list_"
SHARED_TRACES = ("default", "gpushare20", "multigpu20")
GENERATED_TRACES = (
    *("gpushare40", "gpushare60", "gpushare80", "gpushare100"),
    *("multigpu30", "multigpu40", "multigpu50"),
    *("cpu050", "cpu100", "cpu200", "cpu250"),
)
"""The ATC'23 family's other traces that can be drawn from the default one."""
VARIANT_BASES = {"gpuspec": "gpuspec33"}
"""The trace a kind's variants are drawn from where it is not the default one: the default trace
has no pod bound to a GPU model, the ATC'23 authors' gpuspec33 (not shared here) a third."""
GRID = tuple(
    GpuwiseParameters(weight, resolution) for weight in (0.3, 0.5, 0.7, 0.9) for resolution in (25.0, 40.0, 55.0)
)
DEFAULTS = GpuwiseParameters()
TWO_HORIZONS = DEFAULTS.two_horizons_only
SELECTION_SEEDS = tuple(range(4))
SCORING_SEEDS = tuple(range(42, 52))
FIELDS = ("alloc_at_100", "alloc_at_130")

Key = tuple[str, str, int]  # trace, policy label, seed


def trace_file(data: Path, trace: str) -> Path:
    return data / f"{TRACE_PREFIX}{trace}.csv"


def from_file(data: Path, trace: str) -> bool:
    """Whether ``trace`` is read from ``data`` as it is: a trace file there wins over a generated
    stand-in of the same name, so whoever has the real gpushare40 scores the real one."""
    return trace_file(data, trace).exists()


def never_seen(data: Path) -> tuple[str, ...]:
    """The traces no choice looks at: the generated mixes (or the real files of those names), and
    every other trace file in ``data``, such as the ATC'23 family's gpuspec or cpu traces."""
    others = sorted(
        path.name.removeprefix(TRACE_PREFIX).removesuffix(".csv") for path in data.glob(f"{TRACE_PREFIX}*.csv")
    )
    return GENERATED_TRACES + tuple(t for t in others if t not in SHARED_TRACES + GENERATED_TRACES)


@functools.cache
def load_trace(data: Path, trace: str, draw: int = 0) -> tuple[Nodes, Pods]:
    """A trace file of ``data``, or else one generated (`draw` seeds its resampling of the default
    trace, or of the kind's :data:`VARIANT_BASES`)."""
    nodes = load_nodes(data / "openb_node_list_gpu_node.csv")
    if from_file(data, trace):
        return nodes, load_pods(trace_file(data, trace), nodes)
    kind, share = parse(trace)
    base = trace_file(data, VARIANT_BASES.get(kind, "default"))
    if not base.exists():
        raise SystemExit(f"{trace} is drawn from {base.name}, which is not in {data}")
    return nodes, variant(load_pods(base, nodes), kind, share, seed=draw)


def _run(data: Path, trace: str, policy: PolicyChoice, seed: int, draw: int = 0) -> tuple[float, float]:
    nodes, pods = load_trace(data, trace, draw)
    result = run_seed(nodes, pods, policy, seed)
    return result.alloc_at_100, result.alloc_at_130


class Results:
    """Allocation figures by (trace, policy, seed), computed once and kept in a JSON file."""

    def __init__(self, data: Path, cache: Path | None, jobs: int, draw: int = 0) -> None:
        # The cache's keys name no draw: keep one cache file per draw.
        self.data, self.cache, self.jobs, self.draw = data, cache, jobs, draw
        self.known: dict[Key, tuple[float, float]] = {}
        if cache is not None and cache.exists():
            for row in json.loads(cache.read_text()):
                self.known[(row["trace"], row["policy"], row["seed"])] = (row["alloc_at_100"], row["alloc_at_130"])

    def ensure(self, wanted: Iterable[tuple[str, PolicyChoice, int]]) -> None:
        missing = {(t, policy_label(p), s): (t, p, s) for t, p, s in wanted}
        todo = [task for key, task in missing.items() if key not in self.known]
        if not todo:
            return
        with ProcessPoolExecutor(max_workers=self.jobs) as pool:
            futures = {pool.submit(_run, self.data, *task, self.draw): task for task in todo}
            for future, (trace, policy, seed) in futures.items():
                self.known[(trace, policy_label(policy), seed)] = future.result()
                self._save()

    def _save(self) -> None:
        if self.cache is None:
            return
        rows = [
            {"trace": t, "policy": p, "seed": s, "alloc_at_100": a, "alloc_at_130": b}
            for (t, p, s), (a, b) in sorted(self.known.items())
        ]
        self.cache.write_text(json.dumps(rows, indent=0))

    def gains(self, trace: str, policy: PolicyChoice, seeds: Sequence[int], field: str) -> list[float]:
        """Per seed, ``policy``'s allocation minus FGD's, in points."""
        column = FIELDS.index(field)
        label = policy_label(policy)
        return [self.known[(trace, label, s)][column] - self.known[(trace, "fgd", s)][column] for s in seeds]


@dataclass(frozen=True)
class Paired:
    mean: float
    stdev: float
    wins: int
    seeds: int

    @classmethod
    def of(cls, gains: Sequence[float]) -> Paired:
        return cls(statistics.fmean(gains), statistics.stdev(gains), sum(g > 0 for g in gains), len(gains))

    @property
    def beyond_spread(self) -> bool:
        return self.mean > self.stdev

    def __str__(self) -> str:
        return f"{self.mean:+.2f} ± {self.stdev:.2f}, {self.wins}/{self.seeds}"


def margin(results: Results, trace: str, point: GpuwiseParameters) -> float:
    return min(statistics.fmean(results.gains(trace, point, SELECTION_SEEDS, field)) for field in FIELDS)


def choose(results: Results, traces: Sequence[str]) -> GpuwiseParameters:
    """The grid point whose worst margin over ``traces`` is largest; the defaults win ties."""
    ranked = sorted(GRID, key=lambda p: (min(margin(results, t, p) for t in traces), p == DEFAULTS), reverse=True)
    return ranked[0]


def leave_one_out(data: Path, cache: Path | None, jobs: int) -> int:
    results = Results(data, cache, jobs)
    policies: tuple[PolicyChoice, ...] = ("fgd", *GRID)
    results.ensure((t, p, s) for t in SHARED_TRACES for p in policies for s in SELECTION_SEEDS)
    print(
        "selection: the paired margin over FGD (the lower of @100 and @130), seeds "
        f"{SELECTION_SEEDS[0]}-{SELECTION_SEEDS[-1]}"
    )
    print(f"{'point':<26}" + "".join(f"{t:>12}" for t in SHARED_TRACES))
    for point in GRID:
        print(f"{point.label:<26}" + "".join(f"{margin(results, t, point):>+12.3f}" for t in SHARED_TRACES))

    chosen = {t: choose(results, [o for o in SHARED_TRACES if o != t]) for t in SHARED_TRACES}
    everywhere = choose(results, SHARED_TRACES)
    chosen.update(dict.fromkeys(never_seen(data), everywhere))
    results.ensure((t, p, s) for t, point in chosen.items() for p in ("fgd", point) for s in SCORING_SEEDS)

    placed = placements(data, [(t, 0, point) for t, point in chosen.items()], jobs)

    print(f"\nscoring: seeds {SCORING_SEEDS[0]}-{SCORING_SEEDS[-1]}, gpuwise minus fgd per seed (mean ± stdev, wins)")
    header = (
        f"{'trace':<15} {'held out':<9} {'chosen on the others':<26} {'placed as':>9} {'fgd @100/@130':>15} "
        f"{'gain @100':>18} {'gain @130':>18}  goal"
    )
    print(header)
    print("-" * len(header))
    met: dict[str, bool] = {}
    for trace, point in chosen.items():
        fgd = [statistics.fmean(results.known[(trace, "fgd", s)][i] for s in SCORING_SEEDS) for i in range(2)]
        paired = [Paired.of(results.gains(trace, point, SCORING_SEEDS, field)) for field in FIELDS]
        ok = met[trace] = all(p.beyond_spread for p in paired)
        kind = "trace" if trace in SHARED_TRACES else "all"
        name = trace if from_file(data, trace) else f"{trace}*"
        print(
            f"{name:<15} {kind:<9} {point.label:<26} {placed[(trace, 0)]:>9} {fgd[0]:>7.2f}/{fgd[1]:<7.2f} "
            f"{paired[0]!s:>18} {paired[1]!s:>18}  {'met' if ok else 'missed'}"
        )
    print("* generated: no trace file of that name in", data)
    print("\n" + "\n".join(goal_report(met, data)))
    return 0


def goal_report(met: Mapping[str, bool], data: Path) -> list[str]:
    """Whether each trace met the goal, told apart for the traces read from ``data`` (what issue 19
    asks about) and the generated stand-ins, so a tie on a stand-in does not read as a miss on a
    trace, nor the other way round."""
    lines = ["goal: a lead beyond the seed spread at 100 % and 130 % arrived"]
    for kind, read in ((f"read from {data}", True), ("generated", False)):
        traces = [trace for trace in met if from_file(data, trace) == read]
        missed = [trace for trace in traces if not met[trace]]
        verdict = f"missed on {', '.join(missed)}" if missed else "met"
        lines.append(f"  traces {kind}: {len(traces) - len(missed)} of {len(traces)}, {verdict}")
    return lines


def placed_as(data: Path, trace: str, draw: int = 0, parameters: GpuwiseParameters = DEFAULTS) -> str:
    """What gpuwise's rehearsal on this trace's cluster and mix chose: "fgd", or the two horizons
    at a next-pod weight ("w=0.9")."""
    nodes, pods = load_trace(data, trace, draw)
    weight = GpuwisePolicy(empty_cluster_context(nodes, pods, np.random.default_rng(0)), parameters).next_pod_weight
    return "fgd" if weight is None else f"w={weight:g}"


def placements(
    data: Path, chosen: Sequence[tuple[str, int, GpuwiseParameters]], jobs: int
) -> dict[tuple[str, int], str]:
    """:func:`placed_as` for each (trace, draw, parameters), rehearsed in ``jobs`` processes."""
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {(t, d): pool.submit(placed_as, data, t, d, p) for t, d, p in chosen}
        return {key: future.result() for key, future in futures.items()}


def mixes(
    data: Path, traces: Sequence[str], draws: Sequence[int], seeds: Sequence[int], *, jobs: int, cache: Path | None
) -> int:
    """gpuwise's defaults against FGD on each trace and draw, paired by seed, beside the share of
    the target workload's GPU that its multi-GPU shapes ask for, what gpuwise's rehearsal chose,
    and the two horizons alone (no rehearsal); then, per trace, every draw's seeds pooled. A trace
    read from a file has one draw, the first."""
    drawn = {trace: draws[:1] if from_file(data, trace) else draws for trace in traces}
    if len(seeds) < 2:
        raise SystemExit("--mixes needs at least 2 seeds: the spread is part of the figure")
    results = {draw: Results(data, _per_draw(cache, draw), jobs=jobs, draw=draw) for draw in draws}
    placed = placements(data, [(t, d, DEFAULTS) for t in traces for d in drawn[t]], jobs)
    policies: tuple[PolicyChoice, ...] = ("fgd", DEFAULTS, TWO_HORIZONS)
    for draw, result in results.items():
        result.ensure((t, p, s) for t in traces if draw in drawn[t] for p in policies for s in seeds)
    print(
        f"seeds {seeds[0]}-{seeds[-1]}: gpuwise minus fgd per seed (mean ± stdev, wins), with its rehearsal "
        "and with the two horizons alone; a draw resamples a generated trace, 'file' is a trace read as it is"
    )
    header = (
        f"{'trace':<15} {'draw':>4} {'multi-GPU':>9} {'placed as':>10} {'gain @100':>19} {'gain @130':>19}"
        f" {'alone @100':>19} {'alone @130':>19}"
    )
    print(header)
    print("-" * len(header))
    for trace in traces:
        for draw in drawn[trace]:
            share = TargetWorkload.from_pods(load_trace(data, trace, draw)[1]).multi_gpu_share
            paired = [Paired.of(results[draw].gains(trace, p, seeds, f)) for p in policies[1:] for f in FIELDS]
            label = "file" if from_file(data, trace) else draw
            print(
                f"{trace:<15} {label:>4} {share:>9.3f} {placed[(trace, draw)]:>10} "
                + " ".join(f"{p!s:>19}" for p in paired)
            )
        if len(drawn[trace]) > 1:
            pooled = [
                Paired.of([g for draw in drawn[trace] for g in results[draw].gains(trace, p, seeds, f)])
                for p in policies[1:]
                for f in FIELDS
            ]
            print(f"{trace:<15} {'all':>4} {'':>9} {'':>10} " + " ".join(f"{p!s:>19}" for p in pooled))
    return 0


def _per_draw(cache: Path | None, draw: int) -> Path | None:
    """The cache file of one draw (the cache's keys name no draw)."""
    return None if cache is None else cache.with_name(f"{cache.stem}-draw{draw}{cache.suffix}")
