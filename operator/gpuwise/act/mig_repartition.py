"""MigRepartition: move a job that uses a fraction of a GPU onto a MIG slice that fits it.

gpuwise drives MIG the way the NVIDIA GPU Operator expects: it sets the node label
`nvidia.com/mig.config=<config>` and MIG Manager applies that `mig-parted` config from its
ConfigMap (the ClusterPolicy's `migManager.config.name`, `actions.nodes.mig.configMap`), reporting
in `nvidia.com/mig.config.state` (`pending` → `rebooting`? → `success` | `failed`). gpuwise never
runs nvidia-smi, and only acts on nodes a platform team opted in (`gpuwise.io/gpu-partitioning:
mig`) whose MIG state is settled: a change it did not make is another owner's, and it waits.

The config is the node's own plan, not a name applied node-wide: gpuwise reads what the node's
current config makes of each GPU (from the ConfigMap), plans the fewest instance changes that give
the job its slices on GPUs no other pod uses (:func:`gpuwise.decide.mig_parted.replan`), and
writes that layout as `gpuwise-<node>-<digest>` beside the ConfigMap's other configs. GPUs the plan
does not need keep their entry, so MIG Manager leaves them alone.

The steps, each recorded in the action's `details` before the next one so an operator restart
resumes where it was without repeating one:

1. choose a node (:func:`choose`): a node that already has free slices of the profile needs no
   change at all; otherwise the node whose plan needs the fewest evictions and instance changes;
2. cordon the node and evict its GPU pods, for at most `drainTimeout`: MIG Manager does not move
   pods, and which GPU a pod holds is the kubelet's to know, so the whole node is idled (the GPUs
   other pods used keep their layout for them to come back to); a node with a worker of another
   TrainingJob or a do-not-disrupt pod on it is never chosen (nor drained);
3. write the config into the ConfigMap (dropping gpuwise's configs for the node that no node
   runs any more), set the config label (removing the stale state label, so an old `success` is
   never mistaken for the new one's), and follow the state to `success` within
   `mig.configTimeout`;
4. uncordon. The runner then restarts the job requesting `nvidia.com/mig-<profile>`.

On failure (`failed`, a wedged state, a blocked eviction) `undo` sets the previous config back,
waits for it, and uncordons — if gpuwise cordoned the node. A rollback that fails too leaves the
node cordoned, with a message saying so: a node whose GPUs are in an unknown state must not
take new pods. A repartition that succeeded is not undone when the job is reverted later (it
ran worse): other pods may use the new slices by then; the job alone goes back to a whole GPU.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from gpuwise import wiring
from gpuwise.act import nodes
from gpuwise.act.action_settings import ActionSettings
from gpuwise.act.machine import READY, ActContext, Action, ActionFailed, JobView, Plan, Progress, Refusal
from gpuwise.act.node_settings import ConfigMapRef, NodeActionSettings
from gpuwise.api.kinds import MIG_PROFILE_CHANGE, ActionKind
from gpuwise.api.overrides import JobOverrides
from gpuwise.api.trainingjob import ActionRecord, Recommendation
from gpuwise.decide import mig_parted
from gpuwise.decide.mig_geometry import NoGeometryError
from gpuwise.hardware.gpu_specs import GPU_PRODUCT_LABEL
from gpuwise.hardware.mig_profiles import UnknownGpuModelError, UnknownProfileError, gpu_model
from gpuwise.kube.client import ApiError, Kube
from gpuwise.kube.resources import GPU_RESOURCE, MIG_RESOURCE_PREFIX, gpu_resources

JsonDict = dict[str, Any]

LABEL_PARTITIONING: Final = "gpuwise.io/gpu-partitioning"
PARTITIONING_MIG: Final = "mig"
LABEL_MIG_CONFIG: Final = "nvidia.com/mig.config"
LABEL_MIG_STATE: Final = "nvidia.com/mig.config.state"
LABEL_GPU_COUNT: Final = "nvidia.com/gpu.count"
SETTLED: Final = "success"
IN_FLIGHT: Final = frozenset({"pending", "rebooting"})
MIG_DISABLED: Final = "all-disabled"  # what a node without the label runs: the GPU Operator's default


# --- the configs MIG Manager knows ----------------------------------------------------------


@dataclass(frozen=True)
class MigConfigs:
    """MIG Manager's configs as gpuwise read them from `source` ("namespace/name"), or why it could not."""

    source: str
    configs: Mapping[str, mig_parted.Entry] = field(default_factory=dict)
    problem: str | None = None


