"""Auto-instrumentation of PyTorch: step boundaries, input wait, and the training set-up.

- **Steps** end where an optimizer step ends: torch's *global* optimizer step post-hook sees every
  optimizer of the process without touching user code. With several optimizers (a GAN's two),
  the first one that steps marks the boundaries, so one training iteration is one step.
- **The first step starts** at the first fetch from a DataLoader or, in a loop over tensors already
  in memory, at the first forward pass with gradients on, whichever comes first. Without that mark
  the first step would run from the process's start and count model set-up (seconds, minutes on a
  large model) as training. The forward hook is a global module hook, removed once it has fired.
- **Input wait** is the time inside a DataLoader iterator's `__next__`: the loop is blocked on
  input for exactly that long, whatever the workers do meanwhile. The batch's leading dimension
  gives the samples, and the iterator its loader's `num_workers`, `pin_memory` and batch size.
  Batches fetched with gradients off (evaluation under `no_grad`/`inference_mode`) belong to no
  step: they are not counted, and the next training batch starts the next step's clock afresh.
- **Mixed precision** is noticed when `torch.autocast` is entered enabled during a step (the usual
  forward-only context), or is on at a step's end (one context around the whole loop, entered once
  before the first step). The latter is one C call per step while autocast is off, about 0.15 µs.
- **CUDA memory peaks** are read at most once a second (the statistics call is not cheap), only
  once the program has initialised CUDA itself (initialising it from here would break DataLoader
  workers forked later), and never reset (the program may be reading them too).
- **Checkpoints** (when the pod asks for them, see `checkpoint`): a `torch.save` of a checkpoint
  to a file, and `torch.distributed.checkpoint.save`, answer a pending request once they return.
  A checkpoint is a dict (a state dict, or a dict of them) or a module: a tensor saved on its own
  (predictions, embeddings) or a save into memory (a `BytesIO`) answers nothing, since restarting
  the job on it would lose the training since its last real checkpoint.

torch is passed in, never imported here: this module must load in processes without it.
"""

from __future__ import annotations

import functools
import os
import time
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gpuwise.instrument import importhook
from gpuwise.instrument.checkpoint import Checkpoints
from gpuwise.instrument.tracker import Tracker

Wrapper = Callable[[Callable[..., Any]], Callable[..., Any]]


def install(torch: Any, tracker: Tracker) -> Callable[[], None]:
    """Hook `torch` to report to `tracker`; return a function that removes the hooks."""
    from torch.amp.autocast_mode import autocast
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    handle = register_optimizer_step_post_hook(_step_hook(tracker))
    undo = [
        handle.remove,
        _patch(_BaseDataLoaderIter, "__next__", _timed_next(tracker, torch.is_grad_enabled)),
        _patch(autocast, "__enter__", _noticed_enter(tracker)),
        _first_forward(torch, tracker),
    ]
    checkpoints = tracker.checkpoints
    if checkpoints is not None:
        undo.append(_patch(torch, "save", _answering(checkpoints, _torch_save_path)))

        def hook_distributed_checkpoint(dcp: ModuleType) -> None:
            if tracker.hooked:
                undo.append(_patch(dcp, "save", _answering(checkpoints, _dcp_save_path)))

        importhook.when_imported("torch.distributed.checkpoint", hook_distributed_checkpoint)
    tracker.autocast_known = tracker.hooked = True
    tracker.autocast_probe = _autocast_probe(torch)
    tracker.memory_probe = _cuda_peaks(torch.cuda)

    def remove() -> None:
        for step in reversed(undo):
            step()
        tracker.autocast_known = tracker.hooked = False
        tracker.autocast_probe = tracker.memory_probe = None

    return remove


def _step_hook(tracker: Tracker) -> Callable[[Any, Any, Any], None]:
    primary: weakref.ref[Any] | None = None

    def on_optimizer_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        nonlocal primary
        if tracker.manual:
            return
        marker = primary() if primary is not None else None
        if marker is None:
            primary, marker = weakref.ref(optimizer), optimizer
        if marker is optimizer:
            try:  # noqa: SIM105 - the hot path: a bare try costs nothing, suppress() a call
                tracker.end_step()
            except Exception:
                pass

    return on_optimizer_step


def _first_forward(torch: Any, tracker: Tracker) -> Callable[[], None]:
    """Mark the first step's start at the first forward pass with gradients on; return the undo."""
    from torch.nn.modules.module import register_module_forward_pre_hook

    handle: Any = None

    def on_forward(module: Any, args: Any) -> None:
        if torch.is_grad_enabled():
            tracker.begin()  # a no-op where a DataLoader fetch started the step already
            handle.remove()

    handle = register_module_forward_pre_hook(on_forward)
    return handle.remove  # type: ignore[no-any-return]


