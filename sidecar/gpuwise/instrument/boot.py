"""Turn instrumentation on as the environment asks; what the installed sitecustomize calls."""

from __future__ import annotations

from gpuwise.instrument import runtime


def activate() -> None:
    """Silent unless something needs the user's attention; instrumenting twice is a no-op."""
    if runtime.mode() == "auto":
        from gpuwise.instrument import instrument_torch

        instrument_torch()
