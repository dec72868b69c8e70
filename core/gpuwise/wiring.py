"""How the operator, the sidecar and the training process find each other.

The operator renders pods with these paths, ports and variables; the sidecar and the
instrumentation library read them. Keeping them in one stdlib-only module means the three
sides cannot drift apart, and the sidecar and the training process import nothing heavy
to learn them.
"""

from __future__ import annotations

from typing import Final

API_GROUP: Final = "gpuwise.io"

# --- the shared emptyDir between the trainer and the sidecar --------------------------------
RUNTIME_VOLUME: Final = "gpuwise-runtime"
RUNTIME_DIR: Final = "/var/run/gpuwise"
# The unix datagram socket the sidecar binds and the training process sends step events to.
STEP_SOCKET: Final = f"{RUNTIME_DIR}/steps.sock"
# The sidecar copies the pure-Python instrumentation package here before it reports started,
# so trainer images need not have gpuwise installed for `instrumentation: Auto`.
INSTRUMENT_PYTHONPATH: Final = f"{RUNTIME_DIR}/python"
# The trainer says here which GPUs are the pod's (its container's visible devices, as the device
# plugin set them), one small file per distinct set; the sidecar exports only those GPUs.
POD_GPUS_DIR: Final = f"{RUNTIME_DIR}/pod-gpus"

# --- the trainer's read-only view of its pod (downward API) ---------------------------------
PODINFO_VOLUME: Final = "gpuwise-podinfo"
PODINFO_DIR: Final = "/etc/gpuwise/podinfo"
# The pod's checkpoint-request annotation as a file: the request id, or empty. The kubelet
# refreshes it when the annotation changes (within its sync period, typically a minute).
CHECKPOINT_REQUEST_FILE: Final = f"{PODINFO_DIR}/checkpoint-request"

# --- the sidecar container ------------------------------------------------------------------
SIDECAR_CONTAINER: Final = "gpuwise-sidecar"
METRICS_PORT: Final = 9400  # dcgm-exporter's port, so existing scrape configs keep working
METRICS_PORT_NAME: Final = "gpuwise-metrics"
HEALTH_PATH: Final = "/healthz"

# --- environment variables ------------------------------------------------------------------
# Set on the sidecar from the downward API; they become the pod/job labels of every series.
ENV_POD_NAME: Final = "GPUWISE_POD_NAME"
ENV_POD_NAMESPACE: Final = "GPUWISE_POD_NAMESPACE"
ENV_NODE_NAME: Final = "GPUWISE_NODE_NAME"
ENV_TRAININGJOB: Final = "GPUWISE_TRAININGJOB"
ENV_WORKER_INDEX: Final = "GPUWISE_WORKER_INDEX"
ENV_SAMPLE_INTERVAL: Final = "GPUWISE_SAMPLE_INTERVAL_SECONDS"
# The sidecar's sampling interval, as spec.telemetry.sampleIntervalSeconds allows it and the
# sidecar accepts it: one source, so a spec the API server takes never makes a sidecar that exits.
MIN_SAMPLE_INTERVAL_SECONDS: Final = 0.1  # NVML GPM needs its two samples at least 100 ms apart
MAX_SAMPLE_INTERVAL_SECONDS: Final = 3600.0
# Set on the sidecar, as a plain value, where the operator knows it: the container the pod's GPUs
# work for (dcgm-exporter's `container` label). Unset when it is not known: never a guess.
ENV_CONTAINER: Final = "GPUWISE_CONTAINER"
# Set on the trainer: where to send step events, and whether sitecustomize instruments torch.
ENV_SOCKET: Final = "GPUWISE_SOCKET"
ENV_INSTRUMENT: Final = "GPUWISE_INSTRUMENT"  # "auto" | "manual" | "disabled"
# Set on the trainer: the downward-API file that holds the pending checkpoint request id (or nothing).
ENV_CHECKPOINT_REQUEST_FILE: Final = "GPUWISE_CHECKPOINT_REQUEST_FILE"
# The checkpoint the trainer acknowledged before gpuwise last stopped the job (set on the restarted
# or resumed trainer when the acknowledgement named a path): where to resume from.
ENV_RESUME_FROM: Final = "GPUWISE_RESUME_FROM"
# Set on the trainer: the directory where it says which GPUs are the pod's (POD_GPUS_DIR).
ENV_POD_GPUS_DIR: Final = "GPUWISE_POD_GPUS_DIR"

# --- labels and annotations -----------------------------------------------------------------
LABEL_TRAININGJOB: Final = f"{API_GROUP}/trainingjob"
LABEL_INJECT: Final = f"{API_GROUP}/inject"  # "true" on any pod asks the webhook for the sidecar
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
ANNOTATION_INJECTED: Final = f"{API_GROUP}/sidecar-injected"
ANNOTATION_DO_NOT_DISRUPT: Final = f"{API_GROUP}/do-not-disrupt"
# On worker pods: the id of the action that asks the trainer to checkpoint (the handshake's request).
ANNOTATION_CHECKPOINT_REQUEST: Final = f"{API_GROUP}/checkpoint-request"
JOB_COMPLETION_INDEX_ANNOTATION: Final = "batch.kubernetes.io/job-completion-index"

# --- torchrun rendezvous --------------------------------------------------------------------
MASTER_PORT: Final = 29500
