"""The alert rules: generated from the catalog, accepted by promtool, and unit-tested with it.

Every alert has a case where it fires, and one healthy fleet (including the readings a GPU does not
support, which fail on every round by design) on which none of them fires.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuwise.metrics import catalog
from gpuwise.metrics.promql import OPERATOR_JOB, SIDECAR_JOB
from gpuwise.observability import RULE_GROUPS
from gpuwise.observability.alert_rules import EXPECTED_REASONS, IDLE_SECONDS, UNDERUSED_PERCENT
from gpuwise.sidecar import backend
from tests.chart.support import CHART, EVERYTHING, one, render

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (make system-deps)")
RULES = CHART / "files" / "prometheus-rules.yaml"
ALERTS = {alert.name: alert for group in RULE_GROUPS for alert in group.alerts}

POD = 'namespace="team", pod="job-0"'
GPU = f'{POD}, gpu="0", UUID="GPU-0"'
BERT = {"namespace": "team", "trainingjob": "bert"}


def worker(job: str, index: int) -> str:
    return f'namespace="team", pod="{job}-{index}", trainingjob="{job}", worker="{index}"'


def every(n: int, usual: float, odd: float, length: int = 41) -> str:
    """Explicit samples: `usual`, except every n-th sample (the last of each n), which is `odd`."""
    return " ".join(str(odd if i % n == n - 1 else usual) for i in range(length))


def job_gpus(job: str, workers: int, utilization: str) -> dict[str, str]:
    """A job's sidecars (the info series that names their job) and one GPU per worker."""
    series = {}
    for index in range(workers):
        series[f'{catalog.SIDECAR_INFO.name}{{{worker(job, index)}, backend="simulated"}}'] = "1x40"
        gpu = f'namespace="team", pod="{job}-{index}", gpu="0", UUID="GPU-{job}-{index}", Hostname="n{index}"'
        series[f"{catalog.GPU_UTIL.name}{{{gpu}}}"] = utilization
    return series


def steps(job: str, seconds_per_step: list[float], last_step: str = "0+60x40") -> dict[str, str]:
    """Per worker: one rank's step histogram (_sum and _count, one minute of steps per minute)."""
    series = {}
    for index, seconds in enumerate(seconds_per_step):
        labels = f'{worker(job, index)}, local_rank="0"'
        series[f"{catalog.STEP_DURATION.name}_sum{{{labels}}}"] = "0+60x40"
        series[f"{catalog.STEP_DURATION.name}_count{{{labels}}}"] = f"0+{60 / seconds:g}x40"
        series[f"{catalog.LAST_STEP.name}{{{labels}}}"] = last_step
    return series


def threshold_gauge(job: str) -> str:
    """The operator's export of a job's spec.efficiency.thresholds.gpuUtilization."""
    labels = f'job="{OPERATOR_JOB}", instance="op:8080", namespace="team", trainingjob="{job}"'
    return f"{catalog.JOB_GPU_UTIL_THRESHOLD.name}{{{labels}}}"


def finding_gauge(job: str, kind: str) -> str:
    """The operator's export of a finding it holds on a job."""
    labels = f'job="{OPERATOR_JOB}", instance="op:8080", namespace="team", trainingjob="{job}", kind="{kind}"'
    return f"{catalog.JOB_FINDING.name}{{{labels}}}"


# Busy, but every 12th sample dips under the threshold (8 % of samples): bursty, not underused.
BURSTY = {**job_gpus("bursty", 2, every(12, 95, 5)), **steps("bursty", [1.0, 1.0])}


@dataclass
class Case:
    """Input series (PromQL selector -> promtool expanding notation), and what fires when."""

    name: str
    series: dict[str, str]
    checks: list[tuple[str, str, list[dict[str, str]]]] = field(default_factory=list)  # (time, alert, fired labels)


HEALTHY = Case(
    "a healthy fleet",
    {
        f'up{{job="{SIDECAR_JOB}", {POD}}}': "1x40",
        f'up{{job="{OPERATOR_JOB}", namespace="gpuwise", pod="gpuwise-0"}}': "1x40",
        f"{catalog.LAST_SAMPLE.name}{{{POD}}}": "0+60x40",  # sampled every minute, in step with time()
        # Readings this GPU does not have fail on every round: an explanation, not an error.
        **{
            f'{catalog.SAMPLE_ERRORS.name}{{{GPU}, field="DCGM_FI_PROF_SM_ACTIVE", reason="{reason}"}}': "1+60x40"
            for reason in EXPECTED_REASONS
        },
        # Drops long ago (already there 10 minutes before), none since; an old XID, none since.
        f'{catalog.EVENTS_DROPPED.name}{{{POD}, reason="flood"}}': "3x40",
        f'{catalog.XID_EVENTS.name}{{{GPU}, xid="13"}}': "1x40",
        # A busy three-worker job stepping in lockstep, and a bursty but healthy one.
        **job_gpus("bert", 3, "90x40"),
        **steps("bert", [1.0, 1.0, 1.1]),
        threshold_gauge("bert"): "60x40",
        **BURSTY,
        threshold_gauge("bursty"): "50x40",
    },
    [(time, alert, []) for time in ("12m", "25m", "40m") for alert in ALERTS],
)