async def read_configs(kube: Kube, ref: ConfigMapRef) -> MigConfigs:
    """The configs in MIG Manager's ConfigMap; a problem (missing, unreadable) is kept, not raised:
    only a node that needs a change needs them."""
    source = str(ref)
    try:
        found = await kube.get("v1", "ConfigMap", ref.namespace, ref.name)
    except ApiError as exc:
        return MigConfigs(source, problem=f"MIG Manager's ConfigMap {source} cannot be read: {exc}")
    if found is None:
        return MigConfigs(
            source,
            problem=f"MIG Manager's ConfigMap {source} does not exist (actions.nodes.mig.configMap must name "
            "the ClusterPolicy's migManager.config.name)",
        )
    try:
        return MigConfigs(source, mig_parted.parse((found.get("data") or {}).get(mig_parted.CONFIG_KEY)))
    except mig_parted.MigPartedError as exc:
        return MigConfigs(source, problem=f"MIG Manager's ConfigMap {source}: {exc}")


async def publish(kube: Kube, ref: ConfigMapRef, node: str, name: str, devices: mig_parted.Entry) -> str | None:
    """Make config `name` (`devices`) one of MIG Manager's, keeping every other config, and drop
    the configs gpuwise generated for `node` that no node's label names any more. None once it is
    there; why not yet after a conflicting write (someone else changed the ConfigMap: next cycle).

    Raises ActionFailed MigConfigMapUnusable when the ConfigMap is missing or not a mig-parted config."""
    found = await kube.get("v1", "ConfigMap", ref.namespace, ref.name)
    if found is None:
        raise ActionFailed("MigConfigMapUnusable", f"MIG Manager's ConfigMap {ref} does not exist")
    text = (found.get("data") or {}).get(mig_parted.CONFIG_KEY)
    try:
        configs = mig_parted.parse(text)
    except mig_parted.MigPartedError as exc:
        raise ActionFailed("MigConfigMapUnusable", f"MIG Manager's ConfigMap {ref}: {exc}") from exc
    labelled = await kube.list("v1", "Node", label_selector=LABEL_MIG_CONFIG)
    running = {(n["metadata"].get("labels") or {}).get(LABEL_MIG_CONFIG) for n in labelled}
    stale = {c for c in configs if c != name and c not in running and mig_parted.owned_by(c, node)}
    if configs.get(name) == devices and not stale:
        return None
    body = {
        "metadata": {"resourceVersion": found["metadata"]["resourceVersion"]},  # a conflict, not a lost write
        "data": {mig_parted.CONFIG_KEY: mig_parted.merged(text, name, devices, stale)},
    }
    try:
        await kube.patch("v1", "ConfigMap", ref.namespace, ref.name, body)
    except ApiError as exc:
        if exc.status != 409:
            raise
        return f"MIG Manager's ConfigMap {ref} changed while gpuwise wrote {name}; writing it again"
    return None


# --- the nodes as MIG sees them -------------------------------------------------------------


def _labels(node: Mapping[str, Any]) -> dict[str, str]:
    return dict(node.get("metadata", {}).get("labels") or {})


def mig_change_in_flight(node: Mapping[str, Any]) -> str | None:
    """Why a node's MIG state is not settled (None when it is)."""
    labels = _labels(node)
    state = labels.get(LABEL_MIG_STATE)
    if state in IN_FLIGHT or state == "failed":
        return f"its MIG config {labels.get(LABEL_MIG_CONFIG)!r} is {state}"
    return None


