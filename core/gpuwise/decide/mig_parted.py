"""MIG Manager's configs as per-GPU layouts, and a node's repartition as a config of its own.

NVIDIA's MIG Manager applies the `mig-parted` config a node's `nvidia.com/mig.config` label names,
from the one ConfigMap its ClusterPolicy names (`migManager.config.name`, key `config.yaml`)::

    version: v1
    mig-configs:
      <name>:
        - devices: all | [0, 1, ...]     # GPU indexes on the node
          mig-enabled: true | false
          mig-devices: {"1g.10gb": 2, "3g.40gb": 1}   # instances per GPU of those devices

A named config is the same everywhere it is used, so a change for one job made through one
(`all-3g.40gb`) recreates every GPU of the node. Instead gpuwise reads the node's layout *from the
config it runs* (:func:`layouts`: the ConfigMap is the truth of what each name means; GPU Feature
Discovery's `nvidia.com/mig-<profile>.count` labels add up a node and say nothing per GPU), plans
the fewest instance changes that serve the demand next to what other pods use (:func:`replan`,
with the MIG planner), and writes that layout as a config named for the node and its content
(:func:`config_name`, :func:`entry`). GPUs the plan does not need keep their entry unchanged.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import yaml

from gpuwise.decide.mig_geometry import GpuState, MigInstance, NoGeometryError, plan_gpu, plan_node
from gpuwise.hardware.mig_profiles import GpuModel, UnknownProfileError

VERSION: Final = "v1"
CONFIG_KEY: Final = "config.yaml"  # the ConfigMap key MIG Manager reads
PREFIX: Final = "gpuwise-"
_LABEL_VALUE_MAX: Final = 63  # the config name is a label value
_DIGEST: Final = 10

Entry = list[dict[str, Any]]
"""One config: its device entries, as `mig-configs.<name>` holds them."""


class MigPartedError(ValueError):
    """A config document or entry gpuwise cannot read as MIG Manager would; the message says why."""


@dataclass(frozen=True)
class GpuLayout:
    """One GPU as a config leaves it: MIG mode on or off, and instances per profile."""

    enabled: bool
    counts: tuple[tuple[str, int], ...] = ()

    def device(self, indexes: list[int]) -> dict[str, Any]:
        if not self.enabled:
            return {"devices": indexes, "mig-enabled": False}
        return {"devices": indexes, "mig-enabled": True, "mig-devices": dict(self.counts)}


WHOLE: Final = GpuLayout(enabled=False)


# --- reading ---------------------------------------------------------------------------------


def parse(text: str | None) -> dict[str, Entry]:
    """The configs of a `config.yaml`, by name; raises :class:`MigPartedError`."""
    try:
        document = yaml.safe_load(text or "")
    except yaml.YAMLError as exc:
        raise MigPartedError(f"{CONFIG_KEY} is not YAML: {exc}") from exc
    if not isinstance(document, dict) or document.get("version") != VERSION:
        raise MigPartedError(f"{CONFIG_KEY} is not a mig-parted config of version {VERSION}")
    configs = document.get("mig-configs")
    if not isinstance(configs, dict) or not all(isinstance(e, list) for e in configs.values()):
        raise MigPartedError(f"{CONFIG_KEY}: mig-configs must map each name to a list of device entries")
    return {str(name): entries for name, entries in configs.items()}


def layouts(entries: Entry, model: GpuModel, gpus: int) -> tuple[GpuLayout, ...]:
    """What `entries` make of each of a node's `gpus` GPUs of `model`; raises :class:`MigPartedError`
    for what gpuwise cannot tell or MIG Manager would refuse: an index out of range or listed
    twice, a GPU no entry covers (left as it happens to be), a `device-filter` (gpuwise does not
    know the node's PCI device ids), a profile the model lacks, counts no GPU can hold."""
    found: dict[int, GpuLayout] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise MigPartedError(f"a device entry must be a mapping, got {entry!r}")
        if "device-filter" in entry:
            raise MigPartedError("it uses device-filter, which gpuwise cannot evaluate")
        devices = entry.get("devices")
        if devices == "all":
            indexes = list(range(gpus))
        elif isinstance(devices, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in devices):
            indexes = devices
        else:
            raise MigPartedError(f"devices must be 'all' or a list of GPU indexes, got {devices!r}")
        layout = _layout(entry, model)
        for index in indexes:
            if not 0 <= index < gpus:
                raise MigPartedError(f"GPU index {index} is not on a node with {gpus} GPU(s)")
            if index in found:
                raise MigPartedError(f"GPU {index} is in more than one device entry")
            found[index] = layout
    missing = sorted(set(range(gpus)) - set(found))
    if missing:
        raise MigPartedError(f"no device entry covers GPU(s) {missing}")
    return tuple(found[index] for index in range(gpus))


def _layout(entry: Mapping[str, Any], model: GpuModel) -> GpuLayout:
    enabled = entry.get("mig-enabled")
    if not isinstance(enabled, bool):
        raise MigPartedError(f"mig-enabled must be true or false, got {enabled!r}")
    if not enabled:
        return WHOLE
    wanted = entry.get("mig-devices") or {}
    if not isinstance(wanted, dict) or not all(isinstance(n, int) and n >= 0 for n in wanted.values()):
        raise MigPartedError(f"mig-devices must map profiles to counts, got {wanted!r}")
    try:
        return GpuLayout(True, _ordered(model, {str(p): n for p, n in wanted.items() if n}))
    except (UnknownProfileError, NoGeometryError) as exc:
        raise MigPartedError(str(exc)) from exc


def _ordered(model: GpuModel, counts: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """`counts` in the model's profile order, checked to fit one GPU."""
    place(model, counts)
    return tuple((p.name, counts[p.name]) for p in model.profiles if counts.get(p.name))


def place(model: GpuModel, counts: Mapping[str, int]) -> tuple[MigInstance, ...]:
    """Where MIG Manager's counts put instances, as the planner places them (mig-parted places
    them itself; a valid placement of the same counts serves the same demand)."""
    return plan_gpu(GpuState(model.name), counts).instances


# --- planning --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Replan:
    """A node's layouts after a repartition, and what it costs."""

    layouts: tuple[GpuLayout, ...]
    changed: tuple[int, ...]
    """GPU indexes whose layout changes (MIG Manager recreates all of their instances)."""
    instance_changes: int


def replan(
    model: GpuModel,
    now: Sequence[GpuLayout],
    demand: Mapping[str, int],
    *,
    whole_in_use: int = 0,
    slices_in_use: Mapping[str, int] | None = None,
) -> Replan:
    """The layouts giving `demand` free instances with the fewest instance changes, keeping every
    GPU that another pod uses as it is: `whole_in_use` whole GPUs (MIG off) and `slices_in_use`
    instances per profile. Which GPU a pod holds is the kubelet's to know, so they are counted
    from the lowest index; what matters is that those GPUs still exist afterwards.

    Raises :class:`NoGeometryError` when the free GPUs cannot serve the demand."""
    for name in demand:
        model.profile(name)
    held = {i for i, gpu in enumerate(now) if not gpu.enabled}
    held = set(sorted(held)[:whole_in_use])
    busy_left = Counter({name: n for name, n in (slices_in_use or {}).items() if n > 0})
    planned: list[int] = []
    states: list[GpuState] = []
    for index, gpu in enumerate(now):
        if index in held:
            continue
        instances = place(model, dict(gpu.counts))
        busy: set[MigInstance] = set()
        for instance in instances:
            if busy_left[instance.profile] > 0:
                busy.add(instance)
                busy_left[instance.profile] -= 1
        planned.append(index)
        states.append(GpuState(model.name, instances, frozenset(busy)))
    plan = plan_node(states, demand, reconfigure_busy_gpus=False)
    short = {name: n - plan.served.get(name, 0) for name, n in demand.items() if plan.served.get(name, 0) < n}
    if short:
        raise NoGeometryError(
            f"its {len(states)} GPU(s) not held whole cannot offer {dict(demand)} free beside the "
            f"{whole_in_use} whole GPU(s) and the slices {dict(slices_in_use or {})} other pods use "
            f"({short} short)"
        )
    after = list(now)
    for index, chosen in zip(planned, plan.gpus, strict=True):
        if chosen.changes:
            after[index] = GpuLayout(True, tuple(chosen.counts.items()))
    changed = tuple(i for i, (a, b) in enumerate(zip(now, after, strict=True)) if a != b)
    return Replan(tuple(after), changed, plan.changes)


# --- writing ---------------------------------------------------------------------------------


def entry(gpus: Sequence[GpuLayout]) -> Entry:
    """The device entries for per-GPU `gpus`: GPUs with the same layout share one, in index order."""
    groups: dict[GpuLayout, list[int]] = {}
    for index, gpu in enumerate(gpus):
        groups.setdefault(gpu, []).append(index)
    return [layout.device(indexes) for layout, indexes in groups.items()]


def _stem(node: str) -> str:
    return node[: _LABEL_VALUE_MAX - len(PREFIX) - 1 - _DIGEST]


def config_name(node: str, devices: Entry) -> str:
    """`gpuwise-<node>-<digest of the node and its entries>`: a label value (at most 63 characters,
    the node's name cut to fit), the same for the same layout, another for another one."""
    digest = hashlib.sha256(json.dumps([node, devices], sort_keys=True).encode()).hexdigest()[:_DIGEST]
    return f"{PREFIX}{_stem(node)}-{digest}"


def owned_by(name: str, node: str) -> bool:
    """Whether `name` has the shape of a config gpuwise generated for `node`."""
    return re.fullmatch(re.escape(f"{PREFIX}{_stem(node)}-") + f"[0-9a-f]{{{_DIGEST}}}", name) is not None


def merged(text: str | None, name: str, devices: Entry, drop: Collection[str] = ()) -> str:
    """`text` (a `config.yaml`) with config `name` set to `devices` and the configs in `drop` gone;
    every other config is kept as it was (YAML comments are not: the document is rewritten)."""
    configs = {k: v for k, v in parse(text).items() if k not in drop}
    configs[name] = devices
    return yaml.safe_dump({"version": VERSION, "mig-configs": configs}, sort_keys=False)
