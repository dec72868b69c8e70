"""gpuwise's placement policy: two-horizon fragmentation at an even resolution.

It keeps FGD's shape — place where fragmentation grows least, and among placements that are
about as good, take the node that comes first in a fixed order — and changes two things:

1. **What counts as fragmented.** FGD asks whether the *next* task could use the free capacity.
   That is optimistic about gaps: a free GPU is "usable" by an 810-milli task even though 190
   milli of it will then never be used, and three free GPUs are "usable" by a task although the
   node has CPU for only one. gpuwise also asks what would stay idle if tasks kept coming until
   the node is full (:class:`~gpuwise.decide.packing.fragmentation.FillFragmentation`), and
   weighs both horizons equally
   (:class:`~gpuwise.decide.packing.fragmentation.TwoHorizonFragmentation`).
2. **When two placements are "about as good".** FGD's integer sigmoid score lumps together
   growths that differ by 40 milli near zero but by 100+ milli for large growths; gpuwise compares
   growth at an even 40-milli resolution (the finest FGD uses), so large differences are never
   mistaken for ties, while small ones still are — and ties go to the first node in a fixed
   order, which keeps load consolidated and leaves whole nodes free for multi-GPU pods.

One exception: where multi-GPU shapes ask for ``MULTI_GPU_SHARE_FOR_FGD`` or more of the target
workload's GPU, gpuwise places as FGD does. On such mixes the fill horizon costs instead of paying
(README, "Where the lead ends": generated mixes from the default trace lose 0.1-0.3 points to FGD
from a 25 % share, and no weight or resolution of the two-horizon measure probed beats FGD there).

Measured with ``gpuwise simulate packing`` on the Alibaba trace, it allocates more than FGD on
the default, GPU-sharing-heavy and multi-GPU-heavy workloads, by a few tenths of a point: at
95 % allocated, most of what stays idle is leftovers no placement can avoid (an 810-milli pod
always leaves 190). Neither choice is a knife edge: weights 0.3-0.7 between the horizons and
resolutions of 25-50 milli all beat FGD on all three workloads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwise.decide.packing.cluster import Placement, PodRequest
from gpuwise.decide.packing.fit import candidates, placement
from gpuwise.decide.packing.fragmentation import (
    EVEN_WEIGHT,
    FragmentationIndex,
    TwoHorizonFragmentation,
    checked_weight,
)
from gpuwise.decide.packing.policies import FragmentationGradientPolicy, PlacementContext, best_candidate
from gpuwise.decide.packing.state import ClusterState

RESOLUTION_MILLI = 40.0
"""Fragmentation growths closer than this are treated as equal."""

MULTI_GPU_SHARE_FOR_FGD = 0.225
"""From this share of the workload's GPU asked by multi-GPU shapes on, place as FGD. Halfway between
the generated mixes where the two horizons last led (multigpu25: 0.20) and first lost (multigpu30:
0.25), seeds 0-3; the shared traces are at 0, 0 and 0.15, so no figure measured on them moves."""


@dataclass(frozen=True)
class GpuwiseParameters:
    """The policy's two parameters. The defaults are the ones every figure in the README uses."""

    next_pod_weight: float = EVEN_WEIGHT
    resolution_milli: float = RESOLUTION_MILLI
    fgd_from_multi_gpu_share: float = MULTI_GPU_SHARE_FOR_FGD

    def __post_init__(self) -> None:
        checked_weight(self.next_pod_weight)
        if not self.resolution_milli > 0:
            raise ValueError(f"resolution_milli must be positive, got {self.resolution_milli}")
        if not 0 < self.fgd_from_multi_gpu_share <= 1:
            raise ValueError(f"fgd_from_multi_gpu_share must be in (0, 1], got {self.fgd_from_multi_gpu_share}")

    @property
    def label(self) -> str:
        switch = self.fgd_from_multi_gpu_share
        return f"gpuwise(w={self.next_pod_weight:g},r={self.resolution_milli:g}" + (
            ")" if switch == MULTI_GPU_SHARE_FOR_FGD else f",fgd>={switch:g})"
        )


class GpuwisePolicy:
    name = "gpuwise"

    def __init__(self, context: PlacementContext, parameters: GpuwiseParameters | None = None) -> None:
        self.parameters = parameters or GpuwiseParameters()
        as_fgd = context.workload.multi_gpu_share >= self.parameters.fgd_from_multi_gpu_share
        self._fgd = FragmentationGradientPolicy(context) if as_fgd else None
        measure = TwoHorizonFragmentation(context.workload, self.parameters.next_pod_weight)
        self.fragmentation = FragmentationIndex(measure, context.state)
        self.node_rank = context.node_rank

    @property
    def as_fgd(self) -> bool:
        """Whether this workload's multi-GPU share makes the policy place as FGD does."""
        return self._fgd is not None

    def __call__(self, state: ClusterState, request: PodRequest, rng: np.random.Generator) -> Placement | None:
        if self._fgd is not None:
            return self._fgd(state, request, rng)
        cands = candidates(state, request)
        if not len(cands):
            return None
        growth = self.fragmentation.increase(cands)
        chosen = best_candidate(cands, -np.round(growth / self.parameters.resolution_milli), self.node_rank)
        return placement(state, request, int(cands.node[chosen]), int(cands.gpu[chosen]))
