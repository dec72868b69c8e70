"""What repacking can add to FGD at 130 % arrived, and how many restarts it costs.

    .venv/bin/python -m bench.packing --repack-bound [--trace default] [--seeds 3]

Per seed (the reference arrival order), side by side:

- FGD and gpuwise without migrations, and gpuwise letting each admission that fits nowhere move up
  to 2, 8 and 32 running pods (`--repack`): allocation at 130 % arrived, pods moved, and pods
  moved per point the moves add (over gpuwise without them);
- **re-solves from scratch**: FGD's own run to the end, then every pod it placed packed again by
  FGD into an empty cluster (in arrival order, or largest first), then the pods it turned away.
  A running job is never dropped to make room, so a re-solve that cannot place one of them is
  not a plan at all; it says so. These are not optima, but they move pods freely and choose with
  hindsight which turned-away pods to admit. Their cost is the running pods whose node changes
  (a checkpointed restart each); nodes alike in every resource are matched up greedily first,
  so a pod that merely swaps between twins does not count.
- where FGD's free GPU is at the end: whole free GPUs, and partial gaps smaller than the
  smallest pod it turned away (no move of other pods fills those; only other pods could).

Allocation is the final one for a re-solve and FGD's own final figure beside it (the end of the
arrivals is 130 %), so the re-solve's gain compares like with like.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpuwise.decide.packing.cluster import MILLI, Nodes, Pods
from gpuwise.decide.packing.fragmentation import TargetWorkload
from gpuwise.decide.packing.policies import PlacementContext
from gpuwise.decide.packing.registry import make_policy
from gpuwise.decide.packing.state import ClusterState
from gpuwise.simulate.arrivals import arrival_order
from gpuwise.simulate.experiment import run_seed

MIGRATION_LIMITS = (2, 8, 32)
ORDERS = ("arrival order", "largest first")


@dataclass(frozen=True)
class Resolve:
    before: float  # FGD's final allocation, % of capacity
    after: dict[str, float]  # each re-solve's, by order
    moved: dict[str, int]  # running pods whose node changed
    left_out: dict[str, int]  # running pods the re-solve could not place
    running: int  # pods FGD had running at the end
    whole_free: float  # % of capacity in whole free GPUs at FGD's end
    small_gaps: float  # % of capacity in partial gaps smaller than the smallest pod turned away


def percent(state: ClusterState) -> float:
    return 100.0 * state.allocated_gpu_milli / state.nodes.gpu_capacity_milli


def resolve(nodes: Nodes, pods: Pods, seed: int) -> Resolve:
    """FGD's run for `seed` to the end, then the re-solve described above."""
    rng = np.random.default_rng(seed)
    order = arrival_order(pods, nodes.gpu_capacity_milli, rng)
    workload = TargetWorkload.from_pods(pods)
    requests = {event: pods.request(int(pod)) for event, pod in enumerate(order)}

    def fgd_into(state: ClusterState, events: Sequence[int]) -> list[int]:
        """Place each event's pod where FGD puts it, in order; the events that fit nowhere."""
        policy = make_policy("fgd", PlacementContext.create(state, workload, rng))
        missed = []
        for event in events:
            where = policy(state, requests[event], rng)
            if where is None:
                missed.append(event)
            else:
                state.bind(event, requests[event], where)
        return missed

    online = ClusterState(nodes)
    turned_away = fgd_into(online, range(len(order)))

    def key(name: str) -> Callable[[int], tuple[int, ...]]:
        if name == "arrival order":
            return lambda event: (event,)
        return lambda event: (-requests[event].total_gpu_milli, -requests[event].cpu_milli, event)

    after: dict[str, float] = {}
    moved: dict[str, int] = {}
    left_out: dict[str, int] = {}
    for order_name in ORDERS:
        fresh = ClusterState(nodes)
        # One policy for both passes, as the re-solve is one placement run: running pods, then the rest.
        events = sorted(online.bindings, key=key(order_name)) + sorted(turned_away, key=key(order_name))
        left_out[order_name] = sum(1 for event in fgd_into(fresh, events) if event in online.bindings)
        after[order_name], moved[order_name] = percent(fresh), restarts(nodes, online, fresh)
    free = np.clip(online.gpu_free, 0, None)
    smallest = min((requests[e].gpu_milli for e in turned_away if requests[e].num_gpu), default=MILLI)
    capacity = nodes.gpu_capacity_milli
    return Resolve(
        before=percent(online),
        after=after,
        moved=moved,
        left_out=left_out,
        running=len(online.bindings),
        whole_free=100.0 * free[free == MILLI].sum() / capacity,
        small_gaps=100.0 * free[(free > 0) & (free < smallest)].sum() / capacity,
    )


