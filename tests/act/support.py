"""Objects the node-side action tests write into the emulator, as a cluster would hold them."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import threading
from collections import Counter
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any, Self

import yaml
from kubernetes import config, dynamic
from kubernetes.client.exceptions import ApiException

from gpuwise import wiring
from gpuwise.act.action_settings import ActionSettings
from gpuwise.act.machine import ActContext, Action, ActionFailed, JobView, Plan, Progress
from gpuwise.api.kinds import ActionKind
from gpuwise.api.trainingjob import ActionRecord, ActionState, Recommendation, TrainingJobSpec
from gpuwise.hardware.mig_profiles import gpu_model
from gpuwise.kube.client import Kube
from gpuwise.kube.job_overrides import NONE
from tests.support import mig_parted_spec

READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


def node(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": dict(spec),
    }


def pod(
    name: str,
    on: str,
    *,
    gpus: dict[str, int] | None = None,
    labels: dict[str, str] | None = None,
    do_not_disrupt: bool = False,
    status: dict[str, Any] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """A pod bound to node `on`, asking for `gpus` (e.g. {"nvidia.com/gpu": 1}), running and ready."""
    annotations = {wiring.ANNOTATION_DO_NOT_DISRUPT: "true"} if do_not_disrupt else {}
    limits = {resource: str(count) for resource, count in (gpus or {}).items()}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}, "annotations": annotations},
        "spec": {"nodeName": on, "containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]},
        "status": status or READY,
    }


def budget(name: str, selector: dict[str, Any], namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": selector, **spec},
    }


def mig_node(
    name: str,
    *,
    config: str = "all-disabled",
    state: str | None = "success",
    gpus: int = 1,
    product: str = "NVIDIA-H100-80GB-HBM3",
    opted_in: bool = True,
    allocatable: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A GPU node as GPU Feature Discovery and MIG Manager label it."""
    labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus), "nvidia.com/mig.config": config}
    if state is not None:
        labels["nvidia.com/mig.config.state"] = state
    if opted_in:
        labels["gpuwise.io/gpu-partitioning"] = "mig"
    body = node(name, labels)
    body["status"] = {"allocatable": {"cpu": "64", "memory": "512Gi", **(allocatable or {})}}
    return body


def time_slicing_node(
    name: str,
    *,
    switched: bool = True,
    opted_in: bool = True,
    gpus: int = 1,
    product: str = "NVIDIA-H100-80GB-HBM3",
    **spec: Any,
) -> dict[str, Any]:
    """A GPU node opted in for time-slicing (or not), running the device plugin's shared config
    `shared-4` (4 replicas per GPU, renameByDefault) already or not yet."""
    labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus)}
    if opted_in:
        labels["gpuwise.io/gpu-partitioning"] = "time-slicing"
    if switched:
        labels["nvidia.com/device-plugin.config"] = "shared-4"
    body = node(name, labels, **spec)
    gpu = {"nvidia.com/gpu.shared": str(4 * gpus)} if switched else {"nvidia.com/gpu": str(gpus)}
    body["status"] = {"allocatable": {"cpu": "32", "memory": "128Gi", **gpu}}
    return body


class NodeAgent:
    """A node-side NVIDIA component played against the emulator: it watches the nodes (polling,
    every 50 ms) and reacts to their labels the way the real one does. Like the real ones, it
    moves no pods."""

    def __init__(self, kubeconfig: str) -> None:
        self.client = dynamic.DynamicClient(config.new_client_from_config(config_file=kubeconfig))
        self.nodes = self.client.resources.get(api_version="v1", kind="Node")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)
        self.passes = 0  # full passes over the nodes so far

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for item in self.nodes.get().items:
                body = item.to_dict()
                self.react(body["metadata"]["name"], body["metadata"].get("labels") or {})
            self.passes += 1

    async def caught_up(self, timeout: float = 10.0) -> None:
        """Return once a whole pass over the nodes began after this call: the agent has seen and
        answered the nodes as they are now (a fixed sleep is not enough on a loaded machine)."""
        wanted = self.passes + 2
        deadline = asyncio.get_running_loop().time() + timeout
        while self.passes < wanted:
            assert asyncio.get_running_loop().time() < deadline, f"{type(self).__name__} made no pass in {timeout} s"
            await asyncio.sleep(0.02)

    def react(self, name: str, labels: dict[str, str]) -> None:
        raise NotImplementedError

    def patch(self, name: str, labels: dict[str, str] | None = None, allocatable: dict[str, Any] | None = None) -> None:
        if allocatable is not None:
            body = {"status": {"allocatable": allocatable}}
            self.nodes.status.patch(name=name, body=body, content_type="application/merge-patch+json")
        if labels is not None:
            body = {"metadata": {"labels": labels}}
            self.nodes.patch(name=name, body=body, content_type="application/merge-patch+json")


