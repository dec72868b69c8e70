"""The step-event receiver: a unix datagram socket on the pod's shared volume, read by a thread.

Two kinds of datagram arrive there (see `gpuwise.instrument.wire`): step events, which go to the
step book, and checkpoint acknowledgements, which go to the checkpoint book.

Datagrams keep the sender simple and non-blocking, and keep the sidecar's memory bounded by the
kernel's socket queue. What the sidecar reads is bounded too: a token bucket caps the events it
parses per second (anything above is a misbehaving sender, and since events carry running totals,
skipping some loses nothing but resolution), malformed datagrams are dropped, and every drop is
counted by reason.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Final

from gpuwise.instrument import wire
from gpuwise.sidecar.checkpoints import CheckpointAcks
from gpuwise.sidecar.steps import StepBook, StepDelta

log = logging.getLogger(__name__)

MAX_EVENTS_PER_SECOND: Final = 5000
# Unix socket paths are limited by sockaddr_un.sun_path (108 bytes with the terminating NUL).
MAX_PATH_BYTES: Final = 107
# Drop reasons: the `reason` label of gpuwise_step_events_dropped_total.
MALFORMED: Final = "malformed"
FLOOD: Final = "flood"
TOO_MANY_SOURCES: Final = "too_many_sources"


class SocketPathError(ValueError):
    """The socket path cannot be used; the message says how to fix it."""


def bind(path: Path) -> socket.socket:
    """Bind a datagram socket at `path`, replacing a stale socket left by an earlier run."""
    if len(os.fsencode(path)) > MAX_PATH_BYTES:
        raise SocketPathError(f"--socket {path} is longer than {MAX_PATH_BYTES} bytes; use a shorter path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.exists():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise SocketPathError(f"--socket {path} exists and is not a socket; remove it or use another path")
            path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(os.fspath(path))
    except OSError as exc:
        raise SocketPathError(f"cannot bind --socket {path}: {exc.strerror or exc}") from exc
    # The trainer may run as another user than the sidecar; it needs write access to send.
    os.chmod(path, 0o666)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    return sock


class _TokenBucket:
    __slots__ = ("_at", "_rate", "_tokens")

    def __init__(self, rate: float) -> None:
        self._rate = rate
        self._tokens = rate
        self._at = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self._tokens = min(self._rate, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


class Receiver:
    def __init__(
        self,
        path: Path,
        book: StepBook,
        *,
        rate: float = MAX_EVENTS_PER_SECOND,
        on_step: Callable[[StepDelta], None] | None = None,
    ) -> None:
        self.path = path
        self.book = book
        self.acks = CheckpointAcks()
        self.received = 0
        self.dropped: Counter[str] = Counter()
        self._bucket = _TokenBucket(rate)
        self._on_step = on_step
        self._socket = bind(path)
        self._socket.settimeout(0.25)  # how soon stop() is noticed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuwise-steps", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._socket.recv(wire.MAX_SIZE + 1)  # anything longer arrives truncated: malformed
            except TimeoutError:
                continue
            except OSError as exc:
                if not self._stop.is_set():
                    log.warning("receiving step events failed: %s", exc)
                    self._stop.wait(0.5)
                continue
            self.handle(data, time.time())

    def handle(self, data: bytes, now: float) -> None:
        """Account one datagram received at unix time `now`."""
        self.received += 1
        if not self._bucket.take():
            self.dropped[FLOOD] += 1
            return
        try:
            event = wire.parse(data)
        except wire.MalformedEvent:
            self.dropped[MALFORMED] += 1
            return
        if isinstance(event, wire.CheckpointAck):
            self.acks.record(event, now)
            return
        try:
            delta = self.book.record(event, now)
        except OverflowError:
            self.dropped[TOO_MANY_SOURCES] += 1
            return
        if delta is not None and self._on_step is not None:
            self._on_step(delta)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)
        self._socket.close()
        try:
            if stat.S_ISSOCK(self.path.lstat().st_mode):
                self.path.unlink()
        except OSError:
            pass
