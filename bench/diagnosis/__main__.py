"""Score the diagnosis engine on the labelled corpus: per kind, precision and recall, and the confusion.

    python -m bench.diagnosis [--json] [--scenarios DIR]

Every scenario of `bench/diagnosis/scenarios/` is judged through the engine path its file names
(`gpuwise run`'s saved-report path, or the operator's window evaluation), and each finding kind
scored over the scenarios that expect it (positives) and those that neither expect nor accept it
(negatives). The exit status is 1 when a kind misses the goal (precision >= 0.95, recall >= 0.9):
precision first, as actions follow findings.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.diagnosis.corpus import (
    GOAL_PRECISION,
    GOAL_RECALL,
    SCENARIOS,
    KindScore,
    Outcome,
    confusion,
    judge_all,
    score,
)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def table(scores: Sequence[KindScore]) -> str:
    """The per-kind table, as Markdown (the README shows it)."""
    lines = [
        "| kind | positives | negatives | TP | FP | FN | precision | recall |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| `{s.kind}` | {s.positives} | {s.negatives} | {s.true_positives} | {s.false_positives} | "
        f"{s.false_negatives} | {_ratio(s.precision)} | {_ratio(s.recall)} |"
        for s in scores
    ]
    return "\n".join(lines)


def as_json(outcomes: Sequence[Outcome], scores: Sequence[KindScore], met: bool) -> dict[str, Any]:
    return {
        "goal": {"precision": GOAL_PRECISION, "recall": GOAL_RECALL, "met": met},
        "kinds": [
            {
                "kind": s.kind,
                "positives": s.positives,
                "negatives": s.negatives,
                "truePositives": s.true_positives,
                "falsePositives": s.false_positives,
                "falseNegatives": s.false_negatives,
                "precision": s.precision,
                "recall": s.recall,
            }
            for s in scores
        ],
        "scenarios": [
            {
                "name": o.scenario.name,
                "path": o.scenario.path,
                "expected": sorted(o.scenario.expected),
                "acceptable": sorted(o.scenario.acceptable),
                "found": list(o.found),
                "wrong": sorted(o.wrong),
                "missed": sorted(o.missed),
            }
            for o in outcomes
        ],
        "confusion": [
            {"expected": expected, "found": found, "count": count}
            for (expected, found), count in confusion(outcomes).items()
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the scores and every scenario's outcome as JSON")
    parser.add_argument("--scenarios", type=Path, default=SCENARIOS)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    outcomes = judge_all(args.scenarios)
    scores = score(outcomes)
    met = all(s.meets_goal for s in scores)
    if args.json:
        print(json.dumps(as_json(outcomes, scores, met), indent=1))
        return 0 if met else 1
    paths = {path: sum(o.scenario.path == path for o in outcomes) for path in ("operator", "local")}
    print(
        f"{len(outcomes)} scenarios ({paths['operator']} operator, {paths['local']} gpuwise run), "
        f"judged in {time.perf_counter() - started:.2f} s\n"
    )
    print(table(scores))
    wrong = [o for o in outcomes if o.wrong or o.missed]
    print("\nWrong findings (confusion: expected -> found instead):")
    for (expected, found), count in confusion(outcomes).items():
        print(f"  {expected} -> {found}: {count}")
    for o in wrong:
        print(
            f"  {o.scenario.name} ({o.scenario.path}): expected {sorted(o.scenario.expected) or '-'}, "
            f"found {list(o.found) or '-'}"
            + (f"; wrong {sorted(o.wrong)}" if o.wrong else "")
            + (f"; missed {sorted(o.missed)}" if o.missed else "")
        )
    if not wrong:
        print("  none")
    failing = [s.kind for s in scores if not s.meets_goal]
    goal = f"precision >= {GOAL_PRECISION}, recall >= {GOAL_RECALL}"
    print(
        f"\nGoal ({goal}, every kind with positives and negatives): "
        + (f"missed by {', '.join(failing)}" if failing else "met")
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
