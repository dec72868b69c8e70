"""Every metric gpuwise exposes, once.

The exporter builds its exposition from these records; the operator's PromQL, the alert rules and
the Grafana dashboards are generated from them. DCGM-compatible entries mirror NVIDIA
dcgm-exporter's names, units and help texts (its `default-counters.csv`) so that dashboard 12239
and existing alerts work unchanged; everything gpuwise adds is named `gpuwise_*` and follows the
Prometheus naming conventions (base units, `_total` on counters).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from gpuwise.metrics.spec import Kind, Metric, Scope

# The window of the sidecar's own ratio gauges. PromQL over the counters gives any other window.
RATIO_WINDOW_SECONDS: Final = 30.0

_G, _C, _H = Kind.GAUGE, Kind.COUNTER, Kind.HISTOGRAM

# --- DCGM-compatible device metrics (one series per GPU or MIG instance) ----------------------
GPU_UTIL: Final = Metric("DCGM_FI_DEV_GPU_UTIL", _G, "%", "GPU utilization (in %).", Scope.DEVICE)
MEM_COPY_UTIL: Final = Metric("DCGM_FI_DEV_MEM_COPY_UTIL", _G, "%", "Memory utilization (in %).", Scope.DEVICE)
FB_USED: Final = Metric("DCGM_FI_DEV_FB_USED", _G, "MiB", "Framebuffer memory used (in MiB).", Scope.DEVICE)
FB_FREE: Final = Metric("DCGM_FI_DEV_FB_FREE", _G, "MiB", "Framebuffer memory free (in MiB).", Scope.DEVICE)
FB_RESERVED: Final = Metric("DCGM_FI_DEV_FB_RESERVED", _G, "MiB", "Framebuffer memory reserved (in MiB).", Scope.DEVICE)
POWER_USAGE: Final = Metric("DCGM_FI_DEV_POWER_USAGE", _G, "W", "Power draw (in W).", Scope.DEVICE)
TOTAL_ENERGY: Final = Metric(
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    _C,
    "mJ",
    "Total energy consumption since boot (in mJ).",
    Scope.DEVICE,
)
GPU_TEMP: Final = Metric("DCGM_FI_DEV_GPU_TEMP", _G, "C", "GPU temperature (in C).", Scope.DEVICE)
SM_CLOCK: Final = Metric("DCGM_FI_DEV_SM_CLOCK", _G, "MHz", "SM clock frequency (in MHz).", Scope.DEVICE)
MEM_CLOCK: Final = Metric("DCGM_FI_DEV_MEM_CLOCK", _G, "MHz", "Memory clock frequency (in MHz).", Scope.DEVICE)
PCIE_REPLAY: Final = Metric("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", _C, "1", "Total number of PCIe retries.", Scope.DEVICE)
PCIE_TX: Final = Metric(
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    _G,
    "B/s",
    "The rate of data transmitted over the PCIe bus, in bytes per second.",
    Scope.DEVICE,
)
PCIE_RX: Final = Metric(
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    _G,
    "B/s",
    "The rate of data received over the PCIe bus, in bytes per second.",
    Scope.DEVICE,
)
CLOCKS_EVENT_REASONS: Final = Metric(
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    _G,
    "bitmask",
    "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).",
    Scope.DEVICE,
)
XID_LAST: Final = Metric("DCGM_FI_DEV_XID_ERRORS", _G, "1", "Value of the last XID error encountered.", Scope.DEVICE)
# Profiling metrics: from NVML GPM on Hopper and later, per GPU and per MIG instance.
GR_ENGINE_ACTIVE: Final = Metric(
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE", _G, "ratio", "Ratio of time the graphics engine is active.", Scope.DEVICE
)
SM_ACTIVE: Final = Metric(
    "DCGM_FI_PROF_SM_ACTIVE",
    _G,
    "ratio",
    "The ratio of cycles an SM has at least 1 warp assigned.",
    Scope.DEVICE,
)
SM_OCCUPANCY: Final = Metric(
    "DCGM_FI_PROF_SM_OCCUPANCY", _G, "ratio", "The ratio of number of warps resident on an SM.", Scope.DEVICE
)
TENSOR_ACTIVE: Final = Metric(
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    _G,
    "ratio",
    "Ratio of cycles the tensor (HMMA) pipe is active.",
    Scope.DEVICE,
)
DRAM_ACTIVE: Final = Metric(
    "DCGM_FI_PROF_DRAM_ACTIVE",
    _G,
    "ratio",
    "Ratio of cycles the device memory interface is active sending or receiving data.",
    Scope.DEVICE,
)

# --- gpuwise per-device metrics -----------------------------------------------------------------
MIG_ENABLED: Final = Metric(
    "gpuwise_gpu_mig_enabled",
    _G,
    "bool",
    "1 when MIG mode is enabled on this GPU, 0 when it is not.",
    Scope.GPU,
)
COMPUTE_CAPABILITY: Final = Metric(
    "gpuwise_gpu_compute_capability",
    _G,
    "1",
    "The GPU's CUDA compute capability as major.minor (9.0 for Hopper), from NVML.",
    Scope.GPU,
)
XID_EVENTS: Final = Metric(
    "gpuwise_xid_errors_total",
    _C,
    "1",
    "XID critical errors seen since the sidecar started, by XID code.",
    Scope.GPU,
    ("xid",),
)
PROCESS_GPU_MEMORY: Final = Metric(
    "gpuwise_process_gpu_memory_bytes",
    _G,
    "bytes",
    "GPU memory used by a process on this device; pid is the host PID, as NVML reports it.",
    Scope.GPU,
    ("pid",),
)
PROCESS_SM_UTIL: Final = Metric(
    "gpuwise_process_sm_utilization_ratio",
    _G,
    "ratio",
    "Share of the device's SM time a process used over the last sampling interval (host PID).",
    Scope.GPU,
    ("pid",),
)
SAMPLE_ERRORS: Final = Metric(
    "gpuwise_sample_errors_total",
    _C,
    "1",
    "Readings the backend could not take, by metric and reason; that metric's series is absent meanwhile.",
    Scope.GPU,
    ("field", "reason"),
)

# --- gpuwise step metrics (one series per training process) -------------------------------------
STEPS: Final = Metric(
    "gpuwise_steps_total",
    _C,
    "1",
    "Training steps the process completed (optimizer steps, or explicit step ends).",
    Scope.PROCESS,
)
SAMPLES: Final = Metric(
    "gpuwise_samples_total",
    _C,
    "samples",
    "Training samples the process consumed in completed steps (absent when unknown).",
    Scope.PROCESS,
)
STEP_DURATION: Final = Metric(
    "gpuwise_step_duration_seconds",
    _H,
    "seconds",
    "Wall time from the end of one training step to the end of the next.",
    Scope.PROCESS,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
DATA_WAIT: Final = Metric(
    "gpuwise_data_wait_seconds_total",
    _C,
    "seconds",
    "Time the training loop spent waiting for its next batch of input.",
    Scope.PROCESS,
)
DATA_WAIT_RATIO: Final = Metric(
    "gpuwise_data_wait_ratio",
    _G,
    "ratio",
    f"Share of step time spent waiting for input over the last {RATIO_WINDOW_SECONDS:g} s "
    "(absent without a step in that window).",
    Scope.PROCESS,
)
LAST_STEP: Final = Metric(
    "gpuwise_last_step_timestamp_seconds",
    _G,
    "seconds",
    "Unix time at which the sidecar learnt of the process's latest step.",
    Scope.PROCESS,
)
BATCH_SIZE: Final = Metric(
    "gpuwise_dataloader_batch_size",
    _G,
    "samples",
    "batch_size of the DataLoader feeding the steps.",
    Scope.PROCESS,
)
NUM_WORKERS: Final = Metric(
    "gpuwise_dataloader_num_workers",
    _G,
    "1",
    "num_workers of the DataLoader feeding the steps.",
    Scope.PROCESS,
)
PIN_MEMORY: Final = Metric(
    "gpuwise_dataloader_pin_memory",
    _G,
    "bool",
    "1 when the DataLoader feeding the steps pins memory, 0 when it does not.",
    Scope.PROCESS,
)
AUTOCAST: Final = Metric(
    "gpuwise_autocast_enabled",
    _G,
    "bool",
    "1 when the latest step ran code under torch.autocast (mixed precision), 0 when it did not.",
    Scope.PROCESS,
)
CUDA_ALLOCATED_PEAK: Final = Metric(
    "gpuwise_cuda_memory_allocated_peak_bytes",
    _G,
    "bytes",
    "Peak CUDA memory allocated by tensors in the process (torch.cuda.max_memory_allocated).",
    Scope.PROCESS,
)
CUDA_RESERVED_PEAK: Final = Metric(
    "gpuwise_cuda_memory_reserved_peak_bytes",
    _G,
    "bytes",
    "Peak CUDA memory reserved by the process's caching allocator (torch.cuda.max_memory_reserved).",
    Scope.PROCESS,
)
INSTRUMENT_DROPPED: Final = Metric(
    "gpuwise_instrument_dropped_events_total",
    _C,
    "1",
    "Step events the process could not send (sidecar gone or busy); later events carry running totals.",
    Scope.PROCESS,
)

# --- the sidecar itself -------------------------------------------------------------------------
SIDECAR_INFO: Final = Metric(
    "gpuwise_sidecar_info",
    _G,
    "1",
    "Always 1; the labels say which backend feeds this sidecar.",
    Scope.SIDECAR,
    ("backend", "scenario", "version"),
)
SAMPLE_ROUNDS: Final = Metric(
    "gpuwise_sidecar_sample_rounds_total", _C, "1", "Sampling rounds the sidecar completed.", Scope.SIDECAR
)
SAMPLE_DURATION: Final = Metric(
    "gpuwise_sidecar_sample_duration_seconds",
    _G,
    "seconds",
    "How long the latest sampling round took.",
    Scope.SIDECAR,
)
LAST_SAMPLE: Final = Metric(
    "gpuwise_sidecar_last_sample_timestamp_seconds",
    _G,
    "seconds",
    "Unix time of the latest sampling round.",
    Scope.SIDECAR,
)
POD_GPUS: Final = Metric(
    "gpuwise_sidecar_pod_gpus",
    _G,
    "1",
    "GPUs and MIG instances exported as the pod's; source: how the sidecar knows them (trainer, request, "
    "visible), or unknown: it does not, and exports no GPU series.",
    Scope.SIDECAR,
    ("source",),
)
EVENTS_RECEIVED: Final = Metric(
    "gpuwise_step_events_received_total",
    _C,
    "1",
    "Step event datagrams received from training processes.",
    Scope.SIDECAR,
)
EVENTS_DROPPED: Final = Metric(
    "gpuwise_step_events_dropped_total",
    _C,
    "1",
    "Step event datagrams the sidecar discarded, by reason (malformed, flood, too_many_sources).",
    Scope.SIDECAR,
    ("reason",),
)

CHECKPOINT_ACK: Final = Metric(
    "gpuwise_checkpoint_ack_timestamp_seconds",
    _G,
    "seconds",
    "Unix time at which the training process acknowledged gpuwise's checkpoint request request_id, "
    "with the checkpoint's path when the trainer gave one (the last few requests are kept).",
    Scope.SIDECAR,
    ("request_id", "path"),
)

# --- the operator's view of each running TrainingJob (its /metrics, from the evaluation) ---------
# Published every evaluation cycle from what the job's status gets; a series exists only while
# what it stands for holds, and all of a job's series go when it stops running or is deleted.
JOB_FINDING: Final = Metric(
    "gpuwise_job_finding",
    _G,
    "ratio",
    "Confidence (0-1) of a finding the operator holds on a running TrainingJob; present only while "
    "the finding is active.",
    Scope.TRAININGJOB,
    ("kind",),
)
JOB_RECOMMENDATION: Final = Metric(
    "gpuwise_job_recommendation",
    _G,
    "1",
    "Always 1 while the operator recommends this action for this finding on a running TrainingJob.",
    Scope.TRAININGJOB,
    ("action", "finding"),
)
JOB_GPU_UTIL: Final = Metric(
    "gpuwise_job_gpu_utilization_percent",
    _G,
    "%",
    "Mean GPU utilization of a running TrainingJob over its efficiency window (absent when unmeasured).",
    Scope.TRAININGJOB,
)
JOB_DATA_WAIT: Final = Metric(
    "gpuwise_job_data_wait_ratio",
    _G,
    "ratio",
    "Mean share of step time a running TrainingJob waited for input over its efficiency window "
    "(absent when unmeasured).",
    Scope.TRAININGJOB,
)
JOB_GPU_UTIL_THRESHOLD: Final = Metric(
    "gpuwise_job_gpu_utilization_threshold_percent",
    _G,
    "%",
    "A running TrainingJob's spec.efficiency.thresholds.gpuUtilization: below it the job is underutilized.",
    Scope.TRAININGJOB,
)
JOB_ACTION_SPEEDUP: Final = Metric(
    "gpuwise_job_action_speedup_ratio",
    _G,
    "1",
    "The latest verified action on a running TrainingJob: samples/s after over before, as its recommendation "
    "predicted it (basis=predicted, an upper bound) and as measured (basis=measured), to score the predictions.",
    Scope.TRAININGJOB,
    ("action", "basis"),
)

# The actions the operator takes (Enforce mode): counted at every transition of an action's record,
# the moment its Event is posted (gpuwise.act.runner).
ACTION_TRANSITIONS: Final = Metric(
    "gpuwise_action_transitions_total",
    _C,
    "1",
    "Transitions of the actions the operator took on a TrainingJob, by action kind and the state "
    "entered (Planned, WaitingForCheckpoint, Applying, Verifying, Done, RolledBack, Failed, DryRun).",
    Scope.TRAININGJOB,
    ("action", "state"),
)
# GPU time given back by Suspend (gpuwise.act.suspend): while a job gpuwise suspended for idleness
# stays suspended, its GPUs count here, by the second (gpuwise.operator.metrics).
RECLAIMED_GPU_SECONDS: Final = Metric(
    "gpuwise_reclaimed_gpu_seconds_total",
    _C,
    "seconds",
    "GPU-seconds freed by suspending idle TrainingJobs: their GPUs times the time they stayed suspended "
    "(counted while the operator runs).",
    Scope.TRAININGJOB,
)
# Pods of other workloads a node-side action evicted to idle a node's GPUs for a TrainingJob
# (gpuwise.act.nodes): disruption that no TrainingJob budget counts, so it is counted here.
ACTION_EVICTIONS: Final = Metric(
    "gpuwise_action_evictions_total",
    _C,
    "1",
    "Pods evicted to idle a node's GPUs for an action on a TrainingJob, by the evicted pod's namespace.",
    Scope.TRAININGJOB,
    ("pod_namespace",),
)

CATALOG: Final[tuple[Metric, ...]] = tuple(value for value in list(globals().values()) if isinstance(value, Metric))
BY_NAME: Final[Mapping[str, Metric]] = MappingProxyType({metric.name: metric for metric in CATALOG})
