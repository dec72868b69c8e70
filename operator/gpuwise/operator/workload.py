"""Render a TrainingJob into the objects that run it: an Indexed Job and a headless Service.

Pure functions from a validated spec to Kubernetes manifests, so the rendering is tested without
a cluster and is the same whether called at creation or at a resync.

Pods of an Indexed Job with `subdomain` set get stable DNS names `<job>-<index>.<service>`, so
worker 0 is the rendezvous host and every pod learns its node rank from its completion index.
The environment is the one torchrun and Kubeflow's PyTorchJob users expect.

Pods pass the Pod Security "restricted" level where the spec says nothing about security: gpuwise
fills in the defaults, and `pod_security_refusal()` holds back a Job whose spec loosens them further
than the operator's `podSecurity` setting allows, naming the spec's fields.
"""

from __future__ import annotations

import json
from typing import Any, Final

from gpuwise import wiring
from gpuwise.api.overrides import JobOverrides
from gpuwise.api.trainingjob import PodSettings, Trainer, TrainingJobSpec
from gpuwise.kube import job_overrides, pod_security, queues
from gpuwise.operator import gang
from gpuwise.operator.config import SidecarSettings
from gpuwise.operator.inject import JsonDict, inject_sidecar

TRAINER_CONTAINER: Final = "trainer"
SHM_VOLUME: Final = "gpuwise-shm"
# The spec sections a running job cannot take up without a restart (see the CRD's CEL rules);
# the Job remembers them so a later change can be named field by field.
IMMUTABLE_SECTIONS: Final = ("trainer", "pod", "telemetry")
ANNOTATION_APPLIED_SPEC: Final = f"{wiring.API_GROUP}/applied-spec"
RENDEZVOUS_PORT_NAME: Final = "rendezvous"
# The API server refuses allowPrivilegeEscalation: false beside these: gpuwise leaves it unset then.
_ESCALATING_CAPABILITIES: Final = frozenset({"SYS_ADMIN", "CAP_SYS_ADMIN"})


def labels(name: str) -> dict[str, str]:
    """Labels that tie a child object (and its pods) to its TrainingJob."""
    return {wiring.LABEL_TRAININGJOB: name, wiring.LABEL_MANAGED_BY: "gpuwise"}