def restarts(nodes: Nodes, before: ClusterState, after: ClusterState) -> int:
    """Pods running in both whose node changed, once twin nodes are matched greedily (most shared
    pods first) so that the re-solve's arbitrary choice among twins costs nothing."""
    twins: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for node in range(len(nodes)):
        shape = (int(nodes.cpu_milli[node]), int(nodes.memory_mib[node]), int(nodes.gpus[node]), int(nodes.model[node]))
        twins[shape].append(node)
    shared: dict[tuple[int, int], int] = defaultdict(int)  # (node after, node before) -> pods on both
    for pod, binding in after.bindings.items():
        if pod in before.bindings:
            shared[binding.placement.node, before.bindings[pod].placement.node] += 1
    same_shape = {node: shape for shape, members in twins.items() for node in members}
    relabel: dict[int, int] = {}
    taken: set[int] = set()
    for (new, old), _ in sorted(shared.items(), key=lambda item: -item[1]):
        if new in relabel or old in taken or same_shape[new] != same_shape[old]:
            continue
        relabel[new] = old
        taken.add(old)
    return sum(
        1
        for pod, binding in after.bindings.items()
        if pod in before.bindings and relabel.get(binding.placement.node) != before.bindings[pod].placement.node
    )


def report(nodes: Nodes, pods: Pods, trace: str, seeds: Sequence[int]) -> None:
    print(f"trace {trace}, seeds {seeds[0]}..{seeds[-1]}: allocation at 130 % arrived, gain over FGD, pods moved")
    fgd = [run_seed(nodes, pods, "fgd", seed).alloc_at_130 for seed in seeds]
    rows: list[tuple[str, list[float], list[float]]] = []
    for limit in (0, *MIGRATION_LIMITS):
        runs = [run_seed(nodes, pods, "gpuwise", seed, max_migrations=limit) for seed in seeds]
        label = "gpuwise" + (f", up to {limit} a pod" if limit else "")
        rows.append((label, [r.alloc_at_130 for r in runs], [float(r.migrations) for r in runs]))
    bound = [resolve(nodes, pods, seed) for seed in seeds]
    header = f"{'placement':<34} {'alloc@130':>9} {'gain':>6} {'moved':>7} {'moved/point':>11}"
    print("gain: over FGD; moved/point: pods moved per point the moves add (over gpuwise without moves)")
    print(header)
    print("-" * len(header))
    print(f"{'fgd':<34} {np.mean(fgd):>9.2f} {0:>6.2f} {0:>7.0f} {'-':>11}")
    unmoved = rows[0][1]  # gpuwise without migrations: what the moves add to
    for label, alloc, moves in rows:
        gain = float(np.mean(np.subtract(alloc, fgd)))
        added = float(np.mean(np.subtract(alloc, unmoved)))
        print(f"{label:<34} {np.mean(alloc):>9.2f} {gain:>+6.2f} {np.mean(moves):>7.1f} {_per_point(moves, added):>11}")
    for order in ORDERS:
        gain = float(np.mean([b.after[order] - b.before for b in bound]))
        moves = [float(b.moved[order]) for b in bound]
        left = sum(b.left_out[order] for b in bound)
        label = f"re-solve, {order}"
        note = f"  leaves {left} running pods out: not a plan" if left else ""
        after = np.mean([b.after[order] for b in bound])
        print(f"{label:<34} {after:>9.2f} {gain:>+6.2f} {np.mean(moves):>7.0f} {_per_point(moves, gain):>11}{note}")
    running = np.mean([b.running for b in bound])
    print(
        f"\n{running:.0f} pods running at FGD's end ({np.mean([b.before for b in bound]):.2f} % allocated); "
        f"free: {np.mean([b.whole_free for b in bound]):.2f} % of capacity in whole GPUs, "
        f"{np.mean([b.small_gaps for b in bound]):.2f} % in gaps smaller than any GPU pod turned away"
    )


def _per_point(moved: Sequence[float], gain: float) -> str:
    return f"{np.mean(moved) / gain:.0f}" if gain > 0.005 and np.mean(moved) else "-"
