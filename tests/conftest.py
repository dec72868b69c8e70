"""Suite-wide pytest wiring: GPU tests skip cleanly where no NVIDIA driver answers; short socket paths."""

from __future__ import annotations

import functools
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwise.instrument import wire


@functools.cache
def gpu_available() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    try:
        return bool(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and driver (NVML did not initialise)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory with a short path: unix socket paths are limited to 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="gw-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Inbox:
    """A bound datagram socket standing in for the sidecar: collect what a tracker sends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind(str(path))
        self.socket.settimeout(2.0)

    def receive(self, count: int = 1) -> list[wire.StepEvent]:
        return [wire.decode(self.socket.recv(4096)) for _ in range(count)]

    def pending(self) -> list[wire.StepEvent]:
        events = []
        self.socket.setblocking(False)
        try:
            while True:
                events.append(wire.decode(self.socket.recv(4096)))
        except BlockingIOError:
            return events
        finally:
            self.socket.settimeout(2.0)


@pytest.fixture
def inbox(short_tmp: Path) -> Iterator[Inbox]:
    box = Inbox(short_tmp / "steps.sock")
    yield box
    box.socket.close()
