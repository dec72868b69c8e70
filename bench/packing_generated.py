"""gpuwise against FGD on many small generated clusters, where GPU pods may be bound to a model.

    .venv/bin/python -m bench.packing --generated-clusters 60 [--models 2,3] [--jobs 2]

Each case is a cluster of 40 nodes and a trace of 300 pods (`gpuwise.simulate.generated`); with
several GPU models, a third of its GPU shapes accept one model only. Only cases with such pods
count. Per case, every policy's allocation minus FGD's, paired over seeds 100-105; then, over the
cases, the mean of those means, how many cases a policy is ahead of or behind FGD by two standard
errors, and the worst case. Policies: gpuwise (its rehearsal and the contention weighing), the two
horizons with contention ("alone"), and without it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

from gpuwise.decide.packing.gpuwise_policy import GpuwiseParameters
from gpuwise.decide.packing.registry import PolicyChoice
from gpuwise.decide.packing.rehearsal import CLEAR_ERRORS
from gpuwise.simulate.experiment import run_seed
from gpuwise.simulate.generated import generated

SEEDS = tuple(range(100, 106))
POLICIES: dict[str, PolicyChoice] = {
    "gpuwise": GpuwiseParameters(),
    "gpuwise, w=0.9 only": GpuwiseParameters(other_weights=()),
    "alone, w=0.5": GpuwiseParameters(0.5, rehearsed_arrivals=0),
    "alone": GpuwiseParameters(rehearsed_arrivals=0),
    "alone, no contention": GpuwiseParameters(rehearsed_arrivals=0, weigh_contention=False),
}
LEVELS = ("@100", "@130")

Gains = dict[str, list[tuple[float, float]]]  # policy -> per seed, (gain @100, gain @130)


def case_gains(case: int, models: int) -> Gains | None:
    """Per policy and seed, its allocation minus FGD's; None if no pod of the case is bound to a model."""
    nodes, pods = generated(case, models=models)
    if pods.allowed.all():
        return None
    fgd = [run_seed(nodes, pods, "fgd", seed) for seed in SEEDS]
    gains: Gains = {}
    for label, policy in POLICIES.items():
        ours = [run_seed(nodes, pods, policy, seed) for seed in SEEDS]
        gains[label] = [
            (a.alloc_at_100 - b.alloc_at_100, a.alloc_at_130 - b.alloc_at_130) for a, b in zip(ours, fgd, strict=True)
        ]
    return gains


def generated_clusters(cases: int, models: Sequence[int], jobs: int) -> int:
    print(
        f"seeds {SEEDS[0]}-{SEEDS[-1]}: gain over FGD per case, in points; "
        f"'clearly' is by {CLEAR_ERRORS:g} standard errors"
    )
    header = (
        f"{'models':>6} {'cases':>5} {'policy':<21} {'level':<5} {'mean':>6} {'ahead':>5} {'behind':>6} {'worst':>6}"
    )
    print(header)
    print("-" * len(header))
    for count in models:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            found = [g for g in pool.map(case_gains, range(cases), [count] * cases) if g is not None]
        for label in POLICIES:
            for level, name in enumerate(LEVELS):
                per_case = [[seed[level] for seed in gains[label]] for gains in found]
                means = [statistics.fmean(g) for g in per_case]
                errors = [statistics.stdev(g) / len(g) ** 0.5 for g in per_case]
                ahead = sum(m > CLEAR_ERRORS * e for m, e in zip(means, errors, strict=True))
                behind = sum(m < -CLEAR_ERRORS * e for m, e in zip(means, errors, strict=True))
                print(
                    f"{count:>6} {len(found):>5} {label:<21} {name:<5} {statistics.fmean(means):>+6.2f} "
                    f"{ahead:>5} {behind:>6} {min(means):>+6.2f}"
                )
    return 0
