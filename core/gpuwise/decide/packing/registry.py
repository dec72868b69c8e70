"""Policies by name, for the CLI, the simulator and the operator's configuration."""

from __future__ import annotations

from collections.abc import Callable

from gpuwise.decide.packing.gpuwise_policy import GpuwiseParameters, GpuwisePolicy
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


PolicyChoice = str | GpuwiseParameters
"""A policy by name, or gpuwise's policy with other parameters than its defaults."""


def policy_label(choice: PolicyChoice) -> str:
    return choice.label if isinstance(choice, GpuwiseParameters) else choice


def make_policy(name: PolicyChoice, context: PlacementContext) -> Policy:
    """The policy called ``name`` (or gpuwise's with the given parameters), built for ``context``."""
    if isinstance(name, GpuwiseParameters):
        return GpuwisePolicy(context, name)
    try:
        factory = POLICIES[name]
    except KeyError:
        raise UnknownPolicyError(f"unknown policy {name!r}; choose one of: {', '.join(POLICIES)}") from None
    return factory(context)
