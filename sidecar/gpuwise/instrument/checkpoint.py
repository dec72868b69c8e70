"""The checkpoint handshake, training side: notice gpuwise's request, answer once a checkpoint is saved.

Before gpuwise restarts a job (new batch size, another GPU...), it asks the trainer to save a
checkpoint and restarts only once the trainer says it has: without that answer nothing is
restarted. The operator asks by annotating the worker pods; the kubelet projects the annotation
into a file (`GPUWISE_CHECKPOINT_REQUEST_FILE`), which holds a request id or nothing.

Why a file polled at step boundaries, and not a signal: a signal interrupts the training thread
anywhere (inside a collective, halfway through an optimizer step), where no checkpoint is
consistent; a step boundary is where one is. The poll is cheap and rare: the tracker calls it at
most once per `POLL_INTERVAL`, and it costs one `stat`, plus a read when the file changed.

A new id is a pending request. The user's callback (`on_checkpoint`) runs on it at that step
boundary, in the training thread, and its return acknowledges it; without a callback, the next
checkpoint the program saves does (`checkpoint_saved()`, or with auto-instrumentation a `torch.save`
of a checkpoint or a `torch.distributed.checkpoint.save` returning). A callback that raises is counted and reported
once on stderr, never raised into training, and acknowledges nothing; it is not called again for
that request, but a later save still answers it. The acknowledgement is one datagram on the step
socket; one that cannot leave (the sidecar's queue is full) is sent again at the next poll and at
exit. A request is answered at most once per process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final

from gpuwise.instrument import wire

# The least time between two looks at the request file, in seconds.
POLL_INTERVAL: Final = 1.0
# More than any request id: a longer file is not a request.
_READ_BYTES: Final = wire.MAX_REQUEST_ID_BYTES + 64

CheckpointPath = str | bytes | os.PathLike[str] | os.PathLike[bytes]
Callback = Callable[[str], "CheckpointPath | None"]


class Checkpoints:
    """One process's side of the handshake: the pending request, the callback, the ack owed."""

    __slots__ = (
        "_busy",
        "_file",
        "_owed",
        "_read_id",
        "_send",
        "_signature",
        "_tried",
        "_warn",
        "acknowledged",
        "callback",
        "failures",
        "local_rank",
        "pending",
        "rank",
    )

    def __init__(
        self,
        file: str,
        send: Callable[[bytes], bool],
        warn: Callable[[str], None],
        *,
        local_rank: int = 0,
        rank: int = wire.UNKNOWN,
    ) -> None:
        self._file = file
        self._send = send
        self._warn = warn
        self.local_rank = local_rank
        self.rank = rank
        self._signature: tuple[int, int, int] | None = None  # inode, mtime, size of the file last read
        self._read_id = ""  # what the file held when last read
        self._tried = ""  # the request the callback was last called for
        self._busy = False  # the callback runs: the saves inside it are its own
        self._owed: bytes | None = None
        self.pending: str | None = None
        self.callback: Callback | None = None
        self.acknowledged: str | None = None  # the latest request acknowledged
        self.failures = 0  # callbacks that raised

    def poll(self) -> None:
        """At a step boundary: resend an owed ack, look for a new request, run the callback on it."""
        if self._owed is not None:
            self._deliver(self._owed)
        self._look()
        request_id, callback = self.pending, self.callback
        if request_id is not None and callback is not None and request_id != self._tried and not self._busy:
            self._call(callback, request_id)

    def saved(self, path: CheckpointPath | None = None) -> bool:
        """A checkpoint was just saved: acknowledge the pending request, if any. Say whether one was."""
        if self._busy:  # inside the callback: its return is the answer
            return False
        self._look()
        request_id = self.pending
        if request_id is None:
            return False
        self._acknowledge(request_id, path)
        return True

    def resend(self) -> bool:
        """Try to send an owed ack again (at exit); True when nothing is owed any more."""
        if self._owed is not None:
            self._deliver(self._owed)
        return self._owed is None

    def _look(self) -> None:
        """Read the request file if it changed since the last look."""
        try:
            info = os.stat(self._file)
            signature = (info.st_ino, info.st_mtime_ns, info.st_size)
            if signature == self._signature:
                return
            with open(self._file, "rb") as file:
                text = file.read(_READ_BYTES).decode(errors="replace").strip()
        except FileNotFoundError:  # no request volume here (not on Kubernetes): never a request
            signature, text = None, ""
        except OSError as exc:
            self._warn(f"cannot read checkpoint requests from {self._file}: {exc.strerror or exc}")
            return
        self._signature = signature
        if text == self._read_id:
            return
        self._read_id = text
        if text and not wire.is_request_id(text):
            self._warn(f"ignoring checkpoint request {text[:80]!r} in {self._file}: not a request id")
            text = ""
        self.pending = text or None  # an emptied file withdraws the request

    def _call(self, callback: Callback, request_id: str) -> None:
        self._tried = request_id
        self._busy = True
        try:
            path = callback(request_id)
        except Exception as exc:
            self.failures += 1
            self._warn(f"the checkpoint callback failed on request {request_id}, not acknowledged: {exc!r}")
            return
        finally:
            self._busy = False
        self._acknowledge(request_id, path)

    def _acknowledge(self, request_id: str, path: object) -> None:
        if self.pending == request_id:
            self.pending = None
        self.acknowledged = request_id
        ack = wire.CheckpointAck(os.getpid(), self.local_rank, self.rank, request_id, _path_text(path))
        self._deliver(wire.encode_ack(ack))

    def _deliver(self, data: bytes) -> None:
        self._owed = None if self._send(data) else data


def _path_text(path: object) -> str:
    """The checkpoint's path as text; nothing for what is not a path."""
    if path is None:
        return ""
    try:
        return os.fsdecode(path)  # type: ignore[arg-type]
    except TypeError:
        return ""
