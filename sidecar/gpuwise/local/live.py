"""The live terminal view of `gpuwise run`: throughput, step time, input wait, GPUs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpuwise.local.recorder import Recorder
from gpuwise.metrics import catalog
from gpuwise.sidecar.assembly import Sidecar

RECENT_SECONDS: Final = 10.0


def view(sidecar: Sidecar, recorder: Recorder, title: str, note: str) -> Callable[[], RenderableType]:
    """A renderable factory for rich's Live: each refresh reads the sidecar's current state."""

    def render() -> RenderableType:
        now = recorder.elapsed()
        recent = [r for r in recorder.steps() if r.t >= now - RECENT_SECONDS]
        steps = sum(r.count for r in recent)
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        total = sum(p.steps for p in sidecar.book.processes())
        if not recent:
            table.add_row("steps", f"{total}")
        else:
            # Rates over the window, or over the part of it the run has been stepping.
            span = max(min(RECENT_SECONDS, now - recent[0].t + recent[0].seconds), 1e-3)
            seconds = sum(r.seconds for r in recent)
            wait = sum(r.wait_seconds for r in recent)
            samples = [r.samples for r in recent if r.samples is not None]
            table.add_row("steps", f"{total}  ({steps / span:.1f}/s over the last {span:.0f} s)")
            table.add_row("step time", f"{seconds / steps * 1000:.1f} ms")
            table.add_row("waiting for input", _bar(wait / seconds if seconds else 0.0))
            if samples:
                table.add_row("samples/s", f"{sum(samples) / span:.0f}")
        rows: list[RenderableType] = [Text(note, style="dim"), table]
        snapshot = sidecar.sampler.snapshot if sidecar.sampler is not None else None
        if snapshot is not None:
            rows.append(_gpus(snapshot.sample.readings))
        return Panel(Group(*rows), title=title, title_align="left")

    return render


def _gpus(readings: tuple[object, ...]) -> Table:
    table = Table(box=None, padding=(0, 2), show_edge=False)
    for column in ("GPU", "model", "util", "memory", "power"):
        table.add_column(column, style="bold" if column == "GPU" else None)
    per_device: dict[tuple[int, int | None], dict[str, float]] = {}
    models: dict[tuple[int, int | None], str] = {}
    for reading in readings:
        device = reading.device  # type: ignore[attr-defined]
        key = (device.index, device.mig_instance)
        per_device.setdefault(key, {})[reading.metric.name] = reading.value  # type: ignore[attr-defined]
        models[key] = device.model if device.mig_profile is None else f"{device.model} {device.mig_profile}"
    for key, values in sorted(per_device.items(), key=lambda item: (item[0][0], item[0][1] or -1)):
        util = values.get(catalog.GPU_UTIL.name)
        used, free = values.get(catalog.FB_USED.name), values.get(catalog.FB_FREE.name)
        watts = values.get(catalog.POWER_USAGE.name)
        table.add_row(
            str(key[0]) if key[1] is None else f"{key[0]}/{key[1]}",
            models[key],
            _bar(util / 100.0) if util is not None else "-",
            f"{used / 1024:.1f} / {(used + free) / 1024:.1f} GiB" if used is not None and free is not None else "-",
            f"{watts:.0f} W" if watts is not None else "-",
        )
    return table


def _bar(ratio: float, width: int = 20) -> Text:
    filled = round(min(max(ratio, 0.0), 1.0) * width)
    return Text("█" * filled + "░" * (width - filled) + f" {ratio:.0%}")