CASES = [
    HEALTHY,
    Case(
        "a sidecar stops answering scrapes",
        {f'up{{job="{SIDECAR_JOB}", {POD}}}': "1 1 0x20"},
        [
            ("5m", "GpuwiseSidecarDown", []),  # down for 3 minutes: not yet
            ("10m", "GpuwiseSidecarDown", [{"job": SIDECAR_JOB, "namespace": "team", "pod": "job-0"}]),
        ],
    ),
    Case(
        "NVML sampling hangs",
        {f"{catalog.LAST_SAMPLE.name}{{{POD}}}": "0+60x5 300x20"},
        [
            ("7m", "GpuwiseSidecarSamplingStalled", []),
            ("12m", "GpuwiseSidecarSamplingStalled", [{"namespace": "team", "pod": "job-0"}]),
        ],
    ),
    Case(
        "a reading keeps timing out",
        {
            f'{catalog.SAMPLE_ERRORS.name}{{{GPU}, field="DCGM_FI_DEV_POWER_USAGE", reason="timeout"}}': "0+1x30",
            f'{catalog.SAMPLE_ERRORS.name}{{{GPU}, field="DCGM_FI_PROF_SM_ACTIVE", reason="not_supported"}}': "0+1x30",
        },
        [
            ("5m", "GpuwiseNvmlErrors", []),
            (
                "15m",
                "GpuwiseNvmlErrors",
                [
                    {
                        "namespace": "team",
                        "pod": "job-0",
                        "gpu": "0",
                        "UUID": "GPU-0",
                        "field": "DCGM_FI_DEV_POWER_USAGE",
                        "reason": "timeout",
                    }
                ],
            ),
        ],
    ),
    Case(
        "a GPU falls off the bus: its first error counter appears already at 1",
        {f'{catalog.SAMPLE_ERRORS.name}{{{GPU}, field="DCGM_FI_DEV_GPU_UTIL", reason="gpu_lost"}}': "_x3 1+1x10"},
        [
            ("2m", "GpuwiseGpuLost", []),
            ("5m", "GpuwiseGpuLost", [{"namespace": "team", "pod": "job-0", "gpu": "0", "UUID": "GPU-0"}]),
            ("5m", "GpuwiseNvmlErrors", []),  # the critical alert, not both
        ],
    ),
    Case(
        "an application XID, then nothing more",
        {f'{catalog.XID_EVENTS.name}{{{GPU}, xid="13"}}': "_x5 1x20"},
        [
            (
                "7m",
                "GpuwiseXidError",
                [{"namespace": "team", "pod": "job-0", "gpu": "0", "UUID": "GPU-0", "xid": "13"}],
            ),
            ("7m", "GpuwiseHardwareXidError", []),
            ("20m", "GpuwiseXidError", []),  # resolved once it is older than the window
        ],
    ),
    Case(
        "a hardware XID on a GPU that already had an application one",
        {
            f'{catalog.XID_EVENTS.name}{{{GPU}, xid="79"}}': "_x5 1x20",
            f'{catalog.XID_EVENTS.name}{{{GPU}, xid="13"}}': "2x25",
        },
        [
            (
                "7m",
                "GpuwiseHardwareXidError",
                [{"namespace": "team", "pod": "job-0", "gpu": "0", "UUID": "GPU-0", "xid": "79"}],
            ),
            ("12m", "GpuwiseXidError", []),
        ],
    ),
    Case(
        "the sidecar keeps dropping step events",
        {f'{catalog.EVENTS_DROPPED.name}{{{POD}, reason="flood"}}': "0+10x30"},
        [
            ("8m", "GpuwiseStepEventsDropped", []),
            ("15m", "GpuwiseStepEventsDropped", [{"namespace": "team", "pod": "job-0", "reason": "flood"}]),
        ],
    ),
    Case(
        "a bursty but healthy job: under the threshold in 8 % of samples, never underutilized",
        BURSTY,
        [(f"{minute}m", "GpuwiseJobUnderutilized", []) for minute in range(10, 41)],
    ),
    Case(
        f"a job under {UNDERUSED_PERCENT} % in 95 % of samples (bursts to 95 % do not hide it)",
        {**job_gpus("bert", 2, every(20, 30, 95)), **steps("bert", [1.0, 1.0])},
        [
            ("10m", "GpuwiseJobUnderutilized", []),  # under 80 % of the window seen: start-up grace
            ("16m", "GpuwiseJobUnderutilized", [BERT]),
            ("40m", "GpuwiseJobUnderutilized", [BERT]),
        ],
    ),
    Case(
        "hysteresis: an underused job that improves to under the threshold in 67 % of samples stays flagged",
        {
            **job_gpus("bert", 1, " ".join(["30"] * 21 + ["30", "30", "95"] * 5 + ["90"] * 25)),
            **job_gpus("fresh", 1, every(3, 30, 95)),  # the same 67 % from the start: never flagged
        },
        [
            ("10m", "GpuwiseJobUnderutilized", []),
            *((f"{minute}m", "GpuwiseJobUnderutilized", [BERT]) for minute in (15, 20, 25, 30)),
            ("35m", "GpuwiseJobUnderutilized", [BERT]),  # 69 % of this window: under 90 %, over the 50 % release
            ("40m", "GpuwiseJobUnderutilized", []),  # 44 %: released
            ("45m", "GpuwiseJobUnderutilized", []),
        ],
    ),
    Case(
        "per-job thresholds: a job asking for 80 % is underused at 70 %, one content with 20 % is not at 30 %",
        {
            **job_gpus("bert", 1, "70x40"),
            **job_gpus("lenient", 1, "30x40"),
            **job_gpus("plain", 1, "30x40"),  # no gauge (the operator does not evaluate it): the default 50 %
            threshold_gauge("bert"): "80x40",
            threshold_gauge("lenient"): "20x40",
        },
        [
            ("10m", "GpuwiseJobUnderutilized", []),
            (
                "20m",
                "GpuwiseJobUnderutilized",
                [BERT, {"namespace": "team", "trainingjob": "plain"}],
            ),
        ],
    ),
    Case(
        "a job that keeps its GPUs but stops stepping at minute 10",
        {**job_gpus("bert", 2, "90x10 0x30"), **steps("bert", [1.0, 1.0], last_step="0+60x10 600x30")},
        [
            (f"{(600 + IDLE_SECONDS) // 60 - 1}m", "GpuwiseJobIdle", []),
            (f"{(600 + IDLE_SECONDS) // 60 + 1}m", "GpuwiseJobIdle", [BERT]),
        ],
    ),
    Case(
        "a job whose GPUs are allocated but that never makes a step",
        {
            **job_gpus("bert", 2, "3x40"),  # no last-step series at all
            **job_gpus("uninstrumented", 1, "90x40"),  # reports no steps either, but its GPU is busy
        },
        [
            ("10m", "GpuwiseJobIdle", []),  # 11 of the window's 15 samples: not yet covered
            ("12m", "GpuwiseJobIdle", [BERT]),
            ("30m", "GpuwiseJobIdle", [BERT]),
        ],
    ),
    Case(
        "one worker of three takes twice as long per step, and the operator finds a Straggler",
        {
            **job_gpus("bert", 3, "90x40"),
            **steps("bert", [1.0, 1.0, 2.0]),
            finding_gauge("bert", "Straggler"): "_x5 0.9x35",
        },
        [
            ("3m", "GpuwiseJobStraggler", []),  # slow, but not yet a finding: no alert
            ("16m", "GpuwiseJobStraggler", [{**BERT, "pod": "bert-2"}]),  # only the slowest worker
        ],
    ),
    Case(
        "a worker steadily 1.3x slower than its peers is no straggler (the operator finds SlowWorker)",
        {
            **job_gpus("bert", 3, "90x40"),
            **steps("bert", [1.0, 1.0, 1.3]),
            finding_gauge("bert", "SlowWorker"): "_x5 0.3x35",
        },
        [(f"{minute}m", "GpuwiseJobStraggler", []) for minute in (10, 16, 25, 40)],
    ),
    Case(
        "the operator holds a finding for a while, then it clears",
        {finding_gauge("bert", "InputBound"): "_x5 0.8x10"},
        [
            ("3m", "GpuwiseJobFinding", []),
            ("7m", "GpuwiseJobFinding", [{**BERT, "kind": "InputBound"}]),
            ("25m", "GpuwiseJobFinding", []),
        ],
    ),
    Case(
        "a job suspended for idleness again and again",
        {
            # The operator's count of Suspend actions that ended Done: once, twice, three times.
            f'{catalog.ACTION_TRANSITIONS.name}{{job="{OPERATOR_JOB}", instance="op:8080", namespace="team", '
            'trainingjob="notebook", action="Suspend", state="Done"}': "1x10 2x10 3x20",
            f'{catalog.ACTION_TRANSITIONS.name}{{job="{OPERATOR_JOB}", instance="op:8080", namespace="team", '
            'trainingjob="bert", action="AdjustConfig", state="Done"}': "1x10 2x10 3x20",
        },
        [
            ("15m", "GpuwiseJobKeepsGoingIdle", []),  # twice: not yet a pattern
            ("30m", "GpuwiseJobKeepsGoingIdle", [{"namespace": "team", "trainingjob": "notebook"}]),
        ],
    ),
    Case(
        "the operator is down",
        {f'up{{job="{OPERATOR_JOB}", namespace="gpuwise", pod="gpuwise-0"}}': "0x20"},
        [("10m", "GpuwiseOperatorDown", [{"job": OPERATOR_JOB, "namespace": "gpuwise", "pod": "gpuwise-0"}])],
    ),
]

