from __future__ import annotations

import re
import subprocess
import sys

from gpuwise.metrics import BY_NAME, CATALOG, MAX_LABELS, Kind, Scope, catalog

# The names DESIGN.md promises dashboards and alerts, as dcgm-exporter spells them.
DESIGN_DCGM = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_SM_OCCUPANCY",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
}


def test_names_are_unique_and_indexed() -> None:
    assert len(BY_NAME) == len(CATALOG)
    assert BY_NAME["DCGM_FI_DEV_GPU_UTIL"] is catalog.GPU_UTIL


def test_every_dcgm_name_of_the_design_is_in_the_catalog() -> None:
    assert {m.name for m in CATALOG if m.dcgm} >= DESIGN_DCGM


def test_units_and_types_mirror_dcgm_exporter() -> None:
    assert catalog.FB_USED.unit == "MiB"
    assert catalog.POWER_USAGE.unit == "W"
    assert catalog.TOTAL_ENERGY.kind is Kind.COUNTER
    assert catalog.TOTAL_ENERGY.unit == "mJ"
    assert not catalog.TOTAL_ENERGY.name.endswith("_total")  # exactly dcgm-exporter's name
    assert all(m.unit == "ratio" for m in (catalog.SM_ACTIVE, catalog.TENSOR_ACTIVE, catalog.DRAM_ACTIVE))


def test_gpuwise_metrics_follow_prometheus_conventions() -> None:
    for metric in CATALOG:
        if metric.dcgm:
            continue
        assert re.fullmatch(r"gpuwise_[a-z0-9_]+", metric.name), metric.name
        assert (metric.kind is Kind.COUNTER) == metric.name.endswith("_total"), metric.name
        assert not metric.name.endswith(("_ms", "_milliseconds", "_mib")), "base units only"


def test_series_stay_under_the_label_budget() -> None:
    for metric in CATALOG:
        labels = metric.labels + (("le",) if metric.kind is Kind.HISTOGRAM else ())
        assert len(labels) <= MAX_LABELS, metric.name
        assert len(set(labels)) == len(labels), metric.name


def test_dcgm_series_carry_dcgm_labels_and_gpuwise_series_carry_job_labels() -> None:
    for metric in CATALOG:
        if metric.dcgm:
            assert metric.scope is Scope.DEVICE
            assert {"gpu", "UUID", "modelName", "Hostname", "GPU_I_PROFILE"} <= set(metric.labels)
        elif metric.scope is Scope.TRAININGJOB:  # the operator's per-job series: no pod, no worker
            assert {"namespace", "trainingjob"} <= set(metric.labels), metric.name
        else:
            assert {"namespace", "pod", "trainingjob", "worker"} <= set(metric.labels), metric.name


def test_every_metric_has_help_and_histograms_have_buckets() -> None:
    for metric in CATALOG:
        assert metric.help and metric.unit
        assert (metric.kind is Kind.HISTOGRAM) == bool(metric.buckets)
        assert list(metric.buckets) == sorted(metric.buckets)


def test_catalog_imports_only_the_standard_library() -> None:
    code = (
        "import sys; before = set(sys.modules); import gpuwise.metrics\n"
        "new = set(sys.modules) - before\n"
        "print(' '.join(sorted(m for m in new if m.split('.')[0] not in sys.stdlib_module_names)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["gpuwise", "gpuwise.metrics", "gpuwise.metrics.catalog", "gpuwise.metrics.spec"]
