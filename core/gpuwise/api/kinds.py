"""The kinds of findings and actions, and the recommendation keys the actions read: names only.

Stdlib only, so that what must not load pydantic (the alert rules and dashboards generator, the
chart tooling) can name a finding as the rules do.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class FindingKind(StrEnum):
    """What a finding says is wrong; each is one rule of `gpuwise.diagnose.rules`."""

    IDLE = "Idle"
    INPUT_BOUND = "InputBound"
    CPU_BOUND_INPUT = "CPUBoundInput"
    SMALL_BATCH = "SmallBatch"
    NO_MIXED_PRECISION = "NoMixedPrecision"
    STRAGGLER = "Straggler"
    SLOW_WORKER = "SlowWorker"
    OVERSIZED_GPU = "OversizedGPU"
    THROTTLING = "Throttling"
    COMMUNICATION_BOUND = "CommunicationBound"


class ActionKind(StrEnum):
    ADJUST_CONFIG = "AdjustConfig"
    MIG_REPARTITION = "MigRepartition"
    RESCHEDULE = "Reschedule"
    PACK = "Pack"
    SUSPEND = "Suspend"


# The `changes` keys of a recommendation that the actions read besides the tunables' variables:
# one name for the rule that writes a change and the action that applies it.
MIG_PROFILE_CHANGE: Final = "migProfile"  # the MIG profile a job fits, e.g. 1g.10gb...
MIG_RESOURCE_CHANGE: Final = "resource"  # ...and the extended resource a worker requests for it (`mixed` strategy)
SHARE_CHANGE: Final = "share"  # how Pack shares a GPU: TIME_SLICING
GPU_SHARE_CHANGE: Final = "gpuShare"  # the share of one GPU the job needs, 0-1
GPU_CLASS_CHANGE: Final = "gpuClass"  # the GPU class Reschedule moves a job to (the operator's `actions.gpuClasses`)
TIME_SLICING: Final = "time-slicing"
IDLE_SECONDS_CHANGE: Final = "idleSeconds"  # how long an Idle job has been idle: Suspend acts once it is long enough