def free_slices(node: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], resource: str) -> int:
    """Instances of a MIG resource the node offers and no pod holds."""
    allocatable = int((node.get("status") or {}).get("allocatable", {}).get(resource, 0))
    used = sum(gpu_resources(dict(pod)).get(resource, 0) for pod in pods if nodes.holds_gpus(dict(pod)))
    return allocatable - used


@dataclass(frozen=True)
class Choice:
    """Where the job's slices come from: a node, the config it needs, and what changing it costs."""

    node: str
    config: str
    previous: str
    evictions: tuple[str, ...] = ()
    instance_changes: int = 0
    devices: mig_parted.Entry = field(default_factory=list)
    """The generated config's device entries (empty when the config stays)."""
    changed: tuple[int, ...] = ()
    """The GPUs whose layout the config changes."""

    @property
    def changes_config(self) -> bool:
        return self.config != self.previous


class NoMigNodeError(Exception):
    """No node can offer the slices; `reasons` says why, node by node."""

    def __init__(self, profile: str, count: int, reasons: Mapping[str, str]) -> None:
        self.reasons = dict(reasons)
        why = "; ".join(f"{node}: {reason}" for node, reason in sorted(reasons.items()))
        if not why:
            why = f"no node is opted in for MIG (label {LABEL_PARTITIONING}={PARTITIONING_MIG})"
        super().__init__(f"no node can offer {count} x {profile}: {why}")


def in_use(pods: Iterable[Mapping[str, Any]]) -> tuple[int, dict[str, int]]:
    """Whole GPUs, and MIG instances per profile, that `pods` hold."""
    whole, slices = 0, dict[str, int]()
    for pod in pods:
        if not nodes.holds_gpus(dict(pod)):
            continue
        for resource, count in gpu_resources(dict(pod)).items():
            if resource == GPU_RESOURCE:
                whole += count
            elif resource.startswith(MIG_RESOURCE_PREFIX):
                profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
                slices[profile] = slices.get(profile, 0) + count
    return whole, slices


