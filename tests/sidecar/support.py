"""Helpers for the sidecar tests: ports, scraping and parsing the exposition, subprocesses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.waiting import eventually, free_port, get

ROOT = Path(__file__).resolve().parents[2]
# The three source roots, for a gpuwise process started where no virtualenv's .pth names them
# (a GPU machine's own Python, say).
SOURCE_PATH = os.pathsep.join(str(ROOT / root) for root in ("core", "operator", "sidecar"))
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
_LABEL = re.compile(r'(?P<key>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Series:
    name: str
    labels: dict[str, str]
    value: float


def parse(text: str) -> list[Series]:
    """The samples of a text exposition (comments skipped)."""
    found = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, f"not an exposition line: {line!r}"
        labels = {m["key"]: m["value"] for m in _LABEL.finditer(match["labels"] or "")}
        found.append(Series(match["name"], labels, float(match["value"])))
    return found


def select(series: list[Series], name: str, **labels: str) -> list[Series]:
    return [s for s in series if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def value(series: list[Series], name: str, **labels: str) -> float:
    matches = select(series, name, **labels)
    assert len(matches) == 1, f"{len(matches)} series {name}{labels}"
    return matches[0].value


def environment(**extra: str) -> dict[str, str]:
    """The test process's environment, minus anything gpuwise reads, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUWISE_")}
    env.pop("PYTHONPATH", None)
    return {**env, **extra}


@dataclass
class SidecarProcess:
    process: subprocess.Popen[bytes]
    port: int
    socket: Path
    instrument_dir: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def scrape(self) -> list[Series]:
        status, body = get(f"{self.url}/metrics")
        assert status == 200, body
        return parse(body)

    def trainer_env(self, mode: str = "auto") -> dict[str, str]:
        return environment(
            PYTHONPATH=str(self.instrument_dir), GPUWISE_SOCKET=str(self.socket), GPUWISE_INSTRUMENT=mode
        )


@contextmanager
def sidecar(
    tmp: Path, *args: str, env: dict[str, str] | None = None, runtime: Path | None = None
) -> Iterator[SidecarProcess]:
    """`gpuwise sidecar` in a subprocess on a free loopback port, ready when this yields.

    `runtime` is the directory it shares with the trainer (a pod's emptyDir; default `tmp/run`).
    """
    port = free_port()
    runtime = runtime or tmp / "run"
    command = [sys.executable, "-m", "gpuwise.cli", "sidecar", "--address", "127.0.0.1", "--port", str(port)]
    command += ["--socket", str(runtime / "steps.sock"), "--instrument-dir", str(runtime / "python"), *args]
    process = subprocess.Popen(
        command, env=env or environment(PYTHONPATH=SOURCE_PATH), cwd=ROOT, stderr=subprocess.PIPE
    )
    handle = SidecarProcess(process, port, runtime / "steps.sock", runtime / "python")
    try:

        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"sidecar exited: {process.stderr.read().decode() if process.stderr else ''}")
            try:
                return get(f"{handle.url}/healthz", timeout=1.0)[0] == 200
            except OSError:
                return False

        eventually(ready, timeout=20.0)
        yield handle
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
