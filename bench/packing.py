"""How long one seed of each packing policy takes on the Alibaba trace, side by side.

    .venv/bin/python -m bench.packing [--trace default] [--seeds 1] [--policies all]
                                      [--baseline bestfit] [--repack]
    .venv/bin/python -m bench.packing --leave-one-out [--jobs 2] [--cache FILE]
    .venv/bin/python -m bench.packing --repack-bound [--trace default] [--seeds 3]
    .venv/bin/python -m bench.packing --mixes multigpu30,multigpu50 [--draw 0,1,2] [--seeds 10] [--jobs 2] [--cache F]
    .venv/bin/python -m bench.packing --generated-clusters 60 [--models 2,3] [--jobs 2]
    .venv/bin/python -m bench.packing --rehearsal-nodes 1,10,50 [--trace default]

The second form scores gpuwise's policy on traces its parameters were not chosen on
(`bench/packing_holdout.py`); the third sets repacking's gain against a re-solve from scratch
and counts the restarts each costs (`bench/repack_bound.py`); the fourth pairs the defaults with
FGD on shared or generated mixes (`--draw 0,1,2`: one resampling or more), beside the two
horizons alone, seeds from `--first-seed`; the last times gpuwise's rehearsal on small clusters
of the trace's commonest node (`bench/packing_rehearsal.py`).

Each seed replays the whole trace (8,152 pods resampled to 130 % of the 6,212 GPUs, about
10,800 placements) in this process, one after another, so the figures are per seed on this
machine. The budget is 60 s per seed; the ratio is against the baseline policy run in the same
process. The reference Go simulator needs about 35 minutes for one FGD seed on two cores (the
issue's figure, not measured here).

Data: Alibaba clusterdata cluster-trace-gpu-v2023 (CC BY 4.0); Weng et al., USENIX ATC'23.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

from bench import repack_bound
from bench.packing_generated import generated_clusters
from bench.packing_holdout import leave_one_out, mixes
from bench.packing_rehearsal import rehearsal_speed
from gpuwise.decide.packing.registry import POLICIES
from gpuwise.simulate.cluster_trace import load_nodes, load_pods
from gpuwise.simulate.experiment import run_policy

OPENB = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "openb"
BUDGET_SECONDS = 60.0
REFERENCE_FGD_SECONDS = 35 * 60


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default="default", help="default, gpushare20, multigpu20, ... (default: default)")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=42)
    parser.add_argument("--policies", default="all")
    parser.add_argument("--baseline", default="bestfit", choices=list(POLICIES))
    parser.add_argument("--repack", action="store_true", help="also time gpuwise with repacking (2 migrations)")
    parser.add_argument("--data", type=Path, default=OPENB)
    parser.add_argument(
        "--leave-one-out", action="store_true", help="score gpuwise on traces its parameters were not chosen on"
    )
    parser.add_argument(
        "--repack-bound", action="store_true", help="repacking's gain and restarts against a re-solve from scratch"
    )
    parser.add_argument("--mixes", help="traces (shared or generated, e.g. multigpu30) to pair gpuwise with fgd on")
    parser.add_argument(
        "--draw", default="0", help="with --mixes: the generated traces' resampling seed, or several (0,1,2)"
    )
    parser.add_argument(
        "--generated-clusters", type=int, metavar="CASES", help="gpuwise against FGD on this many generated clusters"
    )
    parser.add_argument("--models", default="2,3", help="with --generated-clusters: GPU models per cluster")
    parser.add_argument(
        "--jobs", type=int, default=1, help="processes for --leave-one-out, --mixes, --generated-clusters"
    )
    parser.add_argument(
        "--cache", type=Path, help="--leave-one-out and --mixes keep each seed's figures here and resume"
    )
    parser.add_argument(
        "--rehearsal-nodes", metavar="SIZES", help="time gpuwise's rehearsal on clusters of these many nodes (1,10,50)"
    )
    args = parser.parse_args(argv)
    if args.leave_one_out:
        return leave_one_out(args.data, args.cache, args.jobs)
    if args.generated_clusters:
        return generated_clusters(args.generated_clusters, [int(m) for m in args.models.split(",")], args.jobs)
    if args.mixes:
        seeds = list(range(args.first_seed, args.first_seed + args.seeds))
        draws = [int(draw) for draw in args.draw.split(",")]
        return mixes(args.data, args.mixes.split(","), draws, seeds, jobs=args.jobs, cache=args.cache)

    nodes = load_nodes(args.data / "openb_node_list_gpu_node.csv")
    pods = load_pods(args.data / f"openb_pod_list_{args.trace}.csv", nodes)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    if args.rehearsal_nodes:
        return rehearsal_speed(nodes, pods, [int(size) for size in args.rehearsal_nodes.split(",")])
    if args.repack_bound:
        repack_bound.report(nodes, pods, args.trace, seeds)
        return 0
    policies = list(POLICIES) if args.policies == "all" else args.policies.split(",")
    policies = [args.baseline, *(p for p in policies if p != args.baseline)]  # the baseline first
    runs = [(policy, 0) for policy in policies] + ([("gpuwise", 2)] if args.repack else [])

    cpu = platform.processor() or platform.machine()
    print(f"machine: {cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"trace: {args.trace} ({len(pods)} pods, {len(nodes)} nodes), seeds {seeds[0]}..{seeds[-1]}")
    header = (
        f"{'policy':<18} {'s/seed':>7} {'min':>6} {'max':>6} {'x ' + args.baseline:>11} {'alloc@100':>9} {'budget':>7}"
    )
    print(header)
    print("-" * len(header))
    means: dict[str, float] = {}
    for policy, migrations in runs:
        result = run_policy(nodes, pods, policy, seeds, max_migrations=migrations)
        seconds = [seed.seconds for seed in result.seeds]
        mean = sum(seconds) / len(seconds)
        means[result.label] = mean
        ratio = f"{mean / means[args.baseline]:.2f}"
        verdict = "ok" if max(seconds) <= BUDGET_SECONDS else "OVER"
        print(
            f"{result.label:<18} {mean:>7.2f} {min(seconds):>6.2f} {max(seconds):>6.2f} {ratio:>11} "
            f"{result.mean('alloc_at_100'):>9.2f} {verdict:>7}"
        )
    if "fgd" in means:
        speedup = REFERENCE_FGD_SECONDS / means["fgd"]
        print(f"\nreference Go simulator, one FGD seed: ~{REFERENCE_FGD_SECONDS // 60} min, {speedup:.0f}x this")
    return 0


if __name__ == "__main__":
    sys.exit(main())
