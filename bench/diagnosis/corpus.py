"""The labelled scenarios of the diagnosis benchmark, each judged by the engine's own paths, and scored.

A scenario is one JSON file in `scenarios/` holding what a job's telemetry showed and a
`scenario` record: the kinds the engine must find (`expected`), kinds it may find without being
right or wrong (`acceptable`, each with its reason in `why`), and a line on why. Two shapes, one
for each way gpuwise judges a job, so that what is scored is what users get:

- `path: local`: the file *is* a `gpuwise run` JSON report (format 1), with the scenario record as
  one more key. It is judged as `gpuwise diagnose --report FILE` judges it (`gpuwise.local.saved`),
  and the command itself reads it unchanged.
- `path: operator`: a TrainingJob (its spec and status) and the `Reported` record the operator's
  batched Prometheus read would have made of its window. The window is cut from a `Snapshot` and
  judged by `evaluate_window`, as each cycle of the operator does after its read.

A kind's positives are the scenarios that expect it; its negatives, those that neither expect it
nor accept it. A finding on a negative is a false positive, a positive without it a false
negative: precision and recall per kind, as `python -m bench.diagnosis` prints them.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from gpuwise.api.kinds import FindingKind
from gpuwise.diagnose.window import REPORTED_FIELDS, Points, Reported, slowdown_bits
from gpuwise.local import saved
from gpuwise.operator.evaluate import evaluate_window, job_facts
from gpuwise.operator.job_settings import job_settings
from gpuwise.prometheus.snapshot import Snapshot

SCENARIOS: Final = Path(__file__).parent / "scenarios"
KINDS: Final = tuple(kind.value for kind in FindingKind)
PATHS: Final = ("local", "operator")
# The goal: precision first, as actions follow findings.
GOAL_PRECISION: Final = 0.95
GOAL_RECALL: Final = 0.9
# When an operator scenario's window ends: its TrainingJob's startTime is this less the job's age.
NOW: Final = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


class ScenarioError(ValueError):
    """A scenario file that does not say what it must; the message names the file."""


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str  # "local" or "operator": which of the engine's entry points judges it
    why: str
    expected: frozenset[str]
    acceptable: frozenset[str]
    file: Path


@dataclass(frozen=True)
class Outcome:
    scenario: Scenario
    found: tuple[str, ...]  # the kinds found, most confident first

    @property
    def wrong(self) -> frozenset[str]:
        """Found, and neither expected nor acceptable: false positives."""
        return frozenset(self.found) - self.scenario.expected - self.scenario.acceptable

    @property
    def missed(self) -> frozenset[str]:
        """Expected, and not found: false negatives."""
        return self.scenario.expected - frozenset(self.found)


@dataclass(frozen=True)
class KindScore:
    kind: str
    positives: int
    negatives: int
    true_positives: int
    false_positives: int
    false_negatives: int

    @property
    def precision(self) -> float | None:
        """None where the kind was never found: nothing to be precise about (its recall says the rest)."""
        found = self.true_positives + self.false_positives
        return self.true_positives / found if found else None

    @property
    def recall(self) -> float | None:
        return self.true_positives / self.positives if self.positives else None

    @property
    def meets_goal(self) -> bool:
        """Precision and recall at the goal; a kind without positives or negatives cannot show either."""
        return (
            self.positives > 0
            and self.negatives > 0
            and (self.precision is None or self.precision >= GOAL_PRECISION)
            and (self.recall or 0.0) >= GOAL_RECALL
        )


def load(file: Path) -> tuple[Scenario, dict[str, Any]]:
    """A scenario file's record and its whole document."""
    try:
        document = json.loads(file.read_text())
        record = document["scenario"]
        scenario = Scenario(
            name=file.stem,
            path=str(record["path"]),
            why=str(record["why"]),
            expected=frozenset(record["expected"]),
            acceptable=frozenset(record.get("acceptable", ())),
            file=file,
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ScenarioError(f"{file}: not a scenario ({exc!r})") from exc
    unknown = (scenario.expected | scenario.acceptable) - set(KINDS)
    if unknown or scenario.path not in PATHS or scenario.expected & scenario.acceptable:
        raise ScenarioError(
            f"{file}: unknown kinds {sorted(unknown)}, path {scenario.path!r} or a kind both expected and acceptable"
        )
    return scenario, document


def judge(file: Path) -> Outcome:
    """The kinds the engine finds in one scenario, through the path its file names."""
    scenario, document = load(file)
    found = _local(file) if scenario.path == "local" else _operator(file, document)
    return Outcome(scenario, tuple(found))


def judge_all(directory: Path = SCENARIOS) -> list[Outcome]:
    return [judge(file) for file in sorted(directory.glob("*.json"))]


def _local(file: Path) -> list[str]:
    """As `gpuwise diagnose --report FILE` judges it (a run too short to judge gets nothing)."""
    try:
        judged = saved.judge(file)
    except saved.ReportError as exc:
        raise ScenarioError(str(exc)) from exc
    return [finding.kind for finding, _ in judged.diagnoses]


def _operator(file: Path, document: Mapping[str, Any]) -> list[str]:
    """As the operator's cycle judges the job after its read: a window cut from a `Snapshot`, the
    job's facts from its TrainingJob, `evaluate_window` against its stored status."""
    body, window = document["trainingjob"], document["window"]
    settings = job_settings(body)
    if settings is None:
        raise ScenarioError(f"{file}: its trainingjob does not validate")
    step = float(window["step_seconds"])
    key = (body["metadata"]["namespace"], body["metadata"]["name"])
    snapshot = Snapshot(
        now=NOW.timestamp(),
        window_seconds=settings.window_seconds,
        step_seconds=step,
        series={},
        by_job={key: reported(window["reported"], NOW.timestamp(), step, file)},
    )
    job_window = snapshot.window(key, job_facts(body, settings, NOW))
    evaluation = evaluate_window(settings, job_window, body.get("status") or {}, NOW)
    return [finding.kind for finding in evaluation.findings]


def reported(fields: Mapping[str, Any], end: float, step: float, file: Path) -> Reported:
    """The `Reported` record the operator's read makes of a scenario's JSON: per-worker step times
    become `Points` on the read's grid of `step`-spaced times ending at `end`, and the clock-event
    reasons DCGM reported their `slowdown_bits`, as `gpuwise.prometheus.incremental` keeps them."""
    unknown = set(fields) - set(REPORTED_FIELDS)
    if unknown:
        raise ScenarioError(f"{file}: {sorted(unknown)} are not Reported fields")
    values = dict(fields)
    if "compute_capability" in values:
        values["compute_capability"] = tuple(values["compute_capability"])
    if "memory_by_batch" in values:
        values["memory_by_batch"] = tuple((int(b), float(m)) for b, m in values["memory_by_batch"])
    if "worker_step_seconds" in values:
        values["worker_step_seconds"] = {
            int(w): _on_grid(s, end, step) for w, s in values["worker_step_seconds"].items()
        }
    if "clock_slowdowns" in values:
        # The file holds DCGM's clock-event reasons as reported; the read keeps their slowdown bits.
        values["clock_slowdowns"] = {
            int(w): [float(slowdown_bits(v)) for v in s] for w, s in values["clock_slowdowns"].items()
        }
    return Reported(**values)


def _on_grid(series: Sequence[float], end: float, step: float) -> Points:
    times = array("d", (end - (len(series) - 1 - i) * step for i in range(len(series))))
    return Points(times, array("d", map(float, series)))


def score(outcomes: Iterable[Outcome]) -> list[KindScore]:
    """Per kind, in `FindingKind` order: its positives and negatives, and what the engine made of them."""
    outcomes = list(outcomes)
    scores = []
    for kind in KINDS:
        positives = [o for o in outcomes if kind in o.scenario.expected]
        negatives = [o for o in outcomes if kind not in o.scenario.expected | o.scenario.acceptable]
        true_positives = sum(kind in o.found for o in positives)
        scores.append(
            KindScore(
                kind=kind,
                positives=len(positives),
                negatives=len(negatives),
                true_positives=true_positives,
                false_positives=sum(kind in o.found for o in negatives),
                false_negatives=len(positives) - true_positives,
            )
        )
    return scores


def confusion(outcomes: Iterable[Outcome]) -> dict[tuple[str, str], int]:
    """How often each kind was found wrongly, by what the scenario expected instead ("-": nothing)."""
    counts: dict[tuple[str, str], int] = {}
    for outcome in outcomes:
        for wrong in outcome.wrong:
            for expected in sorted(outcome.scenario.expected) or ["-"]:
                counts[expected, wrong] = counts.get((expected, wrong), 0) + 1
    return dict(sorted(counts.items()))
