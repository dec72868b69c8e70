"""``gpuwise simulate``: replay a cluster trace through the planners.

    gpuwise simulate packing --nodes NODES.csv --pods PODS.csv --policy P[,P...]
                             [--seeds N] [--first-seed S] [--repack] [--max-migrations M]
                             [--jobs J] [--json]

``--policy all`` runs every policy. With ``--repack`` each policy runs twice, without and with
migrations, so the gain and the number of pods moved show side by side.

``--json`` prints one object for one policy without ``--repack``, and a list of such objects, one
per policy and variant in the order they ran, otherwise. Each object has ``policy``, ``seeds`` (how
many), ``alloc_at_100`` and ``alloc_at_130`` (allocated GPU as % of cluster capacity when the
arrived GPU request is 100 % and 130 % of it), ``frag_at_100`` (FGD's fragmentation as % of
capacity at 100 % arrived), ``migrations`` (pods moved per seed; 0 without repacking) and
``seconds`` (per seed), all means over the seeds; and ``repack``, ``max_migrations``, the standard
deviations ``alloc_at_100_stdev``/``alloc_at_130_stdev``, ``per_seed`` (each seed's own figures,
for paired comparisons: a seed gives every policy the same arrivals), ``trace`` and ``source``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from gpuwise.decide.packing.registry import POLICIES
from gpuwise.simulate.cluster_trace import SOURCE, TraceError, load_nodes, load_pods
from gpuwise.simulate.experiment import PolicyResult, run_policy
from gpuwise.simulate.report import plot, table

DEFAULT_FIRST_SEED = 42
"""The reference evaluation's first seed (it runs seeds 42..51)."""
DEFAULT_MIGRATIONS = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuwise simulate", description=__doc__.split("\n\n")[0])
    experiments = parser.add_subparsers(dest="experiment", required=True, metavar="EXPERIMENT")
    packing = experiments.add_parser(
        "packing",
        help="place (fractional-)GPU pods of a trace on its cluster and measure the allocation",
        description="Place pods of a trace on its cluster, one policy at a time, and report the GPU allocation.",
    )
    packing.add_argument(
        "--nodes", type=Path, required=True, help="node list CSV (sn, cpu_milli, memory_mib, gpu, model)"
    )
    packing.add_argument(
        "--pods",
        type=Path,
        required=True,
        help="pod list CSV (name, cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec])",
    )
    packing.add_argument("--policy", required=True, help=f"comma-separated policies, or 'all': {', '.join(POLICIES)}")
    packing.add_argument("--seeds", type=_positive, default=10, help="number of seeds (default 10)")
    packing.add_argument("--first-seed", type=int, default=DEFAULT_FIRST_SEED, help="first seed (default 42)")
    packing.add_argument("--repack", action="store_true", help="also run with migrations to admit pods that do not fit")
    packing.add_argument(
        "--max-migrations",
        type=_positive,
        default=DEFAULT_MIGRATIONS,
        help=f"pods one admission may move with --repack (default {DEFAULT_MIGRATIONS})",
    )
    packing.add_argument("--jobs", type=_positive, default=1, help="seeds run in parallel (default 1)")
    packing.add_argument(
        "--json",
        action="store_true",
        help="print JSON instead of a table and a plot: one object for one policy without --repack, else a list "
        "of objects (one per policy and variant); each has policy, seeds, alloc_at_100, alloc_at_130, frag_at_100, "
        "migrations and seconds (means per seed), their stdevs and per_seed",
    )
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _policies(text: str) -> list[str]:
    names = list(POLICIES) if text.strip() == "all" else [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in POLICIES]
    if unknown or not names:
        raise ValueError(
            f"unknown policy {', '.join(map(repr, unknown)) or '(none)'}; choose from: {', '.join(POLICIES)}, all"
        )
    return names


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    try:
        policies = _policies(args.policy)
        nodes = load_nodes(args.nodes)
        pods = load_pods(args.pods, nodes)
    except (TraceError, ValueError) as exc:
        sys.stderr.write(f"gpuwise simulate: {exc}\n")
        return 2
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    variants = [0, args.max_migrations] if args.repack else [0]
    results: list[PolicyResult] = []
    for policy in policies:
        for migrations in variants:
            results.append(run_policy(nodes, pods, policy, seeds, max_migrations=migrations, jobs=args.jobs))
            if not args.json:
                sys.stderr.write(f"  {results[-1].label}: done\n")
    if args.json:
        documents = [{**result.to_json(), "trace": str(args.pods), "source": SOURCE} for result in results]
        json.dump(documents[0] if len(documents) == 1 else documents, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(table(results, str(args.pods)) + "\n\n" + plot(results) + "\n")
    return 0
