"""The chart's generated files match the generator, and the generator speaks only catalog names."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuwise.metrics import BY_NAME, Kind
from gpuwise.metrics.promql import rate, sel
from gpuwise.observability import DASHBOARDS, RULE_GROUPS
from gpuwise.observability.generate_command import artefacts, main
from tests.chart.support import CHART, ROOT

SHARED_DCGM = ROOT.parent / "shared" / "data" / "dashboards" / "dcgm-exporter-dashboard.json"
_NAME = re.compile(r"\b(DCGM_\w+|gpuwise_\w+)")


def expressions() -> list[str]:
    exprs = [alert.expr for group in RULE_GROUPS for alert in group.alerts]
    exprs += [target.expr for dashboard in DASHBOARDS for _, target in dashboard.targets()]
    exprs += [variable.query for dashboard in DASHBOARDS for variable in dashboard.variables]
    return exprs


def test_committed_files_match_the_generator() -> None:
    for relative, content in artefacts().items():
        path = CHART / relative
        assert path.exists() and path.read_text() == content, (
            f"{path.relative_to(ROOT)} drifted from the catalog: run `python -m gpuwise.observability charts/gpuwise`"
        )
    assert main([str(CHART), "--check"]) == 0


def test_check_reports_drift(tmp_path: Path) -> None:
    assert main([str(tmp_path), "--check"]) == 1
    assert main([str(tmp_path)]) == 0
    assert main([str(tmp_path), "--check"]) == 0


def test_every_metric_name_in_the_promql_is_in_the_catalog() -> None:
    used = set()
    for expr in expressions():
        for name in _NAME.findall(expr):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            metric = BY_NAME.get(name) or BY_NAME.get(base)
            assert metric is not None, f"{name} is not a catalog metric: {expr}"
            if metric.name != name:
                assert metric.kind is Kind.HISTOGRAM, name
            used.add(metric.name)
    assert len(used) >= 20


def test_builders_refuse_meaningless_promql() -> None:
    with pytest.raises(ValueError, match="gauge"):
        rate(BY_NAME["DCGM_FI_DEV_GPU_UTIL"], "5m")
    with pytest.raises(ValueError, match="no _bucket"):
        sel(BY_NAME["gpuwise_steps_total"], suffix="_bucket")


def test_dashboards_are_well_formed() -> None:
    for dashboard in DASHBOARDS:
        model = json.loads((CHART / "files" / "dashboards" / dashboard.file_name).read_text())
        ids = [panel["id"] for panel in model["panels"]]
        assert len(ids) == len(set(ids))
        for panel in model["panels"]:
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24
            for target in panel.get("targets", []):
                assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert model["templating"]["list"][0]["name"] == "datasource"
        # No two panels overlap.
        cells: set[tuple[int, int]] = set()
        for panel in model["panels"]:
            g = panel["gridPos"]
            new = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not cells & new, panel["title"]
            cells |= new


def test_the_dcgm_dashboard_ships_unchanged() -> None:
    shipped = CHART / "files" / "dashboards" / "dcgm-exporter.json"
    if not SHARED_DCGM.exists():
        pytest.skip(f"NVIDIA's dashboard is not at {SHARED_DCGM}")
    assert shipped.read_bytes() == SHARED_DCGM.read_bytes()
