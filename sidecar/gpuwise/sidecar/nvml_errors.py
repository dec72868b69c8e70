"""NVML return codes, mapped to the few reasons an operator can act on."""

from __future__ import annotations

from typing import Any

from gpuwise.sidecar import backend


def reason(nvml: Any, error: BaseException) -> str:
    """The `reason` label for an exception raised by a pynvml call."""
    if not isinstance(error, nvml.NVMLError):
        return backend.EXCEPTION
    value = getattr(error, "value", None)
    known = {
        nvml.NVML_ERROR_NOT_SUPPORTED: backend.NOT_SUPPORTED,
        nvml.NVML_ERROR_GPU_IS_LOST: backend.GPU_LOST,
        nvml.NVML_ERROR_NO_PERMISSION: backend.NO_PERMISSION,
        nvml.NVML_ERROR_NOT_FOUND: backend.NOT_FOUND,
        nvml.NVML_ERROR_TIMEOUT: backend.TIMEOUT,
        nvml.NVML_ERROR_FUNCTION_NOT_FOUND: backend.UNAVAILABLE,
    }
    return known.get(value, backend.NVML_ERROR)


def text(value: Any) -> str:
    """NVML strings arrive as str or bytes depending on the binding's version."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
