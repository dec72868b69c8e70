"""Every action kind the operator's runner takes; a new kind is added to `AVAILABLE`."""

from __future__ import annotations

from gpuwise.act.adjust_config import ADJUST_CONFIG
from gpuwise.act.machine import Action
from gpuwise.act.mig_repartition import MIG_REPARTITION
from gpuwise.act.pack import PACK
from gpuwise.act.reschedule import RESCHEDULE
from gpuwise.act.suspend import SUSPEND

AVAILABLE: tuple[Action, ...] = (ADJUST_CONFIG, RESCHEDULE, MIG_REPARTITION, PACK, SUSPEND)
