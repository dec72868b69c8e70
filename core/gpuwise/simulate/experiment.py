"""Run a policy over several seeds of a trace and summarize, as the ATC'23 evaluation does.

Each seed gives its own arrival order (shuffle plus resampling to 130 % of capacity) and its own
tie-breaking order of the nodes; a policy's result is the mean over seeds. Seeds can run in
parallel processes: each replay is independent and single-threaded.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuwise.decide.packing.cluster import Nodes, Pods
from gpuwise.decide.packing.registry import PolicyChoice, policy_label
from gpuwise.simulate.arrivals import DEFAULT_RATIO, arrival_order
from gpuwise.simulate.replay import replay

CURVE_POINTS = tuple(range(round(100 * DEFAULT_RATIO) + 1))
"""Arrived % of capacity at which each seed's allocation curve is sampled."""


@dataclass(frozen=True)
class SeedResult:
    seed: int
    alloc_at_100: float
    alloc_at_130: float
    frag_at_100: float
    migrations: int
    seconds: float
    curve: tuple[float, ...]
    """Allocation % at each of :data:`CURVE_POINTS`."""


@dataclass(frozen=True)
class PolicyResult:
    policy: str
    max_migrations: int
    seeds: tuple[SeedResult, ...]

    def mean(self, field: str) -> float:
        return statistics.fmean(getattr(seed, field) for seed in self.seeds)

    def stdev(self, field: str) -> float:
        values = [getattr(seed, field) for seed in self.seeds]
        return statistics.stdev(values) if len(values) > 1 else 0.0

    @property
    def label(self) -> str:
        return f"{self.policy} --repack" if self.max_migrations else self.policy

    @property
    def curve(self) -> tuple[float, ...]:
        """Mean allocation % over seeds at each of :data:`CURVE_POINTS`."""
        return tuple(float(v) for v in np.mean([seed.curve for seed in self.seeds], axis=0))

    def to_json(self) -> dict[str, Any]:
        """The documented keys are means over seeds: ``alloc_at_100``/``alloc_at_130`` (allocated
        GPU as % of capacity at 100 %/130 % arrived), ``frag_at_100`` (FGD fragmentation as % of
        capacity at 100 % arrived), ``migrations`` (pods moved per seed) and ``seconds`` (per seed);
        ``seeds`` is how many. ``per_seed`` holds each seed's own figures, for paired comparisons."""
        return {
            "policy": self.policy,
            "seeds": len(self.seeds),
            **{field: round(self.mean(field), digits) for field, digits in SUMMARY_FIELDS.items()},
            "repack": bool(self.max_migrations),
            "max_migrations": self.max_migrations,
            "alloc_at_100_stdev": round(self.stdev("alloc_at_100"), 3),
            "alloc_at_130_stdev": round(self.stdev("alloc_at_130"), 3),
            "per_seed": [
                {
                    "seed": seed.seed,
                    **{field: round(getattr(seed, field), SUMMARY_FIELDS[field]) for field in SUMMARY_FIELDS},
                }
                for seed in self.seeds
            ],
        }


SUMMARY_FIELDS = {"alloc_at_100": 3, "alloc_at_130": 3, "frag_at_100": 3, "migrations": 1, "seconds": 2}
"""The per-seed figures a result summarizes, with the decimals JSON keeps of each."""


def paired_wins(result: PolicyResult, other: PolicyResult, field: str) -> tuple[int, int, int]:
    """On how many of the seeds both ran ``result`` has a higher ``field`` than ``other``, on how
    many a lower one, and how many seeds they share: the same seed gives both the same arrival
    order, so seeds pair up."""
    theirs = {seed.seed: getattr(seed, field) for seed in other.seeds}
    shared = [(getattr(seed, field), theirs[seed.seed]) for seed in result.seeds if seed.seed in theirs]
    return sum(mine > their for mine, their in shared), sum(mine < their for mine, their in shared), len(shared)


def run_seed(nodes: Nodes, pods: Pods, policy: PolicyChoice, seed: int, *, max_migrations: int = 0) -> SeedResult:
    rng = np.random.default_rng(seed)
    order = arrival_order(pods, nodes.gpu_capacity_milli, rng)
    run = replay(nodes, pods, order, policy, rng, max_migrations=max_migrations)
    return SeedResult(
        seed=seed,
        alloc_at_100=run.curve.allocation_at(100),
        alloc_at_130=run.curve.allocation_at(100 * DEFAULT_RATIO),
        frag_at_100=run.curve.fragmentation_at(100),
        migrations=run.migrations,
        seconds=run.seconds,
        curve=tuple(float(v) for v in run.curve.sample(CURVE_POINTS)),
    )


def run_policy(
    nodes: Nodes, pods: Pods, policy: PolicyChoice, seeds: Sequence[int], *, max_migrations: int = 0, jobs: int = 1
) -> PolicyResult:
    """Every seed of ``policy``, in ``jobs`` processes."""
    if jobs <= 1 or len(seeds) <= 1:
        results = [run_seed(nodes, pods, policy, seed, max_migrations=max_migrations) for seed in seeds]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [
                pool.submit(run_seed, nodes, pods, policy, seed, max_migrations=max_migrations) for seed in seeds
            ]
            results = [future.result() for future in futures]
    return PolicyResult(policy_label(policy), max_migrations, tuple(results))
