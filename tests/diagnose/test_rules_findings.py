"""Every rule's whole finding and recommendation, word for word, on one job that shows it.

`test_rules.py` checks what each rule decides; this pins what each says: the message, every
evidence figure, the confidence and the recommendation are what users read in `kubectl describe`,
Events and reports, and a change to any of them must be deliberate. The expected output is
`rules_findings.json`; after a deliberate change, rewrite it with
`GPUWISE_WRITE_FINDINGS=1 pytest tests/diagnose/test_rules_findings.py` and review the diff.
(Written after mutation testing found messages and evidence that no test read: `make mutation`.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpuwise.api.trainingjob import Tunables
from gpuwise.diagnose.rules import diagnose
from tests.diagnose.test_rules import CLASSES, L4_MIB, LIGHT, ON_L40S, context, steps, window

EXPECTED = Path(__file__).with_name("rules_findings.json")

EXCHANGING = {
    "gpu_utilization": [38.0] * 60,
    "sm_active": [0.2] * 60,
    "data_wait_fraction": [0.03] * 60,
    "pcie_tx_bytes_per_second": 2.0e9,
    "pcie_rx_bytes_per_second": 2.4e9,
    "gradient_accumulation_steps": 2,
}
FREE_ACCUMULATION = Tunables.model_validate({"gradientAccumulationSteps": {"env": "ACCUM", "min": 1, "max": 16}})


def slow_worker() -> dict[int, list[tuple[float, float]]]:
    steady = steps(8)
    steady[3] = [(t, seconds * 1.3) for t, seconds in steady[3]]
    return steady


SCENARIOS: dict[str, tuple[dict[str, Any], Tunables | None]] = {
    "input bound": ({"gpu_utilization": [30.0] * 60, "data_wait_fraction": [0.7] * 60, "num_workers": 2}, None),
    "input bound, no GPU telemetry": (
        {"gpu_utilization": [], "data_wait_fraction": [0.9] * 60, "num_workers": 0, "pin_memory": False},
        None,
    ),
    "CPU-bound input": (
        {"gpu_utilization": [30.0] * 60, "data_wait_fraction": [0.5] * 60, "num_workers": 3, "cpu_cores": 4.0},
        None,
    ),
    "small batch": ({"gpu_utilization": [45.0] * 60, "memory_used_mib": 12_000.0, "batch_size": 64}, None),
    "no mixed precision, Hopper": ({"autocast": False, "tensor_activity": 0.01}, None),
    "no mixed precision, Volta": ({"autocast": False, "tensor_activity": None, "compute_capability": (7, 0)}, None),
    "idle after steps": (
        {"seconds_since_last_step": 2880.0, "gpu_utilization": [1.0] * 60, "gpus": 4},
        None,
    ),
    "idle, never stepped": (
        {"seconds_since_last_step": None, "data_wait_fraction": [], "gpu_utilization": [2.0] * 60, "gpus": 2},
        None,
    ),
    "straggler": ({"worker_step_seconds": steps(8, slow=5, from_sample=40)}, None),
    "slow worker": ({"worker_step_seconds": slow_worker()}, None),
    "oversized, MIG": ({**LIGHT, "memory_used_mib": 7_000.0}, None),
    "oversized, utilization only": ({"gpu_utilization": [12.0] * 60, "memory_used_mib": 7_000.0}, None),
    "oversized, L4 pack": (
        {**LIGHT, "memory_used_mib": 1_500.0, "memory_total_mib": L4_MIB, "gpu_model": "NVIDIA L4"},
        None,
    ),
    "oversized, unknown model": ({**LIGHT, "memory_used_mib": 7_000.0, "gpu_model": None}, None),
    "oversized, rescheduled to a smaller class": (
        {**ON_L40S, "actions": frozenset({"Reschedule"}), "gpu_classes": CLASSES},
        None,
    ),
    "throttling": (
        {"clock_slowdowns": {0: [0.0] * 60, 1: [0.0] * 60, 2: [float(0x40 | 0x20)] * 55 + [0.0] * 5}},
        None,
    ),
    "communication bound": ({**EXCHANGING, "worker_step_seconds": steps(4)}, None),
    "communication bound, accumulation free": ({**EXCHANGING, "worker_step_seconds": steps(4)}, FREE_ACCUMULATION),
}


# Keys of a scenario that are the rule context's, not the window's.
CONTEXT_FIELDS = ("actions", "gpu_classes")


def said(overrides: dict[str, Any], tunables: Tunables | None) -> list[dict[str, Any]]:
    measured = {key: value for key, value in overrides.items() if key not in CONTEXT_FIELDS}
    ctx = context(window(**measured)) if tunables is None else context(window(**measured), tunables=tunables)
    for key in CONTEXT_FIELDS:
        if key in overrides:
            setattr(ctx, key, overrides[key])
    return [
        {
            "finding": finding.model_dump(mode="json", by_alias=True, exclude_none=True),
            "recommendation": None
            if recommendation is None
            else recommendation.model_dump(mode="json", by_alias=True, exclude_none=True),
        }
        for finding, recommendation in diagnose(ctx)
    ]


def test_each_rule_says_what_it_said() -> None:
    found = {name: said(overrides, tunables) for name, (overrides, tunables) in SCENARIOS.items()}
    if os.environ.get("GPUWISE_WRITE_FINDINGS"):
        EXPECTED.write_text(json.dumps(found, indent=1, ensure_ascii=False) + "\n")
    expected = json.loads(EXPECTED.read_text())
    for name in SCENARIOS:
        assert found[name] == expected[name], name
        assert found[name], f"{name}: the scenario must show a finding"