def _timed_next(
    tracker: Tracker, training: Callable[[], bool]
) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    clock = time.perf_counter
    # The iterator that fed the latest batch: its loader's set-up is the one reported.
    last: list[weakref.ref[Any] | None] = [None]

    def wrap(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        @functools.wraps(original)
        def __next__(self: Any) -> Any:
            if not training():
                tracker.pause()
                return original(self)
            start = clock()
            try:
                batch = original(self)
            except StopIteration:
                tracker.fetched(start, clock(), None)
                raise
            try:  # whatever the batch holds, the training loop gets it
                tracker.fetched(start, clock(), _batch_length(batch))
                seen = last[0]
                if seen is None or seen() is not self:
                    last[0] = weakref.ref(self)
                    _describe_loader(tracker, self)
            except Exception:
                pass
            return batch

        return __next__

    return wrap


def _describe_loader(tracker: Tracker, iterator: Any) -> None:
    try:
        batch_size = getattr(iterator._index_sampler, "batch_size", None) if iterator._auto_collation else None
        tracker.set_loader(int(iterator._num_workers), bool(iterator._pin_memory), batch_size)
    except Exception:
        pass


def _batch_length(batch: Any) -> int | None:
    """Samples in a batch: the leading dimension of its first tensor, when there is one.

    Looks at most three levels into lists, tuples and dicts: `(x, y)`, `{"input": x}`...
    """
    for _ in range(3):
        shape = getattr(batch, "shape", None)
        if shape is not None:
            return int(shape[0]) if len(shape) else None
        if isinstance(batch, list | tuple) and batch:
            batch = batch[0]
        elif isinstance(batch, dict) and batch:
            batch = next(iter(batch.values()))
        else:
            return None
    return None


def _noticed_enter(tracker: Tracker) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    def wrap(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        @functools.wraps(original)
        def __enter__(self: Any) -> Any:
            if getattr(self, "_enabled", False):
                tracker.saw_autocast()
            return original(self)

        return __enter__

    return wrap


def _autocast_probe(torch: Any) -> Callable[[], bool]:
    """Whether autocast is on now, for any device type: one C call where torch has it."""
    any_enabled: Callable[[], bool] | None = getattr(torch._C, "_is_any_autocast_enabled", None)
    if any_enabled is not None:
        return any_enabled
    enabled = torch.is_autocast_enabled

    def probe() -> bool:
        return bool(enabled("cuda") or enabled("cpu"))

    return probe


def _cuda_peaks(cuda: Any) -> Callable[[], tuple[int, int] | None]:
    def probe() -> tuple[int, int] | None:
        if not cuda.is_initialized():
            return None
        return int(cuda.max_memory_allocated()), int(cuda.max_memory_reserved())

    return probe


def _answering(checkpoints: Checkpoints, checkpoint_path: Callable[[Any, Any], str | None]) -> Wrapper:
    """Wrap a save function: once it returns, a checkpoint is saved (unless it has no path: None)."""

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def save(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            try:
                path = checkpoint_path(args, kwargs)
                if path is not None:
                    checkpoints.saved(path or None)
            except Exception:
                pass
            return result

        return save

    return wrap


def _torch_save_path(args: Any, kwargs: Any) -> str | None:
    """Where `torch.save(obj, f)` wrote a checkpoint (a path, or an open file's name); None if it did not."""
    saved = args[0] if args else kwargs.get("obj")
    if not isinstance(saved, dict) and not hasattr(saved, "state_dict"):
        return None
    target = args[1] if len(args) > 1 else kwargs.get("f")
    if isinstance(target, str | bytes | os.PathLike):
        return os.fsdecode(target)
    name = getattr(target, "name", None)
    return name if isinstance(name, str) else None


def _dcp_save_path(args: Any, kwargs: Any) -> str:
    """Where `torch.distributed.checkpoint.save` wrote ("" when its storage writer does not say)."""
    target = kwargs.get("checkpoint_id") or getattr(kwargs.get("storage_writer"), "path", None)
    return os.fsdecode(target) if isinstance(target, str | bytes | os.PathLike) else ""


def _patch(owner: Any, name: str, wrapper: Wrapper) -> Callable[[], None]:
    original = owner.__dict__[name]
    setattr(owner, name, wrapper(original))

    def restore() -> None:
        setattr(owner, name, original)

    return restore
