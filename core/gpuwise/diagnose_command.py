"""`gpuwise diagnose`: why running jobs underuse their GPUs, straight from a Prometheus server.

The same batched queries and the same rules as the operator, without Kubernetes. What the CLI
cannot know without the TrainingJob object is left out rather than guessed: no tunables (so
recommendations explain the fix but name no environment changes), no pod CPU limit, and no job
age, so every job is taken to be past the start-up grace period.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from gpuwise.api.base import parse_duration
from gpuwise.api.kinds import ActionKind
from gpuwise.api.trainingjob import EfficiencySummary, Tunables
from gpuwise.diagnose.rules import Diagnosis, DiagnosisThresholds, RuleContext, diagnose
from gpuwise.diagnose.summary import figures
from gpuwise.diagnose.window import JobWindow, Sustain
from gpuwise.prometheus import batched
from gpuwise.prometheus.client import Prometheus, PrometheusError
from gpuwise.prometheus.labels import JobKey
from gpuwise.prometheus.snapshot import JobFacts

USAGE_ERROR: Final = 2
# Prometheus refuses range queries of more than 11,000 points per series.
MAX_POINTS: Final = 11_000
SHOWN_JOBS: Final = 10

EPILOG = """\
Each job is judged over --window sampled every --step, like the operator does. The CLI has no
TrainingJob object, so: every job counts as older than the start-up grace period (findings are not
held back for young jobs), the pod's CPU limit is unknown, and no tunables are declared, so
recommendations say what to change without proposing environment values.

With --report FILE, a saved `gpuwise run --report FILE.json` is judged again by this version's
engine instead, with the settings the run reported as its tunables; the output has the same shape.

