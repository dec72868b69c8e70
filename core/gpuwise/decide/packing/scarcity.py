"""How contended each GPU model's free capacity is, where some pods accept only some models.

Fragmentation measures ask whether free capacity is *usable*; they do not ask by *whom*. Where
some pods accept only some GPU models (``gpu_spec`` in the Alibaba trace: a third of the pods of
its gpuspec33 workload ask for a T4, a P100, ...), a pod that could run anywhere but lands on a
model that others can only run on takes capacity those others will be turned away for. On
gpuspec33 the two fragmentation horizons did exactly that: at 100 % arrived they had allocated
1.3 points less than FGD, having turned away more of the pods bound to P100s, V100s and T4s,
while 17 % of the cluster's most common model (G2) stayed free (README, "Held out").

So a placement also pays for the contention on its model. Each shape of the expected mix spreads
its GPU demand over the free capacity it accepts; a model's *pressure* is the demand that lands,
that way, on each of its free milli, over all shapes that accept it. A candidate's cost is the
GPU milli it takes times its model's pressure relative to the most pressed model: a pod on the
most contended model pays its whole size, on a model half as contended, half of it. It is added
to the fragmentation growth, in the same unit, so no weight is tuned.

Where every shape accepts every model, every model is equally pressed and no candidate pays more
than another: the cost changes nothing, and is not computed.
"""

from __future__ import annotations

import numpy as np

from gpuwise.decide.packing.cluster import FloatArray
from gpuwise.decide.packing.fit import Candidates
from gpuwise.decide.packing.fragmentation import TargetWorkload
from gpuwise.decide.packing.state import ClusterState


class ModelPressure:
    """The contention cost of candidate placements on one cluster state, for one expected mix."""

    def __init__(self, mix: TargetWorkload, state: ClusterState) -> None:
        self.state = state
        self._demand: FloatArray = mix.weight * mix.total_gpu_milli
        self._allowed: FloatArray = mix.allowed.astype(np.float64)
        # Free milli per node, recomputed only where a node's revision moved (it is read once a
        # placement, and a placement changes one node), and the answer until one does.
        self._idle = np.zeros(len(state.nodes), dtype=np.int64)
        self._seen = np.full(len(state.nodes), -1, dtype=np.int64)
        self._relative: FloatArray = np.zeros(len(state.nodes.models))

    @classmethod
    def where_it_matters(cls, mix: TargetWorkload, state: ClusterState) -> ModelPressure | None:
        """The pressure, or None where no GPU shape of ``mix`` is bound to some models only."""
        asks_gpu = mix.total_gpu_milli > 0
        if len(state.nodes.models) < 2 or mix.allowed[asks_gpu].all():
            return None
        return cls(mix, state)

    def relative(self) -> FloatArray:
        """Per GPU model, its pressure over the most pressed model's, in [0, 1]."""
        state, nodes = self.state, self.state.nodes
        stale = np.flatnonzero(self._seen != state.revision)
        if len(stale):
            self._idle[stale] = np.clip(state.gpu_free[stale], 0, None).sum(axis=1)
            self._seen[stale] = state.revision[stale]
            free = np.bincount(nodes.model, weights=self._idle, minlength=len(nodes.models))
            reach = self._allowed @ free
            per_milli = np.divide(self._demand, reach, out=np.zeros_like(self._demand), where=reach > 0)
            pressure = per_milli @ self._allowed
            top = pressure.max()
            self._relative = pressure / top if top > 0 else pressure
        return self._relative

    def cost(self, candidates: Candidates, gpu_milli: int) -> FloatArray:
        """What each candidate placement of a pod of ``gpu_milli`` in all pays for its model's contention."""
        cost: FloatArray = gpu_milli * self.relative()[self.state.nodes.model[candidates.node]]
        return cost
