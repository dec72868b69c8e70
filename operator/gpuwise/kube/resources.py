"""What a container or pod asks for, read from its resources as the API server stores them.

The webhook asks which container of a pod uses the GPUs; the node-side actions ask which pods
hold a node's GPUs; packing asks how much CPU a node offers. All three read the same quantities.
"""

from __future__ import annotations

from typing import Any, Final

JsonDict = dict[str, Any]

GPU_RESOURCE: Final = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"
_CPU_UNITS: Final = {"m": 0.001, "": 1.0, "k": 1000.0}


def container_gpu_resources(container: JsonDict) -> dict[str, int]:
    """GPUs, time-sliced shares (`nvidia.com/gpu.shared`) and MIG slices one container asks for, by
    resource name (the larger of its request and limit); not other nvidia.com devices such as NICs.

    An amount that is not a whole number (an extended resource must be one; a pod the webhook sees
    is not validated yet) asks for nothing.
    """
    found: dict[str, int] = {}
    resources = container.get("resources") or {}
    for amounts in (resources.get("requests") or {}, resources.get("limits") or {}):
        for name, amount in amounts.items():
            if name.startswith((GPU_RESOURCE, MIG_RESOURCE_PREFIX)):
                try:
                    found[name] = max(found.get(name, 0), int(amount))
                except ValueError:
                    continue
    return {name: amount for name, amount in found.items() if amount > 0}


def gpu_resources(pod: JsonDict) -> dict[str, int]:
    """What `container_gpu_resources` finds in any of a pod's containers, by resource name (the
    largest amount one container asks for)."""
    found: dict[str, int] = {}
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        for name, amount in container_gpu_resources(container).items():
            found[name] = max(found.get(name, 0), amount)
    return found


def cpu_cores(quantity: int | str | None) -> float | None:
    """Cores in a CPU quantity ("16", "500m", 4); None when unset or not a plain CPU amount."""
    if quantity is None:
        return None
    text = str(quantity)
    number, unit = (text[:-1], text[-1]) if text[-1:].isalpha() else (text, "")
    try:
        return float(number) * _CPU_UNITS[unit]
    except (ValueError, KeyError):
        return None