def choose(
    all_nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    profile: str,
    count: int,
    *,
    job: str,
    configs: MigConfigs,
    held: Mapping[str, str] | None = None,
    evict_namespaces: Collection[str] = (),
) -> Choice:
    """The node and config that give `count` free `profile` slices with the least disruption.

    A pure function of the nodes, their pods and MIG Manager's `configs`. `job` ("namespace/name")
    is the TrainingJob to move, whose pods the restart stops anyway: its GPUs are free to
    repartition, those other pods hold keep their layout. A node that would have to evict a pod
    that must never be evicted (another TrainingJob's worker, a do-not-disrupt pod, one outside
    `evict_namespaces` when that is given: see :func:`nodes.never_evicted`) is out, and so is one
    that would have to evict a pod a disruption budget keeps now (`held`, with why). Raises
    :class:`NoMigNodeError` saying why each node is out.
    """
    reasons: dict[str, str] = {}
    options: list[tuple[tuple[int, int, int, str], Choice]] = []
    resource = f"{MIG_RESOURCE_PREFIX}{profile}"
    for node in all_nodes:
        name = node["metadata"]["name"]
        labels = _labels(node)
        on_node = [p for p in pods if (p.get("spec") or {}).get("nodeName") == name]
        others = [p for p in on_node if nodes.trainingjob_of(dict(p)) != job]
        if labels.get(LABEL_PARTITIONING) != PARTITIONING_MIG:
            reasons[name] = f"not opted in (label {LABEL_PARTITIONING}={PARTITIONING_MIG})"
            continue
        if (node.get("spec") or {}).get("unschedulable"):
            reasons[name] = "cordoned"
            continue
        if nodes.do_not_disrupt(dict(node)):
            reasons[name] = f"annotated {wiring.ANNOTATION_DO_NOT_DISRUPT}"
            continue
        in_flight = mig_change_in_flight(node)
        if in_flight:
            reasons[name] = f"{in_flight}: a MIG change gpuwise did not make is not settled"
            continue
        try:
            model = gpu_model(labels.get(GPU_PRODUCT_LABEL, ""))
            model.profile(profile)
        except (UnknownGpuModelError, UnknownProfileError) as exc:
            reasons[name] = str(exc)
            continue
        current = labels.get(LABEL_MIG_CONFIG, MIG_DISABLED)
        if free_slices(node, others, resource) >= count:
            options.append(((0, 0, 0, name), Choice(name, current, current)))
            continue
        evict = tuple(sorted(nodes.pod_ref(dict(p)) for p in others if nodes.holds_gpus(dict(p))))
        protected = [
            f"{nodes.pod_ref(dict(p))} ({why})"
            for p in others
            if nodes.holds_gpus(dict(p)) and (why := nodes.never_evicted(dict(p), job, evict_namespaces)) is not None
        ]
        if protected:
            reasons[name] = f"must not be disrupted: {', '.join(sorted(protected))}"
            continue
        kept = [f"{ref} ({(held or {})[ref]})" for ref in evict if ref in (held or {})]
        if kept:
            reasons[name] = f"cannot be idled now: {', '.join(kept)}"
            continue
        if configs.problem is not None:
            reasons[name] = configs.problem
            continue
        if current not in configs.configs:
            reasons[name] = f"its MIG config {current!r} is not in {configs.source}: its GPUs' layout is unknown"
            continue
        gpus = int(labels.get(LABEL_GPU_COUNT, "0") or 0)
        whole, slices = in_use(others)
        try:
            now = mig_parted.layouts(configs.configs[current], model, gpus)
            plan = mig_parted.replan(model, now, {profile: count}, whole_in_use=whole, slices_in_use=slices)
        except mig_parted.MigPartedError as exc:
            reasons[name] = f"its MIG config {current!r} in {configs.source}: {exc}"
            continue
        except NoGeometryError as exc:
            reasons[name] = str(exc)
            continue
        if not plan.changed:
            reasons[name] = (
                f"its MIG config {current!r} has the slices, but its allocatable does not show them free "
                "(MIG Manager or the device plugin has not caught up)"
            )
            continue
        devices = mig_parted.entry(plan.layouts)
        config = mig_parted.config_name(name, devices)
        choice = Choice(name, config, current, evict, plan.instance_changes, devices, plan.changed)
        options.append(((1, len(evict), plan.instance_changes, name), choice))
    if not options:
        raise NoMigNodeError(profile, count, reasons)
    return min(options, key=lambda option: option[0])[1]


async def find_slices(kube: Kube, job: JobView, details: Mapping[str, str], settings: NodeActionSettings) -> Choice:
    """:func:`choose` over the opted-in nodes, the GPU pods on them and MIG Manager's configs, as they are now."""
    candidates = await kube.list("v1", "Node", label_selector=f"{LABEL_PARTITIONING}={PARTITIONING_MIG}")
    pods = [pod for node in candidates for pod in await nodes.gpu_pods(kube, node["metadata"]["name"])]
    budgets = await kube.list("policy/v1", "PodDisruptionBudget") if pods else []
    configs = await read_configs(kube, settings.mig.config_map) if candidates else MigConfigs("")
    return choose(
        candidates,
        pods,
        details["migProfile"],
        int(details.get("workers", "1")),
        job=f"{job.namespace}/{job.name}",
        configs=configs,
        held=nodes.held_by_budgets(pods, budgets),
        evict_namespaces=settings.evict_namespaces,
    )


# --- the action -----------------------------------------------------------------------------


def holder(job: JobView, record: ActionRecord) -> str:
    """Who cordons: the job and the action, so a node shows which action holds it."""
    return f"{job.namespace}.{job.name}.{record.id}"


