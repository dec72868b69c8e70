"""Put the telemetry sidecar into a pod spec: the one function both injection paths use.

TrainingJobs get it when the operator renders their Job; any other pod labelled
`gpuwise.io/inject: "true"` gets it from the mutating webhook. Both call `inject_sidecar()`,
so a pod looks the same whichever way it came.

The sidecar is a *native* sidecar (an init container with `restartPolicy: Always`, Kubernetes
≥ 1.29): a classic sidecar container would keep a batch Job from ever completing. Its startup
probe holds the trainer back until the sidecar has bound the step socket and copied the
instrumentation package into the shared volume, so the trainer never races it.

The trainer also gets the pod's checkpoint-request annotation as a read-only downward-API file:
the operator asks for a checkpoint by annotating the pod, and the instrumentation library reads
the file at step boundaries (the kubelet refreshes it within its sync period, about a minute).
The kubelet projects it, so the sidecar needs neither a Kubernetes client nor RBAC to watch its pod.

The sidecar labels its DCGM device series with the container the GPUs work for, as dcgm-exporter
does: the trainer of a TrainingJob; on the webhook path, the one container that requests an
`nvidia.com/*` GPU resource. With none, or several, the label is left out rather than guessed.

The sidecar sees every GPU of the node and exports only the pod's: the trainer names them in the
shared volume (`--pod-gpus-dir`, its container's visible devices), and until it does, the sidecar
exports the node's GPUs only where they are as many as that container's `nvidia.com/gpu`
(`--requested-gpus`). See `gpuwise.sidecar.pod_gpus`.
"""

from __future__ import annotations

import copy
from typing import Any

from gpuwise import wiring
from gpuwise.api.trainingjob import Instrumentation
from gpuwise.kube.resources import GPU_RESOURCE, container_gpu_resources
from gpuwise.operator.config import SidecarSettings

JsonDict = dict[str, Any]


def _downward(field_path: str) -> JsonDict:
    return {"fieldRef": {"fieldPath": field_path}}


def gpu_container(pod_spec: JsonDict) -> str | None:
    """The name of the one container requesting a GPU, MIG slice or GPU share; None for none or several.

    Init containers count too: one holding a GPU makes the pod's GPU user ambiguous.
    """
    users: list[str] = [
        container.get("name", "")
        for container in (*pod_spec.get("initContainers", []), *pod_spec.get("containers", []))
        if container_gpu_resources(container) and container.get("name") != wiring.SIDECAR_CONTAINER
    ]
    return (users[0] or None) if len(users) == 1 else None


def requested_gpus(pod_spec: JsonDict, container_name: str | None) -> int | None:
    """The whole GPUs (`nvidia.com/gpu`) the named container asks for; None for none, or no such container."""
    for container in (*pod_spec.get("initContainers", []), *pod_spec.get("containers", [])):
        if container_name and container.get("name") == container_name:
            return container_gpu_resources(container).get(GPU_RESOURCE)
    return None


