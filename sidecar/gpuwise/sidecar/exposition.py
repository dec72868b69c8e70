"""Prometheus text exposition (format 0.0.4), written so that DCGM names come out exactly.

dcgm-exporter exposes counters without a `_total` suffix (`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`),
and dashboards and alerts match those exact names. prometheus-client's encoders rename every
counter family to `<name>_total` (and OpenMetrics requires it), so this module writes the
classic text format itself, from the same metric families, naming each family as its samples
are named. The sidecar always answers in this format, as dcgm-exporter does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from prometheus_client.metrics_core import Metric as Family
from prometheus_client.utils import floatToGoString

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
# Go's float formatting, as Prometheus's own clients write values ("+Inf", "1e+09").
format_value: Final[Callable[[float], str]] = floatToGoString
_TYPES: Final = {"counter": "counter", "gauge": "gauge", "histogram": "histogram", "summary": "summary"}


def render(families: Iterable[Family]) -> bytes:
    lines: list[str] = []
    for family in families:
        name = _exposed_name(family)
        help_text = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        lines.append(f"# HELP {name} {help_text}\n# TYPE {name} {_TYPES.get(family.type, 'untyped')}\n")
        skipped = family.name + "_created"
        for sample in family.samples:
            if sample.name == skipped:
                continue
            if sample.labels:
                labels = ",".join(f'{key}="{_escape(value)}"' for key, value in sample.labels.items())
                lines.append(f"{sample.name}{{{labels}}} {format_value(sample.value)}\n")
            else:
                lines.append(f"{sample.name} {format_value(sample.value)}\n")
    return "".join(lines).encode()


def _exposed_name(family: Family) -> str:
    """A counter family named `x` whose samples are `x_total` (prometheus-client's own) is `x_total`."""
    if family.type == "counter" and family.samples and family.samples[0].name == family.name + "_total":
        return family.name + "_total"
    return family.name


def _escape(value: str) -> str:
    if "\\" not in value and "\n" not in value and '"' not in value:  # nearly always: skip the copies
        return value
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