def not_one_gpu_per_worker(job: JobView) -> Refusal | None:
    """A share of a GPU (a MIG slice, a time-sliced replica) serves one process on one GPU."""
    trainer = job.spec.trainer
    gpus = gpu_resources({"spec": {"containers": [{"resources": trainer.resources_per_node.to_k8s()}]}})
    if trainer.num_proc_per_node == 1 and gpus.get(GPU_RESOURCE, 0) <= 1:
        return None
    return Refusal(
        "NotOneGpuPerWorker",
        "a share of a GPU serves one process: only jobs with one process and at most one GPU per worker move to one",
    )


def target_overrides(current: JobOverrides, profile: str) -> JobOverrides:
    """The job's overrides with its whole GPU swapped for one slice of `profile`."""
    resource = f"nvidia.com/mig-{profile}"
    resources = {k: v for k, v in current.resources.items() if not k.startswith(MIG_RESOURCE_PREFIX)}
    removed = sorted({*current.remove_resources, GPU_RESOURCE} - {resource})
    return current.model_copy(update={"resources": {**resources, resource: "1"}, "remove_resources": removed})


def prefer(plan: Plan, chosen: Sequence[str]) -> Plan:
    """`plan` with its workers preferring the nodes chosen for them (where the slices or shares are)."""
    target = plan.target.model_copy(update={"prefer_nodes": sorted(set(chosen))})
    return replace(plan, target=target)


def config_change(
    config: str, timeout: str, ready: Callable[[], Awaitable[str | None]] | None = None
) -> nodes.LabelChange:
    """Ask MIG Manager for `config` (once `ready`: written into its ConfigMap). The old state label
    goes with the request, so that only the answer to this request is read (a stale `success`
    would otherwise look like one)."""

    def answer(node: JsonDict) -> tuple[nodes.Outcome, str]:
        labels = _labels(node)
        state = labels.get(LABEL_MIG_STATE)
        if labels.get(LABEL_MIG_CONFIG) != config:
            return (
                nodes.Outcome.FAILED,
                f"{LABEL_MIG_CONFIG} became {labels.get(LABEL_MIG_CONFIG)!r}, set by someone else",
            )
        if state == SETTLED:
            return nodes.Outcome.DONE, f"MIG config {config} applied"
        if state == "failed":
            return nodes.Outcome.FAILED, f"MIG Manager could not apply {config} (state failed)"
        return nodes.Outcome.WAITING, f"MIG config {config} is {state or 'not picked up yet'}"

    return nodes.LabelChange(
        labels={LABEL_MIG_CONFIG: config, LABEL_MIG_STATE: None},
        describe=f"MIG config {config}",
        answer=answer,
        timeout=timeout,
        failed_reason="MigConfigFailed",
        timeout_reason="MigConfigTimeout",
        ready=ready,
    )


