"""Pack: run a light job on a share of a GPU instead of a whole one, next to other light jobs.

Two ways to share, both NVIDIA's and both chosen by a platform team per node:

- **time-slicing**, on nodes labelled `gpuwise.io/gpu-partitioning: time-slicing`: the device
  plugin's config named in `actions.nodes.timeSlicing.config` advertises every GPU as `replicas`
  shares (`nvidia.com/gpu.shared`); gpuwise sets `nvidia.com/device-plugin.config=<config>` on a
  node that does not run it yet, and the job requests one share.
- **MIG slices** that already exist and are free (when the recommendation names `migProfile`):
  the job requests `nvidia.com/mig-<profile>`. Carving new slices is MigRepartition's work.

Where the job goes is the packing planner's decision (`gpuwise.decide.packing`, policy
`actions.nodes.packingPolicy`: gpuwise by default, bestfit as the baseline), over the opted-in
nodes and what their pods request, each share counted as `1000 / replicas` milli-GPU. A node is
switched to time-slicing only when no other workload holds its GPUs: Pack never evicts anyone
to make room, and switches at most one node per action (cordoned meanwhile, through the same
step as MIG changes, :func:`gpuwise.act.nodes.apply_on_idle_node`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from gpuwise import wiring
from gpuwise.act import mig_repartition, nodes
from gpuwise.act.action_settings import ActionSettings
from gpuwise.act.machine import READY, ActContext, Action, ActionFailed, JobView, Plan, Progress, Refusal
from gpuwise.act.node_settings import NodeActionSettings, TimeSlicingSettings
from gpuwise.api.kinds import GPU_SHARE_CHANGE, MIG_PROFILE_CHANGE, SHARE_CHANGE, TIME_SLICING, ActionKind
from gpuwise.api.trainingjob import ActionRecord, Recommendation
from gpuwise.decide.packing.cluster import MILLI, Nodes, Placement, PodRequest, Pods
from gpuwise.decide.packing.fit import placement
from gpuwise.decide.packing.policies import PlacementContext
from gpuwise.decide.packing.registry import make_policy
from gpuwise.decide.packing.state import ClusterState, PlacementError
from gpuwise.hardware.gpu_specs import GPU_PRODUCT_LABEL
from gpuwise.kube import job_overrides
from gpuwise.kube.client import Kube
from gpuwise.kube.resources import GPU_RESOURCE, cpu_cores, gpu_resources

JsonDict = dict[str, Any]

LABEL_DEVICE_PLUGIN_CONFIG: Final = "nvidia.com/device-plugin.config"
# The node label gpuwise.io/gpu-partitioning names the way of sharing as a recommendation does.
PARTITIONING_TIME_SLICING: Final = TIME_SLICING
_BYTES: Final = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_BYTES_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def mebibytes(quantity: int | str | None) -> int:
    """MiB in a memory quantity ("512Mi", "16G", 1048576), rounded up; 0 when unset."""
    if quantity is None:
        return 0
    match = re.fullmatch(r"([0-9.]+)([kMGT]i?)?", str(quantity).strip())
    if match is None:
        raise ValueError(f"{quantity!r} is not a memory quantity (examples: 512Mi, 16Gi)")
    return -(-int(float(match.group(1)) * {**_BYTES, **_BYTES_BINARY}[match.group(2) or ""]) // 2**20)


def _requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """Milli-CPU and MiB a pod's containers request (limits where no request is set)."""
    cpu = memory = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        cpu += round(1000 * (cpu_cores(amounts.get("cpu")) or 0.0))
        memory += mebibytes(amounts.get("memory"))
    return cpu, memory


# --- the planner's view of the time-sliced nodes --------------------------------------------