_TEMPLATE = re.compile(r"\{\{ \$labels\.(\w+) \}\}")


def expand(text: str, labels: dict[str, str]) -> str:
    """Prometheus's alert templating, for the only construct the rules use."""
    assert "{{" not in _TEMPLATE.sub("", text), f"unexpected template in {text!r}"
    return _TEMPLATE.sub(lambda m: labels.get(m[1], ""), text)


def promtool_tests(cases: list[Case], rules: Path) -> dict[str, Any]:
    tests = []
    for case in cases:
        checks = []
        for time, name, fired in case.checks:
            alert = ALERTS[name]
            expected = []
            for labels in fired:
                full = {**labels, "severity": alert.severity}
                annotations = {"summary": alert.summary, "description": alert.description}
                expected.append(
                    {"exp_labels": full, "exp_annotations": {k: expand(v, full) for k, v in annotations.items()}}
                )
            checks.append({"eval_time": time, "alertname": name, "exp_alerts": expected})
        series = [{"series": selector, "values": values} for selector, values in case.series.items()]
        tests.append({"name": case.name, "interval": "1m", "input_series": series, "alert_rule_test": checks})
    return {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL or "promtool", *args], capture_output=True, text=True, timeout=120, check=False)


def test_promtool_accepts_the_shipped_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_accepts_the_rendered_prometheusrule(tmp_path: Path) -> None:
    spec = one(render(EVERYTHING), "PrometheusRule")["spec"]
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_unit_tests(tmp_path: Path) -> None:
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(promtool_tests(CASES, RULES), sort_keys=False))
    result = promtool("test", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_unit_tests_can_fail(tmp_path: Path) -> None:
    # A case that expects the healthy fleet to alert must fail: promtool is really checking.
    wrong = Case(
        "wrong",
        HEALTHY.series,
        [("25m", "GpuwiseSidecarDown", [{"job": SIDECAR_JOB, "namespace": "team", "pod": "job-0"}])],
    )
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(promtool_tests([wrong], RULES)))
    assert promtool("test", "rules", str(path)).returncode != 0


