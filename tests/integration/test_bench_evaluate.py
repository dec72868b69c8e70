"""bench/evaluate.py at a small scale: its cycle runs the operator's own per-job path, against a real Prometheus."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
from bench import evaluate

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs prometheus (make system-deps)")


def test_the_measured_cycle_publishes_every_job_and_then_only_what_changed(capsys: pytest.CaptureFixture[str]) -> None:
    jobs = 30
    assert evaluate.main(["--jobs", str(jobs), "--cycles", "2", "--sample", "2", "--json-only"]) == 0
    figures = json.loads(capsys.readouterr().out)
    first, second = figures["cycles"]
    assert first["jobs"] == second["jobs"] == jobs
    assert first["queries"] == second["queries"] == 20  # batched: not one more per job
    # The first cycle writes every running job's status; the next one writes none that did not change.
    assert first["writes"] == {"patch TrainingJob/status": jobs}
    assert second["writes"].get("patch TrainingJob/status", 0) < jobs
    # Findings appear as Warning Events once; Enforce jobs without a checkpoint are told why nothing is done.
    assert first["events"]["InputBound"] > 0 and first["events"]["ActionNotTaken"] > 0
    assert "InputBound" not in second["events"] and "ActionNotTaken" not in second["events"]
    # What the statuses hold is what the diagnosis finds, less the Observe-mode jobs' findings.
    assert set(figures["findings"]) == set(figures["diagnosis"]["findings"])
    # Several workers with step times per job: the per-worker query answers and the straggler detector runs.
    assert figures["setup"]["workers_per_job"] >= 3
    assert figures["findings"]["Straggler"] > 0
    assert figures["naive"]["sample_queries"] == 20 * figures["naive"]["sampled_jobs"]
    assert sum(figures["findings"].values()) < sum(figures["diagnosis"]["findings"].values())
    assert first["per_job_cpu_s"] > 0 and first["cpu_s"] >= first["read_cpu_s"]


def test_a_merge_patch_makes_a_new_object_and_null_removes() -> None:
    stored = {"status": {"phase": "Running", "efficiency": {"gpuUtilization": 30.0, "topFinding": "Idle"}}}
    merged = evaluate.merge_patch(stored, {"status": {"efficiency": {"topFinding": None}, "findings": []}})
    assert merged == {"status": {"phase": "Running", "efficiency": {"gpuUtilization": 30.0}, "findings": []}}
    assert stored["status"]["efficiency"] == {"gpuUtilization": 30.0, "topFinding": "Idle"}  # unchanged


def test_a_patch_stores_a_new_object_with_the_next_resource_version() -> None:
    body = evaluate.trainingjob(0, "ns", "job", workers=3, now=1.7e9, window="15m")
    kube = evaluate.OfflineKube([body])
    patched = asyncio.run(kube.patch("gpuwise.io/v1alpha1", "TrainingJob", "ns", "job", {"status": {"restarts": 1}}))
    assert patched is not None and patched is not body and patched["status"]["restarts"] == 1
    assert int(patched["metadata"]["resourceVersion"]) == int(body["metadata"]["resourceVersion"]) + 1
    assert patched["spec"] is body["spec"]  # a status write leaves the spec object as it was, like a watch's copy


def test_a_history_shorter_than_the_window_and_cycles_is_refused_before_any_work() -> None:
    with pytest.raises(SystemExit, match=r"--history 16m is shorter .* give 990s or more"):
        evaluate.main(["--jobs", "3", "--history", "16m", "--window", "15m", "--cycles", "3"])