def _gpu_request(pod: Mapping[str, Any], shared: TimeSlicingSettings) -> tuple[int, int]:
    """(num_gpu, gpu_milli) as the planner counts a pod: whole GPUs, or its shares of one GPU."""
    gpus = gpu_resources(dict(pod))
    if gpus.get(GPU_RESOURCE):
        return gpus[GPU_RESOURCE], MILLI
    if gpus.get(shared.resource):
        return 1, min(MILLI, gpus[shared.resource] * MILLI // shared.replicas)
    return 0, 0


@dataclass(frozen=True)
class Cluster:
    """The opted-in nodes with what runs on them, and the shapes of the workload they run."""

    state: ClusterState
    workload: Pods
    switch_needed: frozenset[str]  # nodes that do not run the time-slicing config yet


def cluster_view(
    all_nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    shared: TimeSlicingSettings,
    *,
    job: str,
    extra_shapes: Sequence[tuple[int, int, int, int]] = (),
    selector: Mapping[str, str] | None = None,
) -> tuple[Cluster, dict[str, str]]:
    """The planner's view of the time-sliced (or switchable) nodes, and why other nodes are out.

    `job` ("namespace/name") is the TrainingJob to place: its own pods are not counted (its restart
    stops them), and nodes its `selector` (its pods' nodeSelector) does not select are out.
    `extra_shapes` ((milli-CPU, MiB, GPUs, milli-GPU) each) join the running pods in the workload
    whose fragmentation the gpuwise and FGD policies weigh placements by. A running pod that
    selects a GPU model (nodeSelector `nvidia.com/gpu.product`) is expected to keep coming on
    that model only, so gpuwise's policy leaves that model's capacity to it where it can.
    """
    reasons: dict[str, str] = {}
    usable: list[Mapping[str, Any]] = []
    gpu_pods = [p for p in pods if nodes.holds_gpus(dict(p)) and nodes.trainingjob_of(dict(p)) != job]
    busy = {(p.get("spec") or {}).get("nodeName") for p in gpu_pods}
    for node in all_nodes:
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        foreign = name in busy
        unselected = [f"{key}={value}" for key, value in (selector or {}).items() if labels.get(key) != value]
        if labels.get(mig_repartition.LABEL_PARTITIONING) != PARTITIONING_TIME_SLICING:
            reasons[name] = f"not opted in (label {mig_repartition.LABEL_PARTITIONING}={PARTITIONING_TIME_SLICING})"
        elif unselected:
            reasons[name] = f"not selected by the job's nodeSelector ({', '.join(unselected)})"
        elif (node.get("spec") or {}).get("unschedulable"):
            reasons[name] = "cordoned"
        elif labels.get(LABEL_DEVICE_PLUGIN_CONFIG) != shared.config and foreign:
            reasons[name] = "runs whole-GPU pods; Pack evicts nobody to switch it to time-slicing"
        elif labels.get(LABEL_DEVICE_PLUGIN_CONFIG) != shared.config and nodes.do_not_disrupt(dict(node)):
            reasons[name] = f"annotated {wiring.ANNOTATION_DO_NOT_DISRUPT}: not switched to time-slicing"
        else:
            usable.append(node)
    allocatable = [(n.get("status") or {}).get("allocatable") or {} for n in usable]
    models = [(n["metadata"].get("labels") or {}).get(GPU_PRODUCT_LABEL, "unknown") for n in usable]
    topology = Nodes.build(
        names=[n["metadata"]["name"] for n in usable],
        cpu_milli=[round(1000 * (cpu_cores(a.get("cpu")) or 0.0)) for a in allocatable],
        memory_mib=[mebibytes(a.get("memory")) for a in allocatable],
        gpus=[int((n["metadata"].get("labels") or {}).get(mig_repartition.LABEL_GPU_COUNT, "0") or 0) for n in usable],
        models=models,
    )
    state = ClusterState(topology)
    index = {name: i for i, name in enumerate(topology.names)}
    every_model = np.ones(len(topology.models), dtype=np.bool_)
    shapes: list[tuple[int, int, int, int]] = []
    accepted: list[tuple[str, ...]] = []
    for number, pod in enumerate(gpu_pods):
        request = PodRequest(*_requests(pod), *_gpu_request(pod, shared), allowed_models=every_model)
        spec = pod.get("spec") or {}
        model = (spec.get("nodeSelector") or {}).get(GPU_PRODUCT_LABEL)
        if model is None or model in topology.models:
            shapes.append((request.cpu_milli, request.memory_mib, request.num_gpu, request.gpu_milli))
            accepted.append(() if model is None else (model,))
        at = index.get(spec.get("nodeName") or "")
        if at is None:
            continue  # runs elsewhere: part of the workload to expect, not of these nodes
        try:
            state.bind(number, request, _fullest_fit(state, request, at))
        except PlacementError:
            reasons.setdefault(topology.names[at], "runs more than its allocatable shows")
    shapes += extra_shapes  # the pods to place: what is expected to keep coming
    accepted += [()] * len(extra_shapes)  # the nodes are the ones the job selects already
    workload = Pods.build(
        names=[str(i) for i in range(len(shapes))],
        cpu_milli=[s[0] for s in shapes],
        memory_mib=[s[1] for s in shapes],
        num_gpu=[s[2] for s in shapes],
        gpu_milli=[s[3] for s in shapes],
        gpu_models=accepted,
        models=topology.models,
    )
    switch = frozenset(
        n["metadata"]["name"]
        for n in usable
        if (n["metadata"].get("labels") or {}).get(LABEL_DEVICE_PLUGIN_CONFIG) != shared.config
    )
    return Cluster(state, workload, switch), reasons


def _fullest_fit(state: ClusterState, request: PodRequest, node: int) -> Placement:
    """Where a running share most likely is: the fullest GPU it fits (what the device plugin fills)."""
    if not request.shares_gpu:
        return placement(state, request, node)
    free = state.gpu_free[node]
    fitting = np.flatnonzero(free >= request.gpu_milli)
    if not len(fitting):
        raise PlacementError("no GPU has room")
    return Placement(node, (int(fitting[np.argmin(free[fitting])]),))


def place_workers(cluster: Cluster, request: PodRequest, workers: int, policy: str) -> list[str] | None:
    """The node of each worker, placed one after another by the planner; None if one fits nowhere."""
    state = cluster.state
    # Ties go to the first node in name order: deterministic, and it consolidates.
    choose = make_policy(
        policy, PlacementContext.for_pods(state, cluster.workload, np.argsort(np.argsort(state.nodes.names)))
    )
    rng = np.random.default_rng(0)
    chosen: list[str] = []
    for worker in range(workers):
        where = choose(state, request, rng)
        if where is None:
            return None
        state.bind(-1 - worker, request, where)
        chosen.append(state.nodes.names[where.node])
    return chosen


class NoSharedGpuError(Exception):
    """No time-sliced GPU can take the job's workers; the message says why."""


async def find_shares(
    kube: Kube, job: JobView, workers: int, settings: NodeActionSettings
) -> tuple[list[str], str | None]:
    """Each worker's node, by the packing planner, and the one node that must first be switched to
    time-slicing (None when the shares exist already); raises :class:`NoSharedGpuError`."""
    shared = settings.time_slicing
    candidates = await kube.list(
        "v1", "Node", label_selector=f"{mig_repartition.LABEL_PARTITIONING}={PARTITIONING_TIME_SLICING}"
    )
    if not candidates:
        raise NoSharedGpuError(
            "no node is opted in for time-slicing "
            f"(label {mig_repartition.LABEL_PARTITIONING}={PARTITIONING_TIME_SLICING})"
        )
    worker = {"spec": {"containers": [{"resources": job.spec.trainer.resources_per_node.to_k8s()}]}}
    shape = (*_requests(worker), 1, MILLI // shared.replicas)
    pods = await kube.list("v1", "Pod")  # every GPU pod: the workload the policy expects to keep coming
    cluster, reasons = cluster_view(
        candidates,
        pods,
        shared,
        job=f"{job.namespace}/{job.name}",
        extra_shapes=[shape] * workers,
        selector=job_overrides.node_selector(job.spec.pod.node_selector, job.overrides),
    )
    request = PodRequest(*shape, allowed_models=np.ones(len(cluster.state.nodes.models), dtype=np.bool_))
    chosen = None
    if len(cluster.state.nodes):
        # gpuwise's policy rehearses the cluster's mix first (a second or more): off the event loop.
        chosen = await asyncio.to_thread(place_workers, cluster, request, workers, settings.packing_policy)
    if chosen is None:
        why = "; ".join(f"{node}: {reason}" for node, reason in sorted(reasons.items()))
        raise NoSharedGpuError(f"no time-sliced GPU has room for {workers} worker(s)" + (f" ({why})" if why else ""))
    switch = sorted(set(chosen) & cluster.switch_needed)
    if len(switch) > 1:
        raise NoSharedGpuError(
            f"the workers would need {len(switch)} nodes switched to time-slicing; Pack switches one"
        )
    return chosen, (switch[0] if switch else None)


def _no_free_slices(details: Mapping[str, str]) -> str:
    return (
        f"no node has {details.get('workers', '1')} free {details.get('migProfile')} slice(s); "
        "MigRepartition can make them"
    )


def _share_too_small(recommendation: Recommendation, shared: TimeSlicingSettings) -> Refusal | None:
    """Whether one time-sliced replica is less than the job needs (`changes.gpuShare`): time-slicing
    isolates no memory, so a job bigger than its share could run its neighbours out of memory."""
    text = recommendation.changes.get(GPU_SHARE_CHANGE)
    if text is None:
        return None
    try:
        needed = float(text)
    except ValueError:
        return Refusal("BadRecommendation", f"changes.{GPU_SHARE_CHANGE} is {text!r}, not a share of a GPU (0-1)")
    if needed <= 1 / shared.replicas:
        return None
    return Refusal(
        "ShareTooSmall",
        f"the job needs {needed:.0%} of a GPU and a time-sliced share is 1/{shared.replicas} of one "
        "(operator settings actions.nodes.timeSlicing.replicas, and the device plugin config it names)",
    )


# --- the action -----------------------------------------------------------------------------


def time_slicing_change(config: str | None, shared: TimeSlicingSettings, timeout: str) -> nodes.LabelChange:
    """Ask the device plugin for `config` (None: its default); done when the shares appear (or go)."""

    def answer(node: JsonDict) -> tuple[nodes.Outcome, str]:
        offered = int(((node.get("status") or {}).get("allocatable") or {}).get(shared.resource, 0))
        if (offered > 0) == (config == shared.config):
            return nodes.Outcome.DONE, f"the device plugin offers {offered} {shared.resource}"
        return nodes.Outcome.WAITING, f"the device plugin has not applied config {config or '(default)'} yet"

    return nodes.LabelChange(
        labels={LABEL_DEVICE_PLUGIN_CONFIG: config},
        describe=f"device plugin config {config or '(default)'}",
        answer=answer,
        timeout=timeout,
        failed_reason="DevicePluginConfigFailed",
        timeout_reason="DevicePluginConfigTimeout",
    )


class Pack(Action):
    kind = ActionKind.PACK
    prepares_nodes = True

    def plan(self, job: JobView, recommendation: Recommendation, settings: ActionSettings) -> Plan | Refusal:
        if recommendation.changes.get(MIG_PROFILE_CHANGE):  # onto free MIG slices: MIG's target, no repartition
            planned = mig_repartition.MIG_REPARTITION.plan(job, recommendation, settings)
            if isinstance(planned, Refusal):
                return planned
            return Plan(planned.target, planned.message.replace("Move", "Pack"), True, planned.changes, planned.details)
        refusal = mig_repartition.not_one_gpu_per_worker(job)
        if refusal is not None:
            return refusal
        shared = settings.nodes.time_slicing
        if shared.config is None:
            return Refusal(
                "NoTimeSlicingConfig",
                "no time-slicing config is set (operator settings actions.nodes.timeSlicing.config)",
            )
        refusal = _share_too_small(recommendation, shared)
        if refusal is not None:
            return refusal
        current = job.overrides
        target = current.model_copy(
            update={
                "resources": {**current.resources, shared.resource: "1"},
                "remove_resources": sorted({*current.remove_resources, GPU_RESOURCE} - {shared.resource}),
            }
        )
        workers = job.spec.trainer.num_nodes
        return Plan(
            target=target,
            message=f"Share a time-sliced GPU (1/{shared.replicas}) for each of the {workers} worker(s).",
            changes={SHARE_CHANGE: TIME_SLICING},
            details={SHARE_CHANGE: TIME_SLICING, "workers": str(workers)},
        )

    async def prepare(self, job: JobView, record: ActionRecord, ctx: ActContext) -> Progress:
        details = record.details
        if details.get(SHARE_CHANGE) != TIME_SLICING:
            return await self._onto_free_slices(job, record, ctx)
        shared = ctx.settings.nodes.time_slicing
        if "nodes" not in details:
            return await self._choose(job, record, ctx)
        switch = details.get("switchNode")
        if not switch or details.get("applied") == "true":
            return READY
        return await nodes.apply_on_idle_node(
            ctx.kube,
            switch,
            mig_repartition.holder(job, record),
            job=f"{job.namespace}/{job.name}",
            change=time_slicing_change(shared.config, shared, shared.config_timeout),
            details=details,
            now=ctx.now,
            drain_timeout=ctx.settings.nodes.drain_timeout,
        )

    async def admit(self, job: JobView, plan: Plan, ctx: ActContext) -> Plan | Refusal:
        """Stop nothing unless some node can take the shares (or has the free slices) now; prefer
        the nodes the planner chose for the workers."""
        try:
            if plan.details.get(SHARE_CHANGE) == TIME_SLICING:
                workers = int(plan.details.get("workers", "1"))
                chosen, _ = await find_shares(ctx.kube, job, workers, ctx.settings.nodes)
                return mig_repartition.prefer(plan, chosen)
            choice = await mig_repartition.find_slices(ctx.kube, job, plan.details, ctx.settings.nodes)
        except (NoSharedGpuError, mig_repartition.NoMigNodeError) as exc:
            return Refusal("NoSharedGpu", str(exc))
        if choice.changes_config:
            return Refusal("NoFreeMigSlices", _no_free_slices(plan.details))
        return mig_repartition.prefer(plan, [choice.node])

    async def _choose(self, job: JobView, record: ActionRecord, ctx: ActContext) -> Progress:
        try:
            chosen, switch = await find_shares(
                ctx.kube, job, int(record.details.get("workers", "1")), ctx.settings.nodes
            )
        except NoSharedGpuError as exc:
            raise ActionFailed("NoSharedGpu", str(exc)) from exc
        placed = {"nodes": ",".join(chosen), "policy": ctx.settings.nodes.packing_policy}
        if switch is None:
            return Progress(True, f"packed onto {', '.join(sorted(set(chosen)))}", placed)
        node = await nodes.get_node(ctx.kube, switch)
        previous = (node["metadata"].get("labels") or {}).get(LABEL_DEVICE_PLUGIN_CONFIG, "")
        placed |= {"switchNode": switch, "previousDevicePluginConfig": previous}
        config = ctx.settings.nodes.time_slicing.config
        return Progress(False, f"node {switch}: switching to time-slicing config {config}", placed)

    async def _onto_free_slices(self, job: JobView, record: ActionRecord, ctx: ActContext) -> Progress:
        if "node" in record.details:
            return READY
        progress = await mig_repartition.MIG_REPARTITION.prepare(job, record, ctx)
        if progress.details.get("migConfig") != progress.details.get("previousMigConfig"):
            raise ActionFailed("NoFreeMigSlices", f"{_no_free_slices(record.details)} ({progress.message})")
        return progress

    async def undo(self, job: JobView, record: ActionRecord, ctx: ActContext) -> Progress:
        details = record.details
        switch = details.get("switchNode")
        if not switch:
            return READY
        shared = ctx.settings.nodes.time_slicing
        previous = details.get("previousDevicePluginConfig") or None
        return await nodes.restore_node(
            ctx.kube,
            switch,
            mig_repartition.holder(job, record),
            back=time_slicing_change(previous, shared, shared.config_timeout),
            ours=lambda node: (node["metadata"].get("labels") or {}).get(LABEL_DEVICE_PLUGIN_CONFIG) == shared.config,
            details=details,
            now=ctx.now,
        )


PACK = Pack()
