"""The chart turns on the operator's efficiency loop through its settings file."""

from __future__ import annotations

import helm_python as helm
import pytest
import yaml

from gpuwise.operator.config import OperatorSettings
from tests.chart.support import render


def settings(values: dict[str, object]) -> OperatorSettings:
    configmap = next(
        d for d in render(values) if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-settings")
    )
    return OperatorSettings.model_validate(yaml.safe_load(configmap["data"]["settings.yaml"]))


def test_no_prometheus_no_evaluation() -> None:
    assert settings({}).prometheus_url is None


def test_prometheus_url_and_interval_reach_the_operator() -> None:
    chosen = settings({"efficiency": {"prometheusUrl": "http://prometheus.monitoring:9090", "evaluationSeconds": 15}})
    assert (chosen.prometheus_url, chosen.evaluation_seconds) == ("http://prometheus.monitoring:9090", 15)


def test_the_status_refresh_reaches_the_operator() -> None:
    assert settings({}).status_refresh_seconds == 300
    assert settings({"efficiency": {"statusRefreshSeconds": 60}}).status_refresh_seconds == 60
    with pytest.raises(helm.HelmValuesError, match="statusRefreshSeconds"):
        render({"efficiency": {"statusRefreshSeconds": 0}})


def test_a_url_without_a_scheme_is_refused_at_install() -> None:
    with pytest.raises(helm.HelmValuesError, match="/efficiency/prometheusUrl"):
        render({"efficiency": {"prometheusUrl": "prometheus:9090"}})


def test_the_operator_scrape_keeps_the_job_namespace_of_job_gauges() -> None:
    values = {"monitoring": {"serviceMonitor": {"enabled": True}}}
    monitor = next(d for d in render(values) if d["kind"] == "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True
