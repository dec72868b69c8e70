"""Fire-and-forget delivery of datagrams to the sidecar.

The training loop must never wait for, nor hear about, the sidecar: the socket is non-blocking,
every failure (sidecar not there yet, gone, queue full) is counted and swallowed, and the count
travels in later datagrams so the sidecar can say how many were lost. `send` says whether the
datagram left, so the tracker knows when its latest totals are still owed.
"""

from __future__ import annotations

import socket


class Sender:
    __slots__ = ("_path", "_socket", "dropped")

    def __init__(self, path: str) -> None:
        self._path = path
        self.dropped = 0
        self._socket: socket.socket | None
        try:
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._socket.setblocking(False)
        except OSError:  # no AF_UNIX here, or out of descriptors: count every send as dropped
            self._socket = None

    def send(self, data: bytes) -> bool:
        sock = self._socket
        if sock is None:
            self.dropped += 1
            return False
        try:
            sock.sendto(data, self._path)
        except Exception:
            self.dropped += 1
            return False
        return True

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