class MigRepartition(Action):
    kind = ActionKind.MIG_REPARTITION
    prepares_nodes = True

    def plan(self, job: JobView, recommendation: Recommendation, settings: ActionSettings) -> Plan | Refusal:
        profile = recommendation.changes.get(MIG_PROFILE_CHANGE)
        if not profile:
            return Refusal("NoMigProfile", f"the recommendation names no MIG profile (changes.{MIG_PROFILE_CHANGE})")
        refusal = not_one_gpu_per_worker(job)
        if refusal is not None:
            return refusal
        target = target_overrides(job.overrides, profile)
        workers = job.spec.trainer.num_nodes
        return Plan(
            target=target,
            message=f"Move each of the {workers} worker(s) from a whole GPU to a MIG slice {profile}.",
            changes={MIG_PROFILE_CHANGE: profile},
            details={"migProfile": profile, "workers": str(workers)},
        )

    async def prepare(self, job: JobView, record: ActionRecord, ctx: ActContext) -> Progress:
        details = record.details
        if "node" not in details:
            return await self._choose(job, record, ctx)
        if details.get("applied") == "true" or details["migConfig"] == details["previousMigConfig"]:
            return READY
        name, config = details["node"], details["migConfig"]
        if "labelledAt" not in details:
            node = await nodes.get_node(ctx.kube, name)
            labels = _labels(node)
            if labels.get(LABEL_MIG_CONFIG) != details["previousMigConfig"] or mig_change_in_flight(node):
                raise ActionFailed(
                    "MigChangeInFlight",
                    f"node {name}: {LABEL_MIG_CONFIG} is {labels.get(LABEL_MIG_CONFIG)!r} "
                    f"({labels.get(LABEL_MIG_STATE) or 'no state'}), a change gpuwise did not make; "
                    "gpuwise does not fight another MIG owner",
                )
        return await nodes.apply_on_idle_node(
            ctx.kube,
            name,
            holder(job, record),
            job=f"{job.namespace}/{job.name}",
            change=config_change(config, ctx.settings.nodes.mig.config_timeout, self._publishing(details, ctx)),
            details=details,
            now=ctx.now,
            drain_timeout=ctx.settings.nodes.drain_timeout,
            evict_namespaces=ctx.settings.nodes.evict_namespaces,
        )

    @staticmethod
    def _publishing(details: Mapping[str, str], ctx: ActContext) -> Callable[[], Awaitable[str | None]] | None:
        """Writing the node's generated config (`details.migDevices`, the record of what gpuwise asks
        for) into MIG Manager's ConfigMap, once the node is idle and before the label names it. An
        action an older gpuwise began names one of MIG Manager's own configs: nothing to write."""
        if "migDevices" not in details:
            return None
        devices: mig_parted.Entry = json.loads(details["migDevices"])

        async def ready() -> str | None:
            ref = ctx.settings.nodes.mig.config_map
            return await publish(ctx.kube, ref, details["node"], details["migConfig"], devices)

        return ready

    async def admit(self, job: JobView, plan: Plan, ctx: ActContext) -> Plan | Refusal:
        """Stop nothing unless some node can serve the slices now; prefer that node for the workers."""
        try:
            choice = await find_slices(ctx.kube, job, plan.details, ctx.settings.nodes)
        except NoMigNodeError as exc:
            return Refusal("NoMigNode", str(exc))
        return prefer(plan, [choice.node])

    async def _choose(self, job: JobView, record: ActionRecord, ctx: ActContext) -> Progress:
        profile = record.details["migProfile"]
        try:
            choice = await find_slices(ctx.kube, job, record.details, ctx.settings.nodes)
        except NoMigNodeError as exc:
            raise ActionFailed("NoMigNode", str(exc)) from exc
        chosen = {"node": choice.node, "migConfig": choice.config, "previousMigConfig": choice.previous}
        if not choice.changes_config:
            return Progress(True, f"node {choice.node} has free {profile} slices: no MIG change needed", chosen)
        chosen["migDevices"] = json.dumps(choice.devices, separators=(",", ":"))
        chosen["migGpus"] = ",".join(str(i) for i in choice.changed)
        message = (
            f"node {choice.node}: MIG config {choice.previous} → {choice.config}, repartitioning GPU(s) "
            f"{chosen['migGpus']} only ({choice.instance_changes} instance changes, "
            f"{len(choice.evictions)} pod(s) to evict)"
        )
        return Progress(False, message, chosen)

    async def undo(self, job: JobView, record: ActionRecord, ctx: ActContext) -> Progress:
        details = record.details
        if "node" not in details:
            return READY
        config, previous = details["migConfig"], details["previousMigConfig"]
        return await nodes.restore_node(
            ctx.kube,
            details["node"],
            holder(job, record),
            back=config_change(previous, ctx.settings.nodes.mig.config_timeout),
            ours=lambda node: _labels(node).get(LABEL_MIG_CONFIG) == config,
            details=details,
            now=ctx.now,
        )


MIG_REPARTITION = MigRepartition()
