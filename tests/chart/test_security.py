"""A security scan of the rendered manifests (checkov, offline): every failed check is justified.

The justifications live in charts/gpuwise/README.md ("Security scan"); a check that fails without
one fails this test, and so does a justification for a check that no longer fails.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.chart.support import CHART, ROOT, VALUE_SETS, render

CHECKOV = ROOT / ".venv" / "tools" / "checkov" / "bin" / "checkov"
_JUSTIFIED = re.compile(r"^\|\s*`?(CKV2?_K8S_\d+)`?\s*\|", re.MULTILINE)


def checkov() -> str | None:
    return str(CHECKOV) if CHECKOV.exists() else shutil.which("checkov")


pytestmark = pytest.mark.skipif(checkov() is None, reason="needs checkov (make checkov installs it in .venv/tools)")


def justified() -> set[str]:
    readme = (CHART / "README.md").read_text()
    section = readme.split("## Security scan", 1)[1].split("\n## ", 1)[0]
    return set(_JUSTIFIED.findall(section))


def test_rendered_manifests_pass_checkov_or_are_justified(tmp_path: Path) -> None:
    for name, values in VALUE_SETS.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump_all(render(values)))
    command = [checkov() or "checkov", "-d", str(tmp_path), "--framework", "kubernetes", "--skip-download"]
    result = subprocess.run(
        [*command, "--quiet", "-o", "json"], capture_output=True, text=True, timeout=240, check=False
    )
    assert result.stdout, result.stderr[-2000:]
    report = json.loads(result.stdout)
    for part in report if isinstance(report, list) else [report]:
        assert part["summary"]["parsing_errors"] == 0
        assert part["summary"]["passed"] > 100
    failed = {
        (check["check_id"], check["resource"])
        for part in (report if isinstance(report, list) else [report])
        for check in part["results"]["failed_checks"]
    }
    unjustified = sorted(f"{check} on {resource}" for check, resource in failed if check not in justified())
    assert not unjustified, "failed checks without a justification in charts/gpuwise/README.md: " + ", ".join(
        unjustified
    )
    stale = justified() - {check for check, _ in failed}
    assert not stale, f"README justifies checks that no longer fail: {sorted(stale)}"
