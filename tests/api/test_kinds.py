"""Finding kinds are one enum: every kind has its rule, the rules name no kind as a bare string,
and the README's table of findings lists exactly the kinds there are."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from gpuwise.api import kinds
from gpuwise.api.kinds import FindingKind

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "core" / "gpuwise" / "diagnose" / "rules.py"


def _named_kinds(tree: ast.AST) -> set[str]:
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "FindingKind"
    }


def test_every_kind_has_a_rule_and_the_rules_spell_none_as_text() -> None:
    tree = ast.parse(RULES.read_text())
    assert _named_kinds(tree) == set(FindingKind.__members__)
    values = {kind.value for kind in FindingKind}
    spelled = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value in values]
    assert spelled == [], f"rules.py names kinds as bare strings: {spelled}"


def test_the_readme_lists_every_finding_kind() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| finding | when | recommendation |") :].split("\n\n", 1)[0]
    listed = set(re.findall(r"^\| `(\w+)`(?: / `(\w+)`)?", table, re.M))
    assert {name for pair in listed for name in pair if name} == {kind.value for kind in FindingKind}


def test_the_kinds_module_needs_no_pydantic() -> None:
    """The alert rules generator imports it; it must stay names only (stdlib)."""
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(ast.parse(Path(kinds.__file__).read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    assert imported <= {"__future__", "enum", "typing"}
