"""Policies by name, for the CLI, the simulator and the operator's configuration."""

from __future__ import annotations

from collections.abc import Callable

from gpuwise.decide.packing.gpuwise_policy import GpuwisePolicy
from gpuwise.decide.packing.policies import (
    BestFitPolicy,
    FragmentationGradientPolicy,
    PlacementContext,
    Policy,
    RandomPolicy,
)

POLICIES: dict[str, Callable[[PlacementContext], Policy]] = {
    "random": RandomPolicy,
    "bestfit": BestFitPolicy,
    "fgd": FragmentationGradientPolicy,
    "gpuwise": GpuwisePolicy,
}


class UnknownPolicyError(ValueError):
    pass


def make_policy(name: str, context: PlacementContext) -> Policy:
    """The policy called ``name``, built for ``context``."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise UnknownPolicyError(f"unknown policy {name!r}; choose one of: {', '.join(POLICIES)}") from None
    return factory(context)