def test_every_alert_has_a_firing_case_and_stays_quiet_when_healthy() -> None:
    fired = {name for case in CASES for _, name, labels in case.checks if labels}
    assert fired == set(ALERTS)
    assert {name for _, name, _ in HEALTHY.checks} == set(ALERTS)


def test_expected_reasons_are_the_sidecar_s() -> None:
    # The reasons the rules treat as "not an error" are reasons the sidecar really reports.
    assert set(EXPECTED_REASONS) <= {
        value for key, value in vars(backend).items() if key.isupper() and isinstance(value, str)
    }
    assert {"not_supported", "mig_unsupported", "unavailable"} == {
        backend.NOT_SUPPORTED,
        backend.MIG_UNSUPPORTED,
        backend.UNAVAILABLE,
    }


def test_efficiency_rules_use_the_diagnosis_s_thresholds() -> None:
    # The rules and the operator agree on what underused, sustained and idle mean (stragglers are the operator's).
    from gpuwise.diagnose.rules import DiagnosisThresholds
    from gpuwise.diagnose.window import Sustain
    from gpuwise.observability import alert_rules

    assert DiagnosisThresholds().gpu_utilization == alert_rules.UNDERUSED_PERCENT
    assert DiagnosisThresholds().idle_seconds == alert_rules.IDLE_SECONDS
    assert (Sustain().hold_fraction, Sustain().min_coverage) == (alert_rules.SUSTAINED_SHARE, alert_rules.MIN_COVERAGE)
