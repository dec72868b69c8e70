"""This process's tracker, configured once from the environment the sidecar's pod spec sets.

`GPUWISE_SOCKET` says where the sidecar listens; `GPUWISE_INSTRUMENT` says how much to do:
`auto` (hook PyTorch), `manual` (only the explicit API), `disabled` (nothing). Without a socket
there is nobody to tell, and every call of the public API is a cheap no-op.
`GPUWISE_CHECKPOINT_REQUEST_FILE` says where gpuwise's checkpoint requests appear (the pod's
downward-API file); without it there are none to answer. `GPUWISE_POD_GPUS_DIR` is where this
container says which GPUs are the pod's (`pod_gpus`), once per process, as reporting starts.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import Final

from gpuwise import wiring
from gpuwise.instrument import pod_gpus, wire
from gpuwise.instrument.checkpoint import Checkpoints
from gpuwise.instrument.sender import Sender
from gpuwise.instrument.tracker import Tracker

MODES: Final = ("auto", "manual", "disabled")


class _Process:
    """The process-wide state, resolved once."""

    tracker: Tracker | None = None
    resolved = False


def mode() -> str:
    """The instrumentation mode; an unknown value is reported once and treated as `disabled`."""
    value = os.environ.get(wiring.ENV_INSTRUMENT, "auto").strip().lower() or "auto"
    if value in MODES:
        return value
    warn(f"{wiring.ENV_INSTRUMENT}={value!r} is not one of {', '.join(MODES)}; step reporting is off")
    return "disabled"


def current() -> Tracker | None:
    """The process's tracker, or None when reporting is off."""
    if _Process.resolved:
        return _Process.tracker
    return _resolve()


def _resolve() -> Tracker | None:
    path = os.environ.get(wiring.ENV_SOCKET, "")
    if path and mode() != "disabled":
        sender = Sender(path)
        tracker = _Process.tracker = Tracker(sender, rank=_local_rank())
        requests = os.environ.get(wiring.ENV_CHECKPOINT_REQUEST_FILE, "")
        if requests:
            tracker.checkpoints = Checkpoints(requests, sender.send, warn, local_rank=_local_rank(), rank=_rank())
        os.register_at_fork(after_in_child=tracker.forked)
        atexit.register(tracker.flush)
        _report_pod_gpus()
    _Process.resolved = True
    return _Process.tracker


def _report_pod_gpus() -> None:
    """Tell the sidecar which GPUs this container holds; a failure is said once, never raised."""
    directory = os.environ.get(wiring.ENV_POD_GPUS_DIR, "")
    if not directory:
        return
    try:
        pod_gpus.report(directory, pod_gpus.visible_devices())
    except Exception as exc:
        warn(f"cannot tell the sidecar which GPUs are the pod's ({exc}); it may not export them")


def _local_rank() -> int:
    """torchrun's LOCAL_RANK: which of the pod's training processes this is."""
    try:
        return min(max(int(os.environ.get("LOCAL_RANK", "0")), 0), 0xFFFF)
    except ValueError:
        return 0


def _rank() -> int:
    """RANK, the process's global rank (torchrun's, or the node rank with one process per node)."""
    try:
        rank = int(os.environ.get("RANK", ""))
    except ValueError:
        return wire.UNKNOWN
    return rank if 0 <= rank < 2**31 else wire.UNKNOWN


_warned: set[str] = set()


def warn(message: str) -> None:
    """Tell the person running the training once, on stderr; never raise."""
    if message not in _warned:
        _warned.add(message)
        with contextlib.suppress(Exception):
            sys.stderr.write(f"gpuwise: {message}\n")
