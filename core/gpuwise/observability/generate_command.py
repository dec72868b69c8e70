"""Write the chart's generated observability files: `python -m gpuwise.observability [CHART_DIR]`.

With `--check`, write nothing and exit 1 if a committed file differs from what would be written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import yaml

from gpuwise.observability.alert_rules import rule_file
from gpuwise.observability.dashboards import DASHBOARDS

HEADER: Final = "# Generated from the metric catalog by `python -m gpuwise.observability`: do not edit.\n"
RULES_PATH: Final = "files/prometheus-rules.yaml"
DASHBOARD_DIR: Final = "files/dashboards"


def artefacts() -> dict[str, str]:
    """Relative path in the chart -> file content."""
    files = {RULES_PATH: HEADER + yaml.safe_dump(rule_file(), sort_keys=False, width=10_000, allow_unicode=True)}
    for dashboard in DASHBOARDS:
        files[f"{DASHBOARD_DIR}/{dashboard.file_name}"] = json.dumps(dashboard.to_json(), indent=2) + "\n"
    return files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuwise.observability", description=__doc__)
    parser.add_argument("chart", nargs="?", type=Path, default=Path("charts/gpuwise"), help="the chart directory")
    parser.add_argument("--check", action="store_true", help="report drift instead of writing")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    stale = []
    for relative, content in artefacts().items():
        path = args.chart / relative
        current = path.read_text() if path.exists() else None
        if current == content:
            continue
        stale.append(relative)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
    verb = "out of date" if args.check else "written"
    for relative in stale:
        sys.stdout.write(f"{verb}: {args.chart / relative}\n")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
