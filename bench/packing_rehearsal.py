"""How long gpuwise's rehearsal takes on small clusters, beside one policy rehearsed alone.

    .venv/bin/python -m bench.packing --rehearsal-nodes 1,10,50 [--trace default]

A cluster of N copies of the trace's most common GPU node sees the trace's pods that accept the
node's GPU model. gpuwise's policy is built on it empty, as Pack and the simulator build it: it
rehearses FGD and the two horizons at each weight it tries before it places anything
(`gpuwise.decide.packing.rehearsal.compare_all`), and more draws where the leader is close to
FGD. The baseline, in the same process and on the same cluster, is FGD alone placing the
rehearsal's fewest arrivals (`rehearse` with one policy): the ratio is how many of those the
choice costs, whatever the machine's speed. On a small cluster a draw is a few dozen pods, so
it takes the most draws allowed (`MAX_DRAWS`), and the cost is per placement, not per pod.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

import numpy as np

from gpuwise.decide.packing.cluster import Nodes, Pods
from gpuwise.decide.packing.gpuwise_policy import REHEARSED_ARRIVALS, GpuwisePolicy
from gpuwise.decide.packing.policies import FragmentationGradientPolicy
from gpuwise.decide.packing.rehearsal import rehearse
from gpuwise.simulate.replay import empty_cluster_context


def copies_of_commonest_node(nodes: Nodes, count: int) -> Nodes:
    """``count`` copies of the most common GPU node of ``nodes`` (CPU, memory, GPUs and model)."""
    shapes = Counter(
        (int(cpu), int(memory), int(gpus), int(model))
        for cpu, memory, gpus, model in zip(nodes.cpu_milli, nodes.memory_mib, nodes.gpus, nodes.model, strict=True)
        if gpus > 0
    )
    if not shapes:
        raise ValueError("the node list has no GPU node")
    cpu, memory, gpus, model = shapes.most_common(1)[0][0]
    return Nodes(
        names=tuple(f"node-{index}" for index in range(count)),
        cpu_milli=np.full(count, cpu, dtype=np.int64),
        memory_mib=np.full(count, memory, dtype=np.int64),
        gpus=np.full(count, gpus, dtype=np.int64),
        model=np.full(count, model, dtype=np.int64),
        models=nodes.models,
    )


def rehearsal_speed(nodes: Nodes, pods: Pods, sizes: Sequence[int]) -> int:
    if not sizes or min(sizes) < 1:
        raise SystemExit(f"--rehearsal-nodes takes cluster sizes of 1 node or more, got {list(sizes)}")
    node = copies_of_commonest_node(nodes, 1)
    model = int(node.model[0])
    accepting = pods.take(np.flatnonzero(pods.allowed[pods.spec, model]))
    print(
        f"node: {node.gpus[0]} x {node.models[model]} GPUs, {node.cpu_milli[0] // 1000} CPUs; "
        f"{len(accepting)} of {len(pods)} pods accept it"
    )
    header = f"{'nodes':>5} {'choice s':>9} {'fgd alone s':>12} {'ratio':>6}  placed as"
    print(header)
    print("-" * len(header))
    for size in sizes:
        cluster = copies_of_commonest_node(nodes, size)
        context = empty_cluster_context(cluster, accepting, np.random.default_rng(0))
        started = time.perf_counter()
        rehearse(context, [FragmentationGradientPolicy], REHEARSED_ARRIVALS)
        alone = time.perf_counter() - started
        started = time.perf_counter()
        policy = GpuwisePolicy(context)  # a fresh cluster each size: no rehearsed choice to reuse
        chosen = time.perf_counter() - started
        placed_as = "FGD" if policy.next_pod_weight is None else f"w={policy.next_pod_weight:g}"
        print(f"{size:>5} {chosen:>9.2f} {alone:>12.2f} {chosen / alone:>6.2f}  {placed_as}")
    return 0
