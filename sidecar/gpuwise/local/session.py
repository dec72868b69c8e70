"""One `gpuwise run`: the embedded sidecar, the command under it, the live view, the report."""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console, RenderableType
from rich.live import Live
from rich.table import Table

from gpuwise import wiring
from gpuwise.local import diagnosis, live, report
from gpuwise.local.recorder import Recorder, Summary
from gpuwise.sidecar.assembly import Sidecar
from gpuwise.sidecar.backend import Backend, BackendUnavailable
from gpuwise.sidecar.identity import Identity


def run(args: argparse.Namespace, command: list[str]) -> int:
    """Run `command` as `args` say (see `gpuwise.local.run_command`); return its exit code."""
    console = Console()
    backend, note = _backend(args.simulate, args.gpus)
    with tempfile.TemporaryDirectory(prefix="gpuwise-") as runtime_dir:
        return _run(args, command, console=console, backend=backend, note=note, where=Path(runtime_dir))


def _backend(scenario: str | None, gpus: int) -> tuple[Backend | None, str]:
    if scenario is not None:
        from gpuwise.sidecar.simulated import SimulatedBackend

        return SimulatedBackend(scenario, gpus), f"simulated: {gpus} GPU(s) playing '{scenario}'"
    try:
        from gpuwise.sidecar.nvml import NvmlBackend

        nvml = NvmlBackend()
    except BackendUnavailable:
        return None, "no NVIDIA GPU found (NVML did not initialise): showing step metrics only"
    return nvml, f"NVML: {len(nvml.devices)} device(s)"


def _run(
    args: argparse.Namespace, command: list[str], *, console: Console, backend: Backend | None, note: str, where: Path
) -> int:
    recorder = Recorder()
    sidecar = Sidecar(
        backend=backend,
        identity=Identity.from_environment(),
        socket_path=where / "steps.sock",
        interval=args.interval,
        instrument_path=where / "python",
        port=args.prometheus_port,
        on_sample=recorder.on_sample,
        on_step=recorder.on_step,
    )
    sidecar.start()
    console.print(f"[bold]gpuwise run[/]: {note}", highlight=False)
    if sidecar.server is not None:
        console.print(f"metrics at http://127.0.0.1:{sidecar.server.port}/metrics", highlight=False)
    started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    started = time.monotonic()
    view = (
        live.view(sidecar, recorder, " ".join(command)[:70], note) if console.is_terminal and not args.no_live else None
    )
    try:
        code = _child(command, _environment(where), console=console, view=view)
        _drain(sidecar)
    finally:
        sidecar.stop()
    processes = sidecar.book.processes()
    summary = recorder.summary(processes)
    reason = diagnosis.not_judged(recorder, summary)
    found = [] if reason else diagnosis.findings(recorder, summary, processes, args.interval)
    console.print(_summary_table(summary, found, reason))
    if args.report:
        run = report.Run(
            command=command,
            exit_code=code,
            started_at=started_at,
            wall_seconds=time.monotonic() - started,
            backend=backend.name if backend is not None else "none",
            scenario=backend.scenario if backend is not None else "",
            note=note,
            summary=summary,
            steps=recorder.steps(),
            trace=recorder.trace(),
            truncated=recorder.truncated,
            diagnosis=found,
            not_judged=reason,
        )
        for path in args.report:
            report.write(path, run)
            console.print(f"report written to {path}", highlight=False)
    return code


def _environment(where: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(where / "python"), env.get("PYTHONPATH")]))
    env[wiring.ENV_SOCKET] = str(where / "steps.sock")
    env.setdefault(wiring.ENV_INSTRUMENT, "auto")
    return env


def _child(
    command: list[str], env: dict[str, str], *, console: Console, view: Callable[[], RenderableType] | None
) -> int:
    """Run the command to completion (under the live view, if any); forward SIGTERM; return its code."""
    show_live = view is not None
    if show_live:  # the child's output goes through rich, above the live view
        env = {**env, "PYTHONUNBUFFERED": "1"}
    try:
        process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE if show_live else None,
            stderr=subprocess.STDOUT if show_live else None,
            text=show_live,
        )
    except OSError as exc:
        console.print(f"gpuwise run: cannot run {command[0]!r}: {exc.strerror or exc}", highlight=False)
        return 127

    def forward(signum: int, frame: FrameType | None) -> None:
        process.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        if view is not None:
            with Live(get_renderable=view, console=console, refresh_per_second=2):
                pump = threading.Thread(target=_pump, args=(process, console), daemon=True)
                pump.start()
                _wait(process)
                pump.join(timeout=5)
        else:
            _wait(process)
    finally:
        signal.signal(signal.SIGTERM, previous)
    code = process.returncode
    return 128 - code if code < 0 else code


def _wait(process: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    """Wait; a Ctrl-C reaches the child through the terminal, so keep waiting for it to end."""
    while True:
        try:
            process.wait()
            return
        except KeyboardInterrupt:
            continue


def _pump(process: subprocess.Popen[str], console: Console) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        console.print(line.rstrip("\n"), markup=False, highlight=False)


def _drain(sidecar: Sidecar, quiet: float = 0.3, limit: float = 3.0) -> None:
    """Let the receiver read the datagrams still queued when the command exited."""
    if sidecar.receiver is None:
        return
    deadline = time.monotonic() + limit
    seen = -1
    while seen != sidecar.receiver.received and time.monotonic() < deadline:
        seen = sidecar.receiver.received
        time.sleep(quiet)


def _summary_table(summary: Summary, found: list[dict[str, Any]], not_judged: str | None) -> Table:
    table = Table(title="gpuwise run: summary", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    ratio = summary.wait_ratio
    rows = [
        ("steps", str(summary.steps)),
        ("mean step", f"{summary.mean_step * 1000:.1f} ms" if summary.mean_step is not None else "-"),
        ("waiting for input", f"{ratio * 100:.0f} %" if ratio is not None else "-"),
        ("samples/s", f"{summary.samples_per_second:.1f}" if summary.samples_per_second is not None else "-"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    for line in summary.findings():
        table.add_row("", line)
    if not_judged:
        table.add_row("", not_judged)
    for finding in found:
        table.add_row(finding["kind"], finding["message"])
        if finding["recommendation"]:
            table.add_row("", f"[dim]{finding['recommendation']}[/]")
    return table
