"""MIG GPU-instance profiles per GPU model, as NVIDIA's MIG user guide lists them.

Every MIG-capable GPU here has 7 compute slices and 8 memory slices. A GPU instance profile
``<g>g.<mem>gb`` takes ``g`` compute slices and a fixed number of memory slices, may exist at most
``max_count`` times on one GPU, and may only *start* at certain memory slices (its placements:
``nvidia-smi mig -lgipp``). Placement is what makes MIG a packing problem: two 3g instances fit
only at memory slices 0 and 4, and a 4g instance only at 0.

The media-extension profiles (``+me``, ``+gfx``) are left out: they have the same geometry as
their plain profile, and gpuwise never asks for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwise.hardware.model_names import model_key

COMPUTE_SLICES = 7
MEMORY_SLICES = 8


@dataclass(frozen=True)
class MigProfile:
    name: str
    compute_slices: int
    memory_slices: int
    max_count: int
    starts: tuple[int, ...]
    """Memory slices an instance of this profile may start at."""

    @property
    def memory_gb(self) -> int:
        """The memory in the profile's name (decimal GB, as NVIDIA names them: ``3g.40gb`` → 40)."""
        return int(self.name.rsplit(".", 1)[1].removesuffix("gb"))

    @property
    def resource_name(self) -> str:
        """The extended resource pods request under the device plugin's ``mixed`` strategy."""
        return f"nvidia.com/mig-{self.name}"


@dataclass(frozen=True)
class GpuModel:
    name: str
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        known = ", ".join(p.name for p in self.profiles)
        raise UnknownProfileError(f"{self.name} has no MIG profile {name!r}; its profiles are: {known}")


class UnknownGpuModelError(ValueError):
    pass


class UnknownProfileError(ValueError):
    pass


def _family(name: str, small: int, medium: int, large: int, full: int) -> GpuModel:
    """The six-profile MIG family every model here shares, with its memory sizes in GB:
    ``small`` for one memory slice, ``medium`` for two, ``large`` for four, ``full`` for eight."""
    return GpuModel(
        name,
        (
            MigProfile(f"1g.{small}gb", 1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
            MigProfile(f"1g.{medium}gb", 1, 2, 4, (0, 2, 4, 6)),
            MigProfile(f"2g.{medium}gb", 2, 2, 3, (0, 2, 4)),
            MigProfile(f"3g.{large}gb", 3, 4, 2, (0, 4)),
            MigProfile(f"4g.{large}gb", 4, 4, 1, (0,)),
            MigProfile(f"7g.{full}gb", 7, 8, 1, (0,)),
        ),
    )


GPU_MODELS: dict[str, GpuModel] = {
    model.name: model
    for model in (
        _family("A100-40GB", 5, 10, 20, 40),
        _family("A100-80GB", 10, 20, 40, 80),
        _family("H100-80GB", 10, 20, 40, 80),
        _family("H100-94GB", 12, 24, 47, 94),
        _family("H200-141GB", 18, 35, 71, 141),
    )
}

_ALIASES = {
    "NVIDIA A100-SXM4-40GB": "A100-40GB",
    "NVIDIA A100-PCIE-40GB": "A100-40GB",
    "NVIDIA A100-SXM4-80GB": "A100-80GB",
    "NVIDIA A100 80GB PCIE": "A100-80GB",
    "NVIDIA H100 80GB HBM3": "H100-80GB",
    "NVIDIA H100 PCIE": "H100-80GB",
    "NVIDIA H100 NVL": "H100-94GB",
    "NVIDIA H200": "H200-141GB",
    "NVIDIA H200 NVL": "H200-141GB",
}
"""NVML product names (``nvidia.com/gpu.product`` labels use the same, with dashes)."""

_BY_KEY = {model_key(product): GPU_MODELS[known] for product, known in _ALIASES.items()} | {
    model_key(name): model for name, model in GPU_MODELS.items()
}
"""Every table by its short name and its NVML product names, as `model_key` spells them: the
planners look a GPU's model up for each GPU they plan."""


def gpu_model(name: str) -> GpuModel:
    """The MIG profile table of a GPU model, by short name or NVML product name."""
    if (model := _BY_KEY.get(model_key(name))) is not None:
        return model
    raise UnknownGpuModelError(
        f"no MIG profile table for GPU model {name!r}; known models: {', '.join(GPU_MODELS)} "
        f"(or their NVML product names, e.g. {next(iter(_ALIASES))!r})"
    )
