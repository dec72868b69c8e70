"""The diagnosis benchmark (`python -m bench.diagnosis`): the engine meets its goal on the labelled
corpus, the corpus is what its generator makes, and it covers what the issue asks for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench.diagnosis import __main__ as command
from bench.diagnosis import generate
from bench.diagnosis.corpus import KINDS, SCENARIOS, Outcome, ScenarioError, judge, judge_all, load, score


@pytest.fixture(scope="module")
def outcomes() -> list[Outcome]:
    return judge_all()


def test_the_engine_meets_the_goal_on_every_kind(outcomes: list[Outcome]) -> None:
    scores = score(outcomes)
    assert all(s.meets_goal for s in scores), command.table(scores)


def test_the_corpus_has_positives_and_negatives_of_every_kind_on_both_paths(outcomes: list[Outcome]) -> None:
    assert len(outcomes) >= 40
    for s in score(outcomes):
        assert s.positives >= 3 and s.negatives >= 3, s
    assert {o.scenario.path for o in outcomes} == {"local", "operator"}
    assert all(o.scenario.why for o in outcomes)


def test_the_generator_reproduces_the_checked_in_scenarios_exactly() -> None:
    recipes = generate.recipes()
    assert len({r.name for r in recipes}) == len(recipes), "one file a name"
    assert {path.name for path in SCENARIOS.glob("*.json")} == {f"{r.name}.json" for r in recipes}
    for recipe in recipes:
        assert (SCENARIOS / f"{recipe.name}.json").read_text() == generate.render(recipe), (
            f"{recipe.name}: run python -m bench.diagnosis.generate"
        )


def test_the_command_prints_the_table_and_says_the_goal_is_met(capsys: pytest.CaptureFixture[str]) -> None:
    assert command.main([]) == 0
    out = capsys.readouterr().out
    assert "| `Straggler` |" in out and out.rstrip().endswith("met")
    assert command.main(["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["goal"]["met"] is True and [k["kind"] for k in report["kinds"]] == list(KINDS)


def test_a_wrong_finding_is_counted_and_fails_the_goal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Relabel one scenario: what the engine finds there becomes a false positive, what it was
    labelled with a false negative, and the command exits 1."""
    for file in SCENARIOS.glob("*.json"):
        (tmp_path / file.name).write_text(file.read_text())
    relabelled = tmp_path / "op-healthy-bf16.json"
    document = json.loads(relabelled.read_text())
    document["scenario"]["expected"] = ["SlowWorker"]
    relabelled.write_text(json.dumps(document))
    throttled = tmp_path / "op-throttling.json"
    document = json.loads(throttled.read_text())
    document["scenario"]["expected"] = []
    throttled.write_text(json.dumps(document))
    scores = {s.kind: s for s in score(judge_all(tmp_path))}
    assert scores["SlowWorker"].false_negatives == 1 and scores["Throttling"].false_positives == 1
    assert command.main(["--scenarios", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "- -> Throttling: 1" in out and "missed by SlowWorker, Throttling" in out


def test_a_scenario_with_an_unknown_kind_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "bad.json"
    file.write_text(json.dumps({"scenario": {"path": "operator", "why": "x", "expected": ["Slow"]}}))
    with pytest.raises(ScenarioError, match="unknown kinds"):
        load(file)
    with pytest.raises(ScenarioError, match="not a scenario"):
        judge(tmp_path / "missing.json")
