"""Which GPUs are the pod's: the trainer says so in a file the sidecar reads.

The sidecar requests no GPU and sees every GPU of the node (`NVIDIA_VISIBLE_DEVICES=all`), so on
its own it cannot tell a 2-GPU pod's GPUs from the other tenants'. The trainer container can: the
NVIDIA device plugin sets its `NVIDIA_VISIBLE_DEVICES` to the devices it allocated, as GPU UUIDs
(`GPU-...`), MIG device UUIDs (`MIG-...`), or host indexes (`0`, `1:2` for a MIG device) with
`DEVICE_ID_STRATEGY=index`; with `DEVICE_LIST_STRATEGY=volume-mounts` it names a directory whose
entries are those ids. `all`, `none`, `void` or nothing name no GPU of the pod's own (CUDA images
set `all` in every container, whatever it requested). A process's `CUDA_VISIBLE_DEVICES` is not
read: it narrows what one process uses, not what the pod holds.

Why a file and not a datagram on the step socket: the file outlives a restart of the sidecar (a
native sidecar restarts on its own, the trainer does not say it again), cannot be lost to a full
socket queue, and leaves the step wire format as it is. One file per distinct set of ids, named by
a hash of its content and written under a temporary name, then renamed: every process of the
container writes the same file (idempotent, never seen half-written), and each of a pod's GPU
containers adds its own. Standard library only, like the rest of the instrumentation.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Mapping
from typing import Final

VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"
# Values that name no device of the container's own.
NO_DEVICES: Final = frozenset({"", "all", "none", "void"})
# A device plugin id: a UUID (`GPU-...`, `MIG-...`, the pre-R470 `MIG-GPU-.../gi/ci`) or an index.
_DEVICE_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9:/._-]{0,127}")
SUFFIX: Final = ".gpus"
# Bounds on what the sidecar reads: a pod has a few GPU containers, a node a few dozen devices.
MAX_FILES: Final = 16
MAX_FILE_BYTES: Final = 8192


def is_device_id(text: str) -> bool:
    return _DEVICE_ID.fullmatch(text) is not None


def visible_devices(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The ids of the GPUs the device plugin gave this container; () when it names none of its own."""
    value = environ.get(VISIBLE_DEVICES, "").strip()
    if value.startswith("/"):  # volume-mounts: one entry per device, named by its id
        try:
            names = sorted(os.listdir(value))
        except OSError:
            return ()
    else:
        names = [part.strip() for part in value.split(",")]
    if any(name.lower() in NO_DEVICES for name in names):
        return ()
    return tuple(sorted({name for name in names if is_device_id(name)}))


def file_name(ids: tuple[str, ...]) -> str:
    """The file a set of ids is written to: the same set, the same file."""
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:16] + SUFFIX


def report(directory: str, ids: tuple[str, ...]) -> None:
    """Write `ids` for the sidecar, atomically; nothing when they are already there. Raises OSError."""
    if not ids:
        return
    path = os.path.join(directory, file_name(ids))
    if os.path.exists(path):
        return
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, f".{os.getpid()}{SUFFIX}")
    try:
        with open(temporary, "w", encoding="ascii") as out:
            out.write("".join(f"{device}\n" for device in sorted(ids)))
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def read(directory: str) -> frozenset[str]:
    """Every id any container of the pod reported (bounded, malformed lines skipped). Raises OSError."""
    found: set[str] = set()
    names = sorted(name for name in os.listdir(directory) if name.endswith(SUFFIX) and not name.startswith("."))
    for name in names[:MAX_FILES]:
        try:
            with open(os.path.join(directory, name), "rb") as source:
                text = source.read(MAX_FILE_BYTES).decode("ascii", errors="replace")
        except OSError:
            continue
        found.update(line.strip() for line in text.splitlines() if is_device_id(line.strip()))
    return frozenset(found)
