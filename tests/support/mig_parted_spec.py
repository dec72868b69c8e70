"""The `mig-parted` config format (v1) as NVIDIA documents it, read the way MIG Manager applies it.

Deliberately written apart from gpuwise.decide.mig_parted, so the tests check what gpuwise writes
against the format rather than against itself: a document is `version: v1` and `mig-configs`
(nothing else); a config is a list of device entries, each `devices` (`all` or a list of GPU
indexes), `mig-enabled` (a boolean) and, when enabled, `mig-devices` (instances per profile of
the GPU's model); every GPU in at most one entry. What a GPU holds must be one of the model's
valid geometries (the enumeration in gpuwise.decide.mig_geometry, itself checked against
NVIDIA's placements and a MILP in tests/decide).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import yaml

from gpuwise.decide.mig_geometry import geometries
from gpuwise.hardware.mig_profiles import gpu_model

Layout = dict[str, int] | None
"""One GPU after a config: instances per profile, or None with MIG off."""


class SpecError(ValueError):
    """What nvidia-mig-parted would refuse; the message says why."""


def configs(text: str) -> dict[str, Any]:
    document = yaml.safe_load(text)
    if not isinstance(document, dict) or set(document) != {"version", "mig-configs"}:
        raise SpecError(f"a config file has exactly version and mig-configs, got {document!r}")
    if document["version"] != "v1":
        raise SpecError(f"unknown version {document['version']!r}")
    if not isinstance(document["mig-configs"], dict):
        raise SpecError("mig-configs is not a mapping")
    return document["mig-configs"]


def apply(text: str, name: str, product: str, gpus: int, before: list[Layout]) -> list[Layout]:
    """What config `name` of `text` makes of a node's `gpus` GPUs (`product`), which were `before`."""
    model = gpu_model(product)
    found = configs(text)
    if name not in found:
        raise SpecError(f"no config named {name!r}")
    entries = found[name]
    if not isinstance(entries, list) or not entries:
        raise SpecError(f"{name}: a config is a non-empty list of device entries")
    after = list(before)
    seen: set[int] = set()
    for entry in entries:
        if not isinstance(entry, dict) or not set(entry) <= {"devices", "mig-enabled", "mig-devices"}:
            raise SpecError(f"{name}: unexpected device entry {entry!r}")
        devices = entry.get("devices")
        if devices == "all":
            indexes = list(range(gpus))
        elif isinstance(devices, list) and all(type(i) is int for i in devices):
            indexes = devices
        else:
            raise SpecError(f"{name}: devices is {devices!r}")
        if not isinstance(entry.get("mig-enabled"), bool):
            raise SpecError(f"{name}: mig-enabled is {entry.get('mig-enabled')!r}")
        layout: Layout = None
        if entry["mig-enabled"]:
            wanted = entry.get("mig-devices", {})
            if not isinstance(wanted, dict) or not all(type(n) is int and n >= 0 for n in wanted.values()):
                raise SpecError(f"{name}: mig-devices is {wanted!r}")
            for profile in wanted:
                model.profile(profile)  # raises for a profile the model has not
            layout = {p: n for p, n in wanted.items() if n}
            if not any(Counter(i.profile for i in g) == Counter(layout) for g in geometries(model)):
                raise SpecError(f"{name}: no {model.name} GPU holds {layout}")
        elif "mig-devices" in entry:
            raise SpecError(f"{name}: mig-devices on GPUs with MIG disabled")
        for index in indexes:
            if not 0 <= index < gpus or index in seen:
                raise SpecError(f"{name}: GPU index {index} is out of range or listed twice")
            seen.add(index)
            after[index] = layout
    return after
