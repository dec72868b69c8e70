"""Prometheus alert rules and Grafana dashboards, generated from the metric catalog.

The Helm chart ships what this package writes (`python -m gpuwise.observability charts/gpuwise`),
and a test fails when the committed files drift from it, as it does for the CRD. Every metric
name in the generated PromQL comes from `gpuwise.metrics`, so a renamed metric cannot leave a
silent, empty panel or an alert that never fires behind.

Stdlib (plus PyYAML for writing) only: it is imported by the chart tooling and the tests.
"""

from __future__ import annotations

from gpuwise.observability.alert_rules import RULE_GROUPS, Alert, RuleGroup, rule_file
from gpuwise.observability.dashboards import DASHBOARDS, Dashboard

__all__ = ["DASHBOARDS", "RULE_GROUPS", "Alert", "Dashboard", "RuleGroup", "rule_file"]