MIG_CONFIG_MAP = ("gpu-operator", "custom-mig-config")  # the ClusterPolicy's migManager.config.name


def mig_config_map(extra: dict[str, Any] | None = None, *, model: str = "H100-80GB") -> dict[str, Any]:
    """MIG Manager's custom ConfigMap as a platform team writes it: a copy of NVIDIA's defaults
    (all-disabled, all-enabled, all-<profile> with as many of it as one GPU holds) and `extra`."""
    profiles = gpu_model(model).profiles
    configs: dict[str, Any] = {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
        **{
            f"all-{p.name}": [{"devices": "all", "mig-enabled": True, "mig-devices": {p.name: p.max_count}}]
            for p in profiles
        },
        **(extra or {}),
    }
    namespace, name = MIG_CONFIG_MAP
    text = "# maintained by the platform team\n" + yaml.safe_dump({"version": "v1", "mig-configs": configs})
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"config.yaml": text},
    }


class MigManager(NodeAgent):
    """NVIDIA's MIG Manager: when `nvidia.com/mig.config` changes it reports `pending`, reads the
    config from its ConfigMap (MIG_CONFIG_MAP) as nvidia-mig-parted does (tests.support.mig_parted_spec),
    applies it GPU by GPU (`layouts`, what each GPU of each node holds: instances per profile, None
    with MIG off) and reports `success`, publishing the node's slices and whole GPUs in its
    allocatable as the device plugin would — or `failed` for a config it cannot apply (missing,
    invalid) or one matching a pattern in `fail`; a config matching one in `hold` stays `pending`
    until it leaves the set (forever: a wedged MIG Manager). Patterns are fnmatch's (`gpuwise-*`)."""

    def __init__(self, kubeconfig: str, *, fail: Collection[str] = (), hold: Collection[str] = ()) -> None:
        super().__init__(kubeconfig)
        self.fail, self.hold = set(fail), set(hold)
        self.config_maps = self.client.resources.get(api_version="v1", kind="ConfigMap")
        self.applied: dict[str, str] = {}  # node -> the config last asked for
        self.seen: list[tuple[str, str]] = []  # (node, config) in the order they were asked for
        self.layouts: dict[str, list[mig_parted_spec.Layout]] = {}
        self.errors: list[str] = []  # why configs failed, as MIG Manager's log would say

    def _apply(self, name: str, config: str, labels: dict[str, str]) -> list[mig_parted_spec.Layout]:
        namespace, cm = MIG_CONFIG_MAP
        text = self.config_maps.get(name=cm, namespace=namespace).to_dict()["data"]["config.yaml"]
        gpus = int(labels.get("nvidia.com/gpu.count", "1"))
        before = self.layouts.get(name, [None] * gpus)
        return mig_parted_spec.apply(text, config, labels["nvidia.com/gpu.product"], gpus, before)

    def react(self, name: str, labels: dict[str, str]) -> None:
        wanted = labels.get("nvidia.com/mig.config")
        state = labels.get("nvidia.com/mig.config.state")
        if wanted is None or (name not in self.applied and state == "success"):
            self.applied.setdefault(name, wanted or "")  # what the node ran before the test began
            if wanted is not None and name not in self.layouts:
                with contextlib.suppress(ApiException, mig_parted_spec.SpecError, ValueError):
                    self.layouts[name] = self._apply(name, wanted, labels)  # unknown if the test defines none
            return
        if self.applied.get(name) != wanted:
            self.applied[name] = wanted
            self.seen.append((name, wanted))
            self.patch(name, {"nvidia.com/mig.config.state": "pending"})
            return
        if state != "pending" or any(fnmatch.fnmatch(wanted, p) for p in self.hold):
            return
        try:
            if any(fnmatch.fnmatch(wanted, p) for p in self.fail):
                raise mig_parted_spec.SpecError(f"{wanted}: failed on purpose")
            after = self._apply(name, wanted, labels)
        except (ApiException, mig_parted_spec.SpecError, ValueError) as exc:
            self.errors.append(str(exc))
            self.patch(name, {"nvidia.com/mig.config.state": "failed"})
            return
        self.layouts[name] = after
        slices: Counter[str] = Counter()
        for gpu in after:
            slices.update(gpu or {})
        profiles = gpu_model(labels["nvidia.com/gpu.product"]).profiles
        allocatable: dict[str, Any] = {
            p.resource_name: str(slices[p.name]) if slices[p.name] else None for p in profiles
        }
        allocatable["nvidia.com/gpu"] = str(sum(gpu is None for gpu in after)) if None in after else None
        self.patch(name, allocatable=allocatable)
        self.patch(name, {"nvidia.com/mig.config.state": "success"})