def owner_reference(owner: JsonDict) -> JsonDict:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def rendezvous_env(name: str, namespace: str, spec: TrainingJobSpec) -> list[JsonDict]:
    trainer = spec.trainer
    master = f"{name}-0.{name}.{namespace}.svc"
    rank = {"fieldRef": {"fieldPath": f"metadata.annotations['{wiring.JOB_COMPLETION_INDEX_ANNOTATION}']"}}
    port = str(wiring.MASTER_PORT)
    return [
        {"name": "PET_NNODES", "value": str(trainer.num_nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": str(trainer.num_proc_per_node)},
        {"name": "PET_NODE_RANK", "valueFrom": rank},
        {"name": "PET_MASTER_ADDR", "value": master},
        {"name": "PET_MASTER_PORT", "value": port},
        {"name": "MASTER_ADDR", "value": master},
        {"name": "MASTER_PORT", "value": port},
        {"name": "WORLD_SIZE", "value": str(trainer.num_nodes * trainer.num_proc_per_node)},
        {"name": "RANK", "valueFrom": rank},
    ]


def pod_security_context(pod: PodSettings) -> JsonDict:
    """The spec's pod securityContext over the restricted defaults, field by field."""
    defaults: JsonDict = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    return {**defaults, **(pod.security_context.to_k8s() if pod.security_context else {})}


def trainer_security_context(trainer: Trainer) -> JsonDict:
    """The spec's trainer securityContext over the restricted defaults, field by field.

    `capabilities.add` alone keeps the default `drop: [ALL]`. A privileged trainer, or one adding
    SYS_ADMIN, gets no allowPrivilegeEscalation default: the API server refuses false beside them.
    """
    user = trainer.security_context.to_k8s() if trainer.security_context else {}
    capabilities = {"drop": ["ALL"], **user.get("capabilities", {})}
    context: JsonDict = {"allowPrivilegeEscalation": False, **user, "capabilities": capabilities}
    escalating = user.get("privileged") or _ESCALATING_CAPABILITIES & set(capabilities.get("add", []))
    if escalating and "allowPrivilegeEscalation" not in user:
        del context["allowPrivilegeEscalation"]
    return context


def _trainer_container(name: str, namespace: str, spec: TrainingJobSpec) -> JsonDict:
    trainer = spec.trainer
    user_env = [env.to_k8s() for env in trainer.env]
    user_names = {env.name for env in trainer.env}
    # The user's own values win over ours: they may know their rendezvous better.
    env = [e for e in rendezvous_env(name, namespace, spec) if e["name"] not in user_names] + user_env
    container: JsonDict = {
        "name": TRAINER_CONTAINER,
        "image": trainer.image,
        "env": env,
        "resources": trainer.resources_per_node.to_k8s(),
        "ports": [{"name": RENDEZVOUS_PORT_NAME, "containerPort": wiring.MASTER_PORT, "protocol": "TCP"}],
        "volumeMounts": [m.to_k8s() for m in trainer.volume_mounts],
        "securityContext": trainer_security_context(trainer),
    }
    optional = {
        "imagePullPolicy": trainer.image_pull_policy.value if trainer.image_pull_policy else None,
        "command": trainer.command,
        "args": trainer.args,
        "workingDir": trainer.working_dir,
        "envFrom": [e.to_k8s() for e in trainer.env_from] or None,
    }
    container.update({k: v for k, v in optional.items() if v is not None})
    if trainer.shm_size is not None:
        container["volumeMounts"].append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    return container


def pod_spec(name: str, namespace: str, spec: TrainingJobSpec, sidecar: SidecarSettings) -> JsonDict:
    pod = spec.pod
    volumes = [v.to_k8s() for v in pod.volumes]
    if spec.trainer.shm_size is not None:
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": spec.trainer.shm_size}})
    rendered: JsonDict = {
        "restartPolicy": "Never",
        "subdomain": name,
        "securityContext": pod_security_context(pod),
        "containers": [_trainer_container(name, namespace, spec)],
        "volumes": volumes,
    }
    optional: dict[str, Any] = {
        "serviceAccountName": pod.service_account_name,
        "nodeSelector": pod.node_selector or None,
        "tolerations": [t.to_k8s() for t in pod.tolerations] or None,
        "affinity": pod.affinity,
        "imagePullSecrets": [s.to_k8s() for s in pod.image_pull_secrets] or None,
        "priorityClassName": pod.priority_class_name,
        "schedulerName": pod.scheduler(),
        "runtimeClassName": pod.runtime_class_name,
    }
    rendered.update({k: v for k, v in optional.items() if v is not None})
    return inject_sidecar(
        rendered,
        settings=sidecar,
        instrumentation=spec.telemetry.instrumentation,
        sample_interval=spec.telemetry.sample_interval_seconds,
        trainingjob=name,
        gpu_user=TRAINER_CONTAINER,  # the trainer uses the GPUs, whether or not it requests them itself
    )


# The API server refuses an object whose annotations (keys and values) pass 256 KiB.
MAX_ANNOTATION_BYTES: Final = 256 * 1024


def annotations_too_large(obj: JsonDict) -> str | None:
    """Why the API server would refuse `obj`'s annotations, or None. The applied spec is one of a
    Job's: a spec whose trainer, pod and telemetry sections pass the limit cannot run as one."""
    annotations = obj.get("metadata", {}).get("annotations") or {}
    size = sum(len(key.encode()) + len(str(value).encode()) for key, value in annotations.items())
    if size <= MAX_ANNOTATION_BYTES:
        return None
    return (
        f"the Job's annotations would be {size // 1024} KiB, over the API server's 256 KiB: they keep the spec's "
        f"trainer, pod and telemetry sections ({ANNOTATION_APPLIED_SPEC}); move large values (long env values, "
        "inline scripts) into a ConfigMap or Secret and refer to it"
    )


def pod_security_refusal(job: JsonDict, level: pod_security.Level) -> str | None:
    """Why `level` (the operator's podSecurity setting) refuses the Job's pods, naming the spec's fields; or None."""
    template = job["spec"]["template"]
    found = pod_security.violations(template["spec"], level, template["metadata"].get("annotations"))
    if not found:
        return None
    problems = "; ".join(f"{_spec_field(v)}: {v.problem} (podSecurity {v.needs.value} allows it)" for v in found)
    return (
        f"the operator's podSecurity level is {level.value}, and the pods would break it: {problems}. Change the "
        f"spec, or have the platform team set the operator's podSecurity to {pod_security.needed(found).value} first"
    )


def _spec_field(violation: pod_security.Violation) -> str:
    """Where a violation comes from in the TrainingJob: the trainer's fields, the pod's, or gpuwise's own."""
    if violation.container == TRAINER_CONTAINER:
        return f"spec.trainer.{violation.field}"
    if violation.container is None:
        return "spec.pod." + violation.field.removeprefix("metadata.")
    return f"{violation.field} of gpuwise's {violation.container} container"


def immutable_part(spec: TrainingJobSpec) -> JsonDict:
    rendered = spec.to_k8s()
    return {section: rendered.get(section) for section in IMMUTABLE_SECTIONS}


def render_job(
    owner: JsonDict, spec: TrainingJobSpec, sidecar: SidecarSettings, overrides: JobOverrides = job_overrides.NONE
) -> JsonDict:
    """The Job for spec plus what gpuwise's actions changed (`overrides`, see gpuwise.kube.job_overrides).

    A TrainingJob in a Kueue queue gets a Job with its Kueue labels, created suspended whatever the
    overrides say: Kueue starts it on admission (gpuwise.kube.queues). With `spec.pod.gang` the pods
    join the PodGroup `render_pod_group` makes (gpuwise.operator.gang).
    """
    name, namespace = owner["metadata"]["name"], owner["metadata"]["namespace"]
    template: JsonDict = {
        "metadata": {
            "labels": {**spec.pod.labels, **gang.pod_labels(name, spec.pod.gang), **labels(name)},
            "annotations": {**spec.pod.annotations, **gang.pod_annotations(name, spec.pod.gang)},
        },
        "spec": job_overrides.render(pod_spec(name, namespace, spec, sidecar), TRAINER_CONTAINER, overrides),
    }
    run = spec.run_policy
    job_spec: JsonDict = {
        "completionMode": "Indexed",
        "completions": spec.trainer.num_nodes,
        "parallelism": spec.trainer.num_nodes,
        "suspend": run.suspend or overrides.suspend or queues.queue_of(owner) is not None,
        "template": template,
    }
    optional = {
        "backoffLimit": run.backoff_limit,
        "activeDeadlineSeconds": run.active_deadline_seconds,
        "ttlSecondsAfterFinished": run.ttl_seconds_after_finished,
    }
    job_spec.update({k: v for k, v in optional.items() if v is not None})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**queues.job_labels(owner), **labels(name)},
            "annotations": {
                ANNOTATION_APPLIED_SPEC: json.dumps(immutable_part(spec), sort_keys=True, separators=(",", ":")),
                job_overrides.ANNOTATION_APPLIED_OVERRIDES: job_overrides.encode(overrides.placement()),
            },
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": job_spec,
    }


def render_pod_group(owner: JsonDict, spec: TrainingJobSpec) -> JsonDict | None:
    """The gang scheduler's PodGroup for the job's workers (None without `spec.pod.gang`).

    Named after the TrainingJob and owned by it, like the Job: it outlives the Job's replacement
    by an action (the new pods join the same group) and goes with the TrainingJob.
    """
    if spec.pod.gang is None:
        return None
    name, namespace = owner["metadata"]["name"], owner["metadata"]["namespace"]
    return {
        "apiVersion": gang.API_VERSIONS[spec.pod.gang.scheduler],
        "kind": gang.KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels(name),
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": gang.group_spec(spec),
    }


def render_service(owner: JsonDict) -> JsonDict:
    """The headless Service that gives every worker pod a DNS name for rendezvous."""
    name, namespace = owner["metadata"]["name"], owner["metadata"]["namespace"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels(name),
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": {
            "clusterIP": "None",
            # Workers rendezvous before any of them is ready.
            "publishNotReadyAddresses": True,
            "selector": labels(name),
            "ports": [{"name": RENDEZVOUS_PORT_NAME, "port": wiring.MASTER_PORT, "targetPort": wiring.MASTER_PORT}],
        },
    }
