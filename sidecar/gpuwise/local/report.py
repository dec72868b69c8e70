"""The report `gpuwise run` writes at exit: JSON for machines, HTML for people.

JSON (when the path ends in `.json`) holds the totals, the measured breakdown, every recorded
step and the GPU trace (replayable with `gpuwise sidecar --backend simulated --trace`). HTML is
one self-contained page, plots drawn as inline SVG, so it opens anywhere and can be attached to
an issue.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gpuwise.local.recorder import StepRecord, Summary
from gpuwise.metrics import catalog

FORMAT_VERSION: Final = 1
PLOT_POINTS: Final = 300  # steps are averaged into at most this many bars


@dataclass(frozen=True)
class Run:
    command: list[str]
    exit_code: int
    started_at: str  # ISO 8601
    wall_seconds: float
    backend: str
    scenario: str
    note: str
    summary: Summary
    steps: list[StepRecord]
    trace: list[dict[str, Any]]
    truncated: bool
    diagnosis: list[dict[str, Any]]  # the efficiency engine's findings, see gpuwise.local.diagnosis
    not_judged: str | None = None  # why the engine did not judge the run (too short), if it did not


def write(path: Path, run: Run) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".json":
        path.write_text(json.dumps(to_json(run), indent=1) + "\n")
    else:
        path.write_text(to_html(run))


def to_json(run: Run) -> dict[str, Any]:
    s = run.summary
    return {
        "format": FORMAT_VERSION,
        "command": run.command,
        "exit_code": run.exit_code,
        "started_at": run.started_at,
        "wall_seconds": round(run.wall_seconds, 3),
        "backend": {"name": run.backend, "scenario": run.scenario, "note": run.note},
        "steps": s.steps,
        "samples": s.samples,
        "breakdown": {
            "step_seconds": s.step_seconds,
            "data_wait_seconds": s.wait_seconds,
            "compute_seconds": s.step_seconds - s.wait_seconds,
            "data_wait_ratio": s.wait_ratio,
            "mean_step_seconds": s.mean_step,
            "p50_step_seconds": s.percentile(0.5),
            "p90_step_seconds": s.percentile(0.9),
            "steps_per_second": s.steps_per_second,
            "samples_per_second": s.samples_per_second,
        },
        "setup": s.setup,
        "gpus": s.gpus,
        "findings": s.findings() + ([run.not_judged] if run.not_judged else []) + [f["message"] for f in run.diagnosis],
        "diagnosis": run.diagnosis,
        "not_judged": run.not_judged,
        "per_step": [
            {
                "t": round(r.t, 4),
                "rank": r.rank,
                "step": r.step,
                "steps": r.count,
                "seconds": r.seconds,
                "data_wait_seconds": r.wait_seconds,
                "samples": r.samples,
            }
            for r in run.steps
        ],
        "truncated": run.truncated,
        "trace": run.trace,
    }


def to_html(run: Run) -> str:
    s = run.summary
    rows = [
        ("Command", " ".join(run.command)),
        ("Exit code", str(run.exit_code)),
        ("GPU telemetry", run.note),
        ("Steps", str(s.steps)),
        ("Samples", _or_dash(s.samples)),
        ("Mean step", _ms(s.mean_step)),
        ("p50 / p90 step", f"{_ms(s.percentile(0.5))} / {_ms(s.percentile(0.9))}"),
        ("Waiting for input", _percent(s.wait_ratio)),
        ("Throughput", f"{_or_dash(s.samples_per_second, '{:.1f}')} samples/s"),
        ("DataLoader", ", ".join(f"{k}={_or_dash(v)}" for k, v in s.setup.items())),
    ]
    table = "\n".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    judged = [run.not_judged] if run.not_judged else []  # why there is no finding, as the JSON and terminal say
    diagnosed = [f"{d['kind']}: {d['message']} {d['recommendation'] or ''}".rstrip() for d in run.diagnosis]
    lines = s.findings() + judged + diagnosed
    findings = "\n".join(f"<li>{html.escape(line)}</li>" for line in lines)
    gpu_plot = _gpu_plot(run.trace)
    return _PAGE.format(
        title=html.escape(" ".join(run.command)[:80]),
        findings=findings,
        table=table,
        steps_plot=_steps_plot(run.steps),
        gpu_section=f"<h2>GPU utilization</h2>\n{gpu_plot}" if gpu_plot else "",
    )


def _steps_plot(steps: Sequence[StepRecord], width: int = 900, height: int = 260) -> str:
    if not steps:
        return "<p>No steps were observed.</p>"
    size = math.ceil(len(steps) / PLOT_POINTS)
    bars = []
    for start in range(0, len(steps), size):
        chunk = steps[start : start + size]
        count = sum(r.count for r in chunk)
        bars.append((sum(r.wait_seconds for r in chunk) / count, sum(r.seconds for r in chunk) / count))
    top = max(total for _, total in bars) or 1.0
    bar_width = width / len(bars)
    shapes = []
    for i, (wait, total) in enumerate(bars):
        x = i * bar_width
        h_total, h_wait = total / top * height, wait / top * height
        shapes.append(
            f'<rect x="{x:.1f}" y="{height - h_total:.1f}" width="{max(bar_width - 0.5, 0.5):.1f}" '
            f'height="{h_total - h_wait:.1f}" class="compute"/>'
            f'<rect x="{x:.1f}" y="{height - h_wait:.1f}" width="{max(bar_width - 0.5, 0.5):.1f}" '
            f'height="{h_wait:.1f}" class="wait"/>'
        )
    return (
        f'<svg viewBox="0 0 {width} {height + 20}" width="100%" role="img" '
        f'aria-label="step time per step, split into input wait and compute">'
        f"{''.join(shapes)}"
        f'<text x="0" y="{height + 15}">step 1</text>'
        f'<text x="{width}" y="{height + 15}" text-anchor="end">step {steps[-1].step} '
        f"(bar height: step time, max {top * 1000:.1f} ms)</text></svg>"
        '<p class="legend"><span class="wait">&#9632;</span> waiting for input '
        '<span class="compute">&#9632;</span> compute and the rest</p>'
    )


def _gpu_plot(records: Sequence[dict[str, Any]], width: int = 900, height: int = 200) -> str:
    series: dict[int, list[tuple[float, float]]] = {}
    for record in records:
        util = record["values"].get(catalog.GPU_UTIL.name)
        if util is not None:
            series.setdefault(record["gpu"], []).append((record["t"], util))
    if not series:
        return ""
    end = max(t for points in series.values() for t, _ in points) or 1.0
    lines = []
    for gpu, points in sorted(series.items()):
        path = " ".join(f"{t / end * width:.1f},{height - u / 100 * height:.1f}" for t, u in points)
        lines.append(f'<polyline points="{path}" class="gpu gpu{gpu % 8}"><title>GPU {gpu}</title></polyline>')
    return (
        f'<svg viewBox="0 0 {width} {height + 20}" width="100%" role="img" aria-label="GPU utilization over time">'
        f"{''.join(lines)}"
        f'<text x="0" y="{height + 15}">0 s</text>'
        f'<text x="{width}" y="{height + 15}" text-anchor="end">{end:.0f} s (0-100 %)</text></svg>'
        '<p class="legend">'
        + " ".join(f'<span class="gpu gpu{gpu % 8}">&#9632;</span> GPU {gpu}' for gpu in sorted(series))
        + "</p>"
    )


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _percent(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.0%}"


def _or_dash(value: object, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)


_PAGE: Final = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpuwise run: {title}</title>
<style>
body {{ font: 15px/1.45 system-ui, sans-serif; max-width: 960px; margin: 2em auto; color: #222; }}
th {{ text-align: left; padding-right: 1.5em; font-weight: 600; }}
.wait {{ fill: #e8890c; color: #e8890c; }} .compute {{ fill: #3b6fb6; color: #3b6fb6; }}
polyline.gpu {{ fill: none; stroke-width: 1.5; }}
.gpu0 {{ stroke: #3b6fb6; color: #3b6fb6; }} .gpu1 {{ stroke: #e8890c; color: #e8890c; }}
.gpu2 {{ stroke: #2a9d4b; color: #2a9d4b; }} .gpu3 {{ stroke: #b23a48; color: #b23a48; }}
.gpu4 {{ stroke: #7b4fa6; color: #7b4fa6; }} .gpu5 {{ stroke: #8c6d31; color: #8c6d31; }}
.gpu6 {{ stroke: #1f9aa8; color: #1f9aa8; }} .gpu7 {{ stroke: #555555; color: #555555; }}
svg text {{ font-size: 12px; fill: #555; }} .legend {{ color: #555; }}
</style></head><body>
<h1>gpuwise run</h1>
<ul>
{findings}
</ul>
<table>
{table}
</table>
<h2>Step time, step by step</h2>
{steps_plot}
{gpu_section}
<p class="legend">Measured by gpuwise: optimizer steps mark the steps, DataLoader iterators the input wait.</p>
</body></html>
"""