exit status: 0 diagnosed, 2 bad input (URL, duration, unknown job, a file that is not a whole
report) or Prometheus unreachable.
"""


class UsageError(Exception):
    """Something the user must fix; the message says what."""


@dataclass(frozen=True)
class Result:
    key: JobKey
    window: JobWindow
    diagnoses: list[Diagnosis]

    def summary(self) -> EfficiencySummary:
        return figures(self.window).summary(self.diagnoses[0][0].kind if self.diagnoses else None)

    def as_json(self) -> dict[str, Any]:
        namespace, name = self.key
        return {
            "namespace": namespace,
            "trainingjob": name,
            "efficiency": self.summary().model_dump(mode="json", by_alias=True, exclude={"updated_at"}),
            "findings": [finding.to_k8s() for finding, _ in self.diagnoses],
            "recommendations": [r.to_k8s() for _, r in self.diagnoses if r is not None],
        }


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(
        prog="gpuwise diagnose",
        description="Diagnose why training jobs underuse their GPUs, from the metrics in Prometheus.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cli.add_argument("trainingjob", nargs="?", metavar="TRAININGJOB", help="one job (default: every job)")
    source = cli.add_mutually_exclusive_group(required=True)
    source.add_argument("--prometheus-url", metavar="URL", help="e.g. http://prometheus:9090")
    source.add_argument(
        "--report",
        type=Path,
        metavar="FILE",
        help="a saved `gpuwise run --report FILE.json`, judged again by this version's engine",
    )
    cli.add_argument("-n", "--namespace", help="only jobs in this namespace (default: all namespaces)")
    cli.add_argument("--window", default="15m", help="how far back to look (default 15m)")
    cli.add_argument("--step", default="15s", help="sample spacing within the window (default 15s)")
    cli.add_argument("--timeout", type=float, default=10.0, help="seconds per Prometheus query (default 10)")
    cli.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    return cli


def _check_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"--prometheus-url {url!r} is not an http(s) URL; give one like http://prometheus:9090")
    return url


def _durations(window_text: str, step_text: str) -> tuple[float, float]:
    try:
        window, step = parse_duration(window_text), parse_duration(step_text)
    except ValueError as exc:
        raise UsageError(f"--window/--step: {exc}") from exc
    if step > window:
        raise UsageError(f"--step {step_text} is longer than --window {window_text}; make the step shorter")
    if window / step > MAX_POINTS:
        raise UsageError(f"--window {window_text} at --step {step_text} is over {MAX_POINTS} samples; raise --step")
    return window, step


def _select(jobs: list[JobKey], namespace: str | None, name: str | None) -> list[JobKey]:
    chosen = [k for k in jobs if (namespace is None or k[0] == namespace) and (name is None or k[1] == name)]
    if name is not None and not chosen:
        where = f"namespace {namespace!r}" if namespace else "any namespace"
        same_ns = [n for ns, n in jobs if namespace is None or ns == namespace]
        known = ", ".join(same_ns[:SHOWN_JOBS]) + (" …" if len(same_ns) > SHOWN_JOBS else "") or "none"
        raise UsageError(f"no TrainingJob {name!r} in {where} has series in Prometheus (jobs there: {known})")
    if name is not None and len({ns for ns, _ in chosen}) > 1:
        spaces = ", ".join(ns for ns, _ in chosen)
        raise UsageError(f"TrainingJob {name!r} exists in several namespaces ({spaces}); pick one with -n")
    if namespace is not None and not chosen:
        spaces = ", ".join(sorted({ns for ns, _ in jobs})) or "none"
        raise UsageError(f"no TrainingJob in namespace {namespace!r} has series (namespaces with jobs: {spaces})")
    return chosen


def rejudge(path: Path) -> list[Result]:
    """A saved gpuwise run report, judged again (`gpuwise.local.saved`)."""
    from gpuwise.local.saved import ReportError, judge

    try:
        judged = judge(path)
    except ReportError as exc:
        raise UsageError(str(exc)) from exc
    if judged.not_judged:
        sys.stderr.write(f"gpuwise diagnose: {path}: {judged.not_judged}\n")
    return [Result(("", path.name), judged.window, judged.diagnoses)]


def run(args: argparse.Namespace) -> list[Result]:
    if args.report is not None:
        return rejudge(args.report)
    source = Prometheus(_check_url(args.prometheus_url), timeout=args.timeout)
    window_seconds, step_seconds = _durations(args.window, args.step)
    try:
        snapshot = batched.fetch(source, now=time.time(), window_seconds=window_seconds, step_seconds=step_seconds)
    except PrometheusError as exc:
        cause = exc.__cause__
        if isinstance(cause, urllib.error.URLError):
            why = f"cannot reach {source.url}: {cause.reason}"
        elif isinstance(cause, OSError):
            why = f"cannot reach {source.url}: {cause}"
        else:
            why = f"Prometheus refused a query: {exc}"
        raise UsageError(f"{why}; check --prometheus-url and that Prometheus is up") from exc
    sustain = Sustain()
    # Unknown age: old enough that the grace period holds nothing back (see EPILOG).
    facts = JobFacts(age_seconds=sustain.grace_seconds + window_seconds)
    now = datetime.fromtimestamp(snapshot.now, tz=UTC).replace(microsecond=0)
    results = []
    for key in _select(snapshot.jobs(), args.namespace, args.trainingjob):
        window = snapshot.window(key, facts)
        context = RuleContext(
            window=window,
            tunables=Tunables(),
            thresholds=DiagnosisThresholds(),
            sustain=sustain,
            now=now,
            active=frozenset(),
            since={},
        )
        results.append(Result(key, window, diagnose(context)))
    return results


def _percent(value: float | None, scale: float) -> str:
    return f"{value * scale:.0f}%" if value is not None else "-"


def render(results: list[Result]) -> str:
    rows = [("JOB", "GPUS", "GPU UTIL", "DATA WAIT", "TOP FINDING")]
    for result in results:
        summary = result.summary()
        rows.append(
            (
                "/".join(result.key),
                str(result.window.gpus),
                _percent(summary.gpu_utilization, 1),
                _percent(summary.data_wait_fraction, 100),
                summary.top_finding or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    for result in results:
        for finding, recommendation in result.diagnoses:
            lines += ["", f"{'/'.join(result.key)}: {finding.kind} (confidence {finding.confidence:.2f})"]
            lines.append(f"  {finding.message}")
            if finding.evidence:
                lines.append("  evidence: " + ", ".join(f"{k}={v}" for k, v in finding.evidence.items()))
            if recommendation is not None:
                effect = f" (expected: {recommendation.expected_effect})" if recommendation.expected_effect else ""
                lines.append(f"  → {recommendation.message}{effect}")
                if recommendation.action is ActionKind.ADJUST_CONFIG:  # its changes are the job's env
                    lines += [f"    set {env}={value}" for env, value in recommendation.changes.items()]
                elif recommendation.changes:  # another action's own parameters: nothing for a user to set
                    shown = ", ".join(f"{key}={value}" for key, value in recommendation.changes.items())
                    lines.append(f"    {recommendation.action.value}: {shown}")
    if any(r is not None and r.action is ActionKind.ADJUST_CONFIG for result in results for _, r in result.diagnoses):
        lines += ["", "Recommendations name no settings: the CLI does not see spec.efficiency.tunables (see --help)."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        results = run(args)
    except UsageError as exc:
        sys.stderr.write(f"gpuwise diagnose: {exc}\n")
        return USAGE_ERROR
    if args.json:
        json.dump([r.as_json() for r in results], sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif results:
        sys.stdout.write(render(results))
    else:
        sys.stderr.write("gpuwise diagnose: no TrainingJob has series in Prometheus over the window\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
