"""Clusters and traces no real trace describes: small, random, and many of them.

Placement is measured on the Alibaba cluster and its trace family; a policy that only holds
there may still lose on a cluster of a few dozen nodes of other sizes and mixes, which is what
Pack sees. These are drawn from a seed, so a case is the same cluster everywhere: the rehearsal
tests pick cases from them, and ``python -m bench.packing --generated-clusters`` scores gpuwise
against FGD over many.
"""

from __future__ import annotations

import numpy as np

from gpuwise.decide.packing.cluster import MILLI, Nodes, Pods

MODELS = ("A100", "V100", "T4")


def generated(seed: int, nodes_count: int = 40, pods_count: int = 300, models: int = 1) -> tuple[Nodes, Pods]:
    """A cluster of 2-, 4- and 8-GPU nodes and a trace of 3-6 pod shapes, all drawn from ``seed``.

    With ``models`` > 1, nodes have one of that many GPU models and about a third of the GPU
    shapes accept only one of them, as ``gpu_spec`` does in the Alibaba trace."""
    rng = np.random.default_rng(seed)
    cpu_milli = (rng.choice([32, 64, 96], size=nodes_count) * 1000).tolist()
    gpus = rng.choice([2, 4, 8], size=nodes_count).tolist()
    shapes = []
    for _ in range(rng.integers(3, 7)):
        kind = rng.choice(["share", "one", "multi", "cpu"], p=[0.35, 0.15, 0.4, 0.1])
        cpu = int(rng.choice([2, 4, 8, 12, 16])) * 1000
        if kind == "share":
            shapes.append((cpu, 1, int(rng.choice([200, 250, 300, 400, 500, 600, 700, 810]))))
        elif kind == "one":
            shapes.append((cpu, 1, MILLI))
        elif kind == "multi":
            shapes.append((cpu * 2, int(rng.choice([2, 4, 8])), MILLI))
        else:
            shapes.append((cpu, 0, 0))
    picks = rng.choice(len(shapes), size=pods_count, p=rng.dirichlet(np.ones(len(shapes))))
    # Drawn last, so that one model's clusters are the ones they were before models were drawn.
    node_models = rng.choice(MODELS[:models], size=nodes_count).tolist() if models > 1 else ["A100"] * nodes_count
    present = sorted(set(node_models))
    accepted = [
        (str(rng.choice(present)),) if models > 1 and shape[1] and rng.random() < 1 / 3 else () for shape in shapes
    ]
    nodes = Nodes.build(
        names=[f"n{i}" for i in range(nodes_count)],
        cpu_milli=cpu_milli,
        memory_mib=[1 << 20] * nodes_count,
        gpus=gpus,
        models=node_models,
    )
    pods = Pods.build(
        names=[f"p{i}" for i in range(pods_count)],
        cpu_milli=[shapes[k][0] for k in picks],
        memory_mib=[0] * pods_count,
        num_gpu=[shapes[k][1] for k in picks],
        gpu_milli=[shapes[k][2] for k in picks],
        gpu_models=[accepted[k] for k in picks],
        models=nodes.models,
    )
    return nodes, pods