class DevicePlugin(NodeAgent):
    """NVIDIA's device plugin with a time-slicing config named `config` (renameByDefault): a node
    labelled `nvidia.com/device-plugin.config=<config>` offers `replicas` shares per GPU."""

    def __init__(self, kubeconfig: str, config: str, replicas: int = 4) -> None:
        super().__init__(kubeconfig)
        self.config, self.replicas = config, replicas
        self.applied: dict[str, str | None] = {}  # node -> the config last acted on
        self.seen: list[tuple[str, str | None]] = []

    def react(self, name: str, labels: dict[str, str]) -> None:
        wanted = labels.get("nvidia.com/device-plugin.config")
        if name not in self.applied:
            self.applied[name] = wanted  # what the node ran before the test began
            return
        if self.applied[name] == wanted:
            return
        self.applied[name] = wanted
        self.seen.append((name, wanted))
        gpus = int(labels.get("nvidia.com/gpu.count", "1"))
        shared = str(gpus * self.replicas) if wanted == self.config else None
        whole = None if wanted == self.config else str(gpus)
        self.patch(name, allocatable={"nvidia.com/gpu.shared": shared, "nvidia.com/gpu": whole})


# --- calling an action's hooks as the runner does -------------------------------------------


def job_view(pods: list[dict[str, Any]] | None = None, num_nodes: int = 1, **trainer: Any) -> JobView:
    """A one-GPU-per-worker TrainingJob default/bert, as the runner shows it to an action."""
    spec = TrainingJobSpec.model_validate(
        {
            "trainer": {
                "image": "x",
                "numNodes": num_nodes,
                "resourcesPerNode": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"nvidia.com/gpu": 1}},
                **trainer,
            }
        }
    )
    body = {"metadata": {"namespace": "default", "name": "bert"}, "spec": spec.to_k8s()}
    return JobView("default", "bert", body, spec, NONE, tuple(pods or ()))


def recommend(kind: ActionKind = ActionKind.MIG_REPARTITION, **changes: str) -> Recommendation:
    return Recommendation(action=kind, finding="OversizedGPU", message="m", changes=changes)


def record_for(plan: Plan, kind: ActionKind) -> ActionRecord:
    """The record the runner keeps for `plan`, in Applying (the job stopped)."""
    now = datetime.now(tz=UTC)
    return ActionRecord(
        id=f"{kind.value.lower()}-1",
        action=kind,
        state=ActionState.APPLYING,
        reason="Applying",
        started_at=now,
        updated_at=now,
        details=dict(plan.details),
    )


async def drive(
    action: Action,
    hook: str,
    job: JobView,
    record: ActionRecord,
    *,
    kube: Kube,
    settings: ActionSettings,
    timeout: float = 10,
) -> tuple[ActionRecord, Progress | ActionFailed]:
    """Call a hook once per cycle, as the runner does, keeping its details, until it is ready or fails."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        ctx = ActContext(kube, settings, datetime.now(tz=UTC))
        try:
            progress = await getattr(action, hook)(job, record, ctx)
        except ActionFailed as failed:
            return record, failed
        record = record.model_copy(update={"details": {**record.details, **progress.details}})
        if progress.ready:
            return record, progress
        assert asyncio.get_running_loop().time() < deadline, f"{hook} not ready: {progress.message}"
        await asyncio.sleep(0.1)