def sidecar_container(
    settings: SidecarSettings,
    sample_interval: float,
    trainingjob: str | None,
    gpu_user: str | None = None,
    requested: int | None = None,
) -> JsonDict:
    """The native sidecar container exporting NVML and step metrics on :9400.

    `gpu_user`: the container the pod's GPUs work for (the `container` label), or None: no label.
    `requested`: the GPUs that container requests, or None: the sidecar exports the node's GPUs only
    once a trainer has named the pod's.
    """
    index_path = f"metadata.annotations['{wiring.JOB_COMPLETION_INDEX_ANNOTATION}']"
    env: list[JsonDict] = [
        {"name": wiring.ENV_POD_NAME, "valueFrom": _downward("metadata.name")},
        {"name": wiring.ENV_POD_NAMESPACE, "valueFrom": _downward("metadata.namespace")},
        {"name": wiring.ENV_NODE_NAME, "valueFrom": _downward("spec.nodeName")},
        {"name": wiring.ENV_WORKER_INDEX, "valueFrom": _downward(index_path)},
        {
            "name": wiring.ENV_TRAININGJOB,
            **(
                {"value": trainingjob}
                if trainingjob
                else {"valueFrom": _downward(f"metadata.labels['{wiring.LABEL_TRAININGJOB}']")}
            ),
        },
        *([{"name": wiring.ENV_CONTAINER, "value": gpu_user}] if gpu_user else []),
        # The sidecar requests no GPU, so the device plugin mounts none: this asks the NVIDIA
        # container runtime for every GPU of the node, read-only through NVML ("utility").
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
    ]
    probe_period = 1
    return {
        "name": wiring.SIDECAR_CONTAINER,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy.value,
        "restartPolicy": "Always",
        "args": [
            "sidecar",
            "--backend=nvml",
            f"--port={wiring.METRICS_PORT}",
            f"--socket={wiring.STEP_SOCKET}",
            f"--instrument-dir={wiring.INSTRUMENT_PYTHONPATH}",
            f"--interval={sample_interval:g}",
            f"--pod-gpus-dir={wiring.POD_GPUS_DIR}",
            *([f"--requested-gpus={requested}"] if requested else []),
        ],
        "env": env,
        "ports": [{"name": wiring.METRICS_PORT_NAME, "containerPort": wiring.METRICS_PORT, "protocol": "TCP"}],
        "startupProbe": {
            "httpGet": {"path": wiring.HEALTH_PATH, "port": wiring.METRICS_PORT_NAME},
            "periodSeconds": probe_period,
            "failureThreshold": max(1, settings.startup_timeout_seconds // probe_period),
        },
        "livenessProbe": {
            "httpGet": {"path": wiring.HEALTH_PATH, "port": wiring.METRICS_PORT_NAME},
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "resources": settings.resources.to_k8s(),
        "securityContext": {
            "runAsNonRoot": True,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": wiring.RUNTIME_VOLUME, "mountPath": wiring.RUNTIME_DIR}],
    }


def podinfo_volume() -> JsonDict:
    """The downward-API volume holding the pod's checkpoint request (an empty file without one)."""
    annotation = f"metadata.annotations['{wiring.ANNOTATION_CHECKPOINT_REQUEST}']"
    item = {"path": wiring.CHECKPOINT_REQUEST_FILE.rsplit("/", 1)[1], "fieldRef": {"fieldPath": annotation}}
    return {"name": wiring.PODINFO_VOLUME, "downwardAPI": {"items": [item]}}


def trainer_env(instrumentation: Instrumentation, user_env: list[JsonDict]) -> list[JsonDict]:
    """What a training container needs to reach the sidecar (and, with Auto, to self-instrument)."""
    env: list[JsonDict] = [
        {"name": wiring.ENV_SOCKET, "value": wiring.STEP_SOCKET},
        {"name": wiring.ENV_INSTRUMENT, "value": instrumentation.value.lower()},
        {"name": wiring.ENV_CHECKPOINT_REQUEST_FILE, "value": wiring.CHECKPOINT_REQUEST_FILE},
        {"name": wiring.ENV_POD_GPUS_DIR, "value": wiring.POD_GPUS_DIR},
    ]
    if instrumentation is not Instrumentation.DISABLED:
        # Manual users import gpuwise.instrument themselves; it must be importable for them too.
        user_path = next((e.get("value") for e in user_env if e.get("name") == "PYTHONPATH"), None)
        path = wiring.INSTRUMENT_PYTHONPATH + (f":{user_path}" if user_path else "")
        env.append({"name": "PYTHONPATH", "value": path})
    return env


def inject_sidecar(
    pod_spec: JsonDict,
    *,
    settings: SidecarSettings,
    instrumentation: Instrumentation = Instrumentation.AUTO,
    sample_interval: float = 1.0,
    trainingjob: str | None = None,
    gpu_user: str | None = None,
) -> JsonDict:
    """Return a copy of `pod_spec` with the sidecar, the shared volume and the trainer wiring.

    `gpu_user` names the container the GPUs work for (a TrainingJob's trainer); without it, the one
    container of the pod that requests a GPU resource (`gpu_container`), if exactly one does.

    Idempotent: a spec that already has the sidecar is returned unchanged, so a pod that passes
    the webhook twice (or a rendered TrainingJob pod that is also labelled) gets one sidecar.
    """
    spec = copy.deepcopy(pod_spec)
    init_containers: list[JsonDict] = spec.setdefault("initContainers", [])
    if any(c.get("name") == wiring.SIDECAR_CONTAINER for c in init_containers):
        return spec
    # Native sidecars start in order: put ours first so user init containers can already report.
    user = gpu_user or gpu_container(spec)
    sidecar = sidecar_container(settings, sample_interval, trainingjob, user, requested_gpus(spec, user))
    init_containers.insert(0, sidecar)
    spec.setdefault("volumes", []).extend([{"name": wiring.RUNTIME_VOLUME, "emptyDir": {}}, podinfo_volume()])
    mounts: list[JsonDict] = [
        {"name": wiring.RUNTIME_VOLUME, "mountPath": wiring.RUNTIME_DIR},
        {"name": wiring.PODINFO_VOLUME, "mountPath": wiring.PODINFO_DIR, "readOnly": True},
    ]
    for container in spec.get("containers", []):
        user_env: list[JsonDict] = container.get("env", [])
        ours = trainer_env(instrumentation, user_env)
        ours_names = {e["name"] for e in ours}
        container["env"] = ours + [e for e in user_env if e.get("name") not in ours_names]
        container.setdefault("volumeMounts", []).extend(dict(mount) for mount in mounts)
    return spec
