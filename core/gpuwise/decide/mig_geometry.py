"""MIG geometry planning: which GPU instances to carve so pending pods get the slices they ask for.

A *geometry* is the set of GPU instances on one GPU, each a profile placed at a start memory
slice. It is valid when every instance starts where its profile may, instances do not share
memory slices, no profile exceeds its count and the compute slices add up to at most seven.
Every valid geometry of a model is enumerated once (a few hundred), so planning is a search
over known-valid options and can never produce an invalid one.

Instances a pod is using (*busy*) are never touched. What can change depends on how the change
is applied:

- NVIDIA's MIG Manager (GPU Operator) applies a ``mig-parted`` config: counts per device, and it
  recreates *every* instance of a device whose config changes. So by default only GPUs with no
  busy instance are repartitioned (``reconfigure_busy_gpus=False``).
- A driver that creates and destroys single instances (``nvidia-smi mig -cgi/-dgi``, dynamic
  MIG) can repartition the free slices of a busy GPU around its busy instances
  (``reconfigure_busy_gpus=True``); the plan is placement-aware for exactly that case.

Node planning picks one geometry per GPU to serve the most demand — compute slices of demanded
instances that get a free instance, then the number of them — with the fewest instance changes
(created plus destroyed). It is exact: a dynamic program over the GPUs whose state is the demand
still unserved.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuwise.hardware.mig_profiles import COMPUTE_SLICES, MEMORY_SLICES, GpuModel, gpu_model


@dataclass(frozen=True, order=True)
class MigInstance:
    """A GPU instance: a profile placed at a start memory slice."""

    start: int
    profile: str


Geometry = frozenset[MigInstance]


class InvalidGeometryError(ValueError):
    pass


class NoGeometryError(ValueError):
    pass


def problems(model: GpuModel, instances: Iterable[MigInstance]) -> list[str]:
    """Everything that makes ``instances`` an invalid geometry on ``model`` (empty if valid)."""
    found: list[str] = []
    used: dict[int, MigInstance] = {}
    counts: Counter[str] = Counter()
    compute = 0
    for instance in sorted(instances):
        try:
            profile = model.profile(instance.profile)
        except ValueError as exc:
            found.append(str(exc))
            continue
        if instance.start not in profile.starts:
            found.append(f"{profile.name} cannot start at memory slice {instance.start} (allowed: {profile.starts})")
        for memory_slice in range(instance.start, instance.start + profile.memory_slices):
            if memory_slice in used:
                found.append(f"{instance} overlaps {used[memory_slice]} at memory slice {memory_slice}")
                break
            used[memory_slice] = instance
        counts[profile.name] += 1
        compute += profile.compute_slices
    for name, count in counts.items():
        if count > model.profile(name).max_count:
            found.append(f"{count} x {name} exceeds its maximum of {model.profile(name).max_count} per GPU")
    if compute > COMPUTE_SLICES:
        found.append(f"{compute} compute slices exceed the GPU's {COMPUTE_SLICES}")
    return found


def validate(model: GpuModel, instances: Iterable[MigInstance]) -> Geometry:
    """``instances`` as a geometry; raises :class:`InvalidGeometryError` saying what is wrong."""
    geometry = frozenset(instances)
    found = problems(model, geometry)
    if found:
        raise InvalidGeometryError(f"invalid MIG geometry on {model.name}: " + "; ".join(found))
    return geometry


@functools.cache
def geometries(model: GpuModel) -> tuple[Geometry, ...]:
    """Every valid geometry of ``model``, the empty one included, each exactly once."""
    found: list[Geometry] = []

    def extend(memory_slice: int, chosen: tuple[MigInstance, ...], compute: int, counts: Counter[str]) -> None:
        if memory_slice >= MEMORY_SLICES:
            found.append(frozenset(chosen))
            return
        extend(memory_slice + 1, chosen, compute, counts)
        for profile in model.profiles:
            if (
                memory_slice in profile.starts
                and memory_slice + profile.memory_slices <= MEMORY_SLICES
                and counts[profile.name] < profile.max_count
                and compute + profile.compute_slices <= COMPUTE_SLICES
            ):
                counts[profile.name] += 1
                extend(
                    memory_slice + profile.memory_slices,
                    (*chosen, MigInstance(memory_slice, profile.name)),
                    compute + profile.compute_slices,
                    counts,
                )
                counts[profile.name] -= 1

    extend(0, (), 0, Counter())
    return tuple(found)


@dataclass(frozen=True)
class GpuState:
    """One GPU as the planner sees it: its model, its instances now, and which of them are busy."""

    model: str
    instances: tuple[MigInstance, ...] = ()
    busy: frozenset[MigInstance] = frozenset()


@dataclass(frozen=True)
class GpuPlan:
    """The geometry chosen for one GPU and how to get there from its current one."""

    model: str
    instances: tuple[MigInstance, ...]
    busy: frozenset[MigInstance]
    created: tuple[MigInstance, ...]
    destroyed: tuple[MigInstance, ...]

    @property
    def changes(self) -> int:
        return len(self.created) + len(self.destroyed)

    @property
    def free(self) -> Counter[str]:
        """Free instances per profile: what pending pods can be given."""
        return Counter(i.profile for i in self.instances if i not in self.busy)

    @property
    def counts(self) -> dict[str, int]:
        """Instances per profile, in the model's profile order (a ``mig-parted`` device entry:
        see :mod:`gpuwise.decide.mig_parted`)."""
        have = Counter(i.profile for i in self.instances)
        return {p.name: have[p.name] for p in gpu_model(self.model).profiles if have[p.name]}


def plan_gpu(state: GpuState, wanted: Mapping[str, int], *, reconfigure_busy_gpus: bool = True) -> GpuPlan:
    """The geometry with at least ``wanted`` free instances per profile, keeping every busy
    instance where it is, with the fewest changes; raises :class:`NoGeometryError` if none."""
    model = gpu_model(state.model)
    for name in wanted:
        model.profile(name)
    best = min(
        (
            plan
            for plan in _options(state, reconfigure_busy_gpus)
            if all(plan.free[name] >= count for name, count in wanted.items())
        ),
        key=lambda plan: plan.changes,
        default=None,
    )
    if best is None:
        busy = ", ".join(f"{i.profile}@{i.start}" for i in sorted(state.busy)) or "none"
        raise NoGeometryError(
            f"no valid {model.name} geometry offers {dict(wanted)} free next to the busy instances ({busy})"
        )
    return best


@dataclass(frozen=True)
class NodePlan:
    gpus: tuple[GpuPlan, ...]
    served: dict[str, int] = field(default_factory=dict)
    """Demanded instances per profile that get a free instance."""

    @property
    def changes(self) -> int:
        return sum(gpu.changes for gpu in self.gpus)

    @property
    def served_compute_slices(self) -> int:
        if not self.gpus:
            return 0
        model = gpu_model(self.gpus[0].model)
        return sum(model.profile(name).compute_slices * count for name, count in self.served.items())


def plan_node(gpus: Sequence[GpuState], demand: Mapping[str, int], *, reconfigure_busy_gpus: bool = False) -> NodePlan:
    """One geometry per GPU serving the most of ``demand`` (compute slices, then instances)
    with the fewest changes. Exact: a dynamic program over the GPUs."""
    if not gpus:
        return NodePlan(())
    models = {gpu_model(gpu.model).name for gpu in gpus}
    if len(models) > 1:
        raise ValueError(f"a node's GPUs must share a model to share a MIG config, got {sorted(models)}")
    model = gpu_model(gpus[0].model)
    names = tuple(p.name for p in model.profiles)
    for name in demand:
        model.profile(name)
    cap = tuple(max(0, int(demand.get(name, 0))) for name in names)
    slices = tuple(model.profile(name).compute_slices for name in names)
    options = [_distinct_options(gpu, names, cap, reconfigure_busy_gpus) for gpu in gpus]

    def served_slices(left: tuple[int, ...]) -> int:
        return sum(s * (need - rest) for s, need, rest in zip(slices, cap, left, strict=True))

    def serve(left: tuple[int, ...], supply: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(max(0, need - have) for need, have in zip(left, supply, strict=True))

    # Branch and bound on the primary objective: a greedy plan is a lower bound on the compute
    # slices served; a partial plan that cannot reach it even if every remaining GPU served all
    # seven of its slices is dropped. Exact, and it keeps heavy demand from exploding the states.
    greedy = cap
    for choices in options:
        greedy = max((serve(greedy, supply) for supply, _ in choices), key=served_slices)
    floor = served_slices(greedy)
    # state: demand still unserved -> (changes so far, plan per GPU so far)
    states: dict[tuple[int, ...], tuple[int, tuple[GpuPlan, ...]]] = {cap: (0, ())}
    for done, choices in enumerate(options, start=1):
        reachable = COMPUTE_SLICES * (len(gpus) - done)
        advanced: dict[tuple[int, ...], tuple[int, tuple[GpuPlan, ...]]] = {}
        for left, (changes, chosen) in states.items():
            for supply, plan in choices:
                after = serve(left, supply)
                unserved = sum(s * n for s, n in zip(slices, after, strict=True))
                if served_slices(after) + min(unserved, reachable) < floor:
                    continue
                total = changes + plan.changes
                if after not in advanced or total < advanced[after][0]:
                    advanced[after] = (total, (*chosen, plan))
        states = advanced

    def merit(item: tuple[tuple[int, ...], tuple[int, tuple[GpuPlan, ...]]]) -> tuple[int, int, int]:
        left, (changes, _) = item
        return (served_slices(left), sum(cap) - sum(left), -changes)

    left, (_, chosen) = max(states.items(), key=merit)
    served = {name: need - rest for name, need, rest in zip(names, cap, left, strict=True) if need - rest}
    return NodePlan(chosen, served)


def _options(state: GpuState, reconfigure_busy_gpus: bool) -> list[GpuPlan]:
    """Every geometry the GPU may move to, as plans from its current geometry."""
    model = gpu_model(state.model)
    current = validate(model, state.instances)
    busy = frozenset(state.busy)
    if not busy <= current:
        raise InvalidGeometryError(f"busy instances {sorted(busy - current)} are not among the GPU's instances")
    if busy and not reconfigure_busy_gpus:
        reachable: Collection[Geometry] = (current,)
    else:
        reachable = [geometry for geometry in geometries(model) if busy <= geometry]
    return [
        GpuPlan(
            model=model.name,
            instances=tuple(sorted(geometry)),
            busy=busy,
            created=tuple(sorted(geometry - current)),
            destroyed=tuple(sorted(current - geometry)),
        )
        for geometry in reachable
    ]


def _distinct_options(
    state: GpuState, names: Sequence[str], cap: Sequence[int], reconfigure_busy_gpus: bool
) -> list[tuple[tuple[int, ...], GpuPlan]]:
    """The GPU's options that differ in what they serve of the demand ``cap``: per supply
    vector (capped at the demand), the option with the fewest changes."""
    best: dict[tuple[int, ...], GpuPlan] = {}
    for plan in _options(state, reconfigure_busy_gpus):
        free = plan.free
        supply = tuple(min(free[name], need) for name, need in zip(names, cap, strict=True))
        if supply not in best or plan.changes < best[supply].changes:
            best[supply] = plan
    return list(best.items())
