"""A saved `gpuwise run` JSON report, read back and judged again by the engine of this version.

Users share reports and re-judge old ones after an upgrade (`gpuwise diagnose --report FILE`).
What the engine reads of a run is in the report: every step record, the GPU trace, each GPU's
model and the DataLoader set-up, so the same window is rebuilt (`gpuwise.local.diagnosis.window`)
and the current rules run on it. A file that is not such a report, or was cut short, is refused
with a message that names it and says what is wrong, never with a traceback.
"""

from __future__ import annotations

import itertools
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwise.local import diagnosis
from gpuwise.local.recorder import Recorder, StepRecord
from gpuwise.local.report import FORMAT_VERSION
from gpuwise.sidecar.steps import ProcessSteps

if TYPE_CHECKING:
    from gpuwise.diagnose.rules import Diagnosis
    from gpuwise.diagnose.window import JobWindow

REQUIRED: tuple[str, ...] = ("format", "wall_seconds", "setup", "gpus", "per_step", "trace")


class ReportError(ValueError):
    """The file is not a report this version reads; the message names it and says why."""


@dataclass(frozen=True)
class Judged:
    window: JobWindow
    diagnoses: list[Diagnosis]
    not_judged: str | None  # why the run is too short to judge, where it is


def judge(path: Path) -> Judged:
    report = _load(path)
    try:
        steps = [
            StepRecord(
                t=float(s["t"]),
                rank=int(s["rank"]),
                step=int(s["step"]),
                count=int(s["steps"]),
                seconds=float(s["seconds"]),
                wait_seconds=float(s["data_wait_seconds"]),
                samples=None if s.get("samples") is None else int(s["samples"]),
                last_seconds=float(s["seconds"]) / max(int(s["steps"]), 1),  # format 1 keeps no last step
            )
            for s in report["per_step"]
        ]
        trace = [{"t": float(r["t"]), "gpu": int(r["gpu"]), "values": dict(r["values"])} for r in report["trace"]]
        models = {int(gpu["gpu"]): str(gpu.get("model") or "") for gpu in report["gpus"]}
        setup: dict[str, Any] = report["setup"]
        elapsed = float(report["wall_seconds"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportError(
            f"{path}: a record of the report is malformed ({exc!r}); was it edited or cut short?"
        ) from exc
    recorder = Recorder.replayed(steps, trace, models, elapsed)
    processes = _processes(steps, setup)
    summary = recorder.summary(processes)
    interval = _sample_interval(trace)
    window = diagnosis.window(recorder, summary, processes, interval)
    reason = diagnosis.not_judged(recorder, summary)
    found = [] if reason else diagnosis.diagnoses(recorder, summary, processes, interval)
    return Judged(window, found, reason)


def _load(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ReportError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        report = json.loads(text)
    except ValueError as exc:
        raise ReportError(
            f"{path} is not a gpuwise run JSON report: not JSON ({exc}); a report cut short reads like this"
        ) from exc
    if not isinstance(report, dict) or "format" not in report:
        raise ReportError(f"{path} is not a gpuwise run JSON report (write one with gpuwise run --report FILE.json)")
    if report["format"] != FORMAT_VERSION:
        raise ReportError(f"{path} is a format {report['format']!r} report; this gpuwise reads format {FORMAT_VERSION}")
    missing = [key for key in REQUIRED if key not in report]
    if missing:
        raise ReportError(f"{path} lacks {', '.join(missing)}: not a whole gpuwise run report")
    return report


def _processes(steps: list[StepRecord], setup: dict[str, Any]) -> list[ProcessSteps]:
    """One process per rank that reported, with the set-up the report says it ran with."""
    ranks: dict[int, ProcessSteps] = {}
    for record in steps:
        process = ranks.setdefault(record.rank, ProcessSteps(record.rank))
        process.steps += record.count
        process.step_seconds += record.seconds
        process.wait_seconds += record.wait_seconds
        if record.samples is not None:
            process.samples = (process.samples or 0) + record.samples
    for process in ranks.values():
        process.num_workers = setup.get("num_workers")
        process.batch_size = setup.get("batch_size")
        process.pin_memory = setup.get("pin_memory")
        process.autocast = setup.get("autocast")
    return [ranks[rank] for rank in sorted(ranks)]


def _sample_interval(trace: list[dict[str, Any]]) -> float:
    """The sidecar's sampling interval, as the trace's times show it (1 s where they show none)."""
    times = sorted({record["t"] for record in trace})
    gaps = [later - earlier for earlier, later in itertools.pairwise(times) if later > earlier]
    return statistics.median(gaps) if gaps else 1.0
