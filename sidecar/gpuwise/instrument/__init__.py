"""Tell the gpuwise sidecar how a training loop spends its time.

Standard library only; torch is instrumented when present, never required. Two ways in:

- **Automatic** (no code change): with `GPUWISE_INSTRUMENT=auto` and the sidecar's
  `sitecustomize` on `PYTHONPATH`, PyTorch's optimizer steps mark the steps and DataLoader
  iterators measure the wait for input. `instrument_torch()` does the same from code.
- **Explicit**: `step_end(samples=n)` after each step, or `with step(samples=n): ...` around it;
  `with data_wait(): batch = next(it)` around a custom input pipeline. Once `step_end` is used,
  it alone marks steps (the optimizer hook stands down), so nothing is counted twice.

Every call is cheap (a few µs), never blocks and never raises: when no sidecar listens, the
events are dropped and counted, and training goes on.

**Checkpoints, so gpuwise can restart the job safely.** Before gpuwise restarts a job (to apply
a new batch size, say), it asks for a checkpoint and waits for the answer; without one, it does
not restart (it only recommends). The request reaches the process as a file the pod's downward
API refreshes (usually within a minute); the library looks at it at step boundaries, at most once
a second, and answers in one of these ways:

- `@on_checkpoint` registers `callback(request_id) -> path | None`: it runs at the next step
  boundary, in the training thread, and its return is the answer. If it raises, nothing is
  answered (the error is reported on stderr, never raised into the training loop).
- Without a callback, the next checkpoint the program saves answers: `checkpoint_saved(path)`
  after saving, or nothing at all with auto-instrumentation, where a `torch.save` of a dict or a
  module to a file, or a `torch.distributed.checkpoint.save`, returning while a request is
  pending answers it. A
  checkpoint written as several files should call `checkpoint_saved()` after the last one or use
  the callback: `torch.save` answers as soon as the first file is written.

The job must then resume from its latest checkpoint when it starts again, and read its tunables
(batch size, workers...) from the environment, where gpuwise puts the new values.
"""

from __future__ import annotations

import time
from types import ModuleType, TracebackType
from typing import TypeVar

from gpuwise.instrument import importhook, runtime
from gpuwise.instrument.checkpoint import Callback, CheckpointPath

__all__ = ["checkpoint_saved", "data_wait", "instrument_torch", "on_checkpoint", "step", "step_end"]

_C = TypeVar("_C", bound="Callback | None")


def step_end(samples: int | None = None) -> None:
    """Mark the end of a training step that consumed `samples` samples (when known)."""
    tracker = runtime.current()
    if tracker is None:
        return
    tracker.manual = True
    try:  # noqa: SIM105 - the hot path: a bare try costs nothing, suppress() a call
        tracker.end_step(_count(samples))
    except Exception:
        pass


class step:
    """`with step(samples=n): ...` -- the block's end is the step's end."""

    __slots__ = ("_samples",)

    def __init__(self, samples: int | None = None) -> None:
        self._samples = samples

    def __enter__(self) -> None:
        tracker = runtime.current()
        if tracker is not None:
            tracker.begin()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is None:  # a step that raised did not complete
            step_end(self._samples)


class data_wait:
    """`with data_wait(): batch = next(it)` -- the block is time spent waiting for input."""

    __slots__ = ("_samples", "_start")

    def __init__(self, samples: int | None = None) -> None:
        self._samples = samples
        self._start = 0.0

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        tracker = runtime.current()
        if tracker is not None:
            tracker.fetched(self._start, time.perf_counter(), _count(self._samples))


def on_checkpoint(callback: _C) -> _C:
    """Call `callback(request_id)` to save a checkpoint when gpuwise asks; it returns the path or None.

    Usable as a decorator; `on_checkpoint(None)` unregisters. It runs at a step boundary in the
    training thread, and gpuwise hears that the checkpoint is saved when it returns.
    """
    tracker = runtime.current()
    if tracker is not None and tracker.checkpoints is not None:
        tracker.checkpoints.callback = callback
    return callback


def checkpoint_saved(path: CheckpointPath | None = None) -> bool:
    """Say that a checkpoint was just saved (at `path`); True when it answered a pending request."""
    tracker = runtime.current()
    if tracker is None or tracker.checkpoints is None:
        return False
    try:
        return tracker.checkpoints.saved(path)
    except Exception:
        return False


def instrument_torch() -> bool:
    """Instrument PyTorch now, or as soon as it is imported. False when reporting is off."""
    if runtime.current() is None:
        return False
    importhook.when_imported("torch", _hook_torch)
    return True


def _hook_torch(torch: ModuleType) -> None:
    tracker = runtime.current()
    if tracker is None or tracker.hooked:
        return
    from gpuwise.instrument import torch_hooks

    torch_hooks.install(torch, tracker)


def _count(samples: object) -> int | None:
    if samples is None:
        return None
    try:
        count = int(samples)  # type: ignore[call-overload]
    except Exception:
        return None
    return count if count >= 0 else None
