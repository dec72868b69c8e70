"""What AdjustConfig and Reschedule plan from a recommendation, and how a result is judged."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuwise.act.action_settings import ActionSettings, GpuClass
from gpuwise.act.adjust_config import ADJUST_CONFIG
from gpuwise.act.machine import JobView, Plan, Refusal, compare, new_record, request_id, transition
from gpuwise.act.reschedule import RESCHEDULE
from gpuwise.act.runner import trimmed
from gpuwise.api.kinds import ActionKind
from gpuwise.api.overrides import JobOverrides
from gpuwise.api.trainingjob import (
    MAX_ACTION_HISTORY,
    MAX_ACTION_RECORDS,
    ActionState,
    Measurement,
    Recommendation,
    TrainingJobSpec,
)
from gpuwise.kube.job_overrides import NONE

NOW = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)
SETTINGS = ActionSettings()
TUNABLES = {
    "batchSize": {"env": "BATCH", "min": 8, "max": 256},
    "gradientAccumulationSteps": {"env": "ACCUM", "min": 1, "max": 8},
    "dataLoaderWorkers": {"env": "WORKERS", "min": 1, "max": 6},
    "amp": {"env": "AMP"},
}


def view(
    env: dict[str, str] | None = None, current: JobOverrides = NONE, status: Any = None, **tunables: Any
) -> JobView:
    raw = {
        "trainer": {"image": "x", "env": [{"name": k, "value": v} for k, v in (env or {}).items()]},
        "efficiency": {"tunables": {**TUNABLES, **tunables}},
    }
    body = {"metadata": {"namespace": "ml", "name": "bert"}, "spec": raw, "status": status or {}}
    return JobView("ml", "bert", body, TrainingJobSpec.model_validate(raw), current)


def recommend(
    action: ActionKind = ActionKind.ADJUST_CONFIG, finding: str = "InputBound", **changes: str
) -> Recommendation:
    return Recommendation(action=action, finding=finding, message="m", changes=changes)


def planned(job: JobView, recommendation: Recommendation, settings: ActionSettings = SETTINGS) -> Plan:
    plan = (ADJUST_CONFIG if recommendation.action is ActionKind.ADJUST_CONFIG else RESCHEDULE).plan(
        job, recommendation, settings
    )
    assert isinstance(plan, Plan), plan
    return plan


def test_adjust_config_clamps_to_declared_bounds_and_ignores_undeclared_knobs() -> None:
    plan = planned(view({"WORKERS": "2"}), recommend(WORKERS="12", AMP="1", PIN="1", BATCH="4"))
    assert dict(plan.changes) == {"WORKERS": "6", "AMP": "1", "BATCH": "8"}
    assert plan.target.env == {"WORKERS": "6", "AMP": "1", "BATCH": "8"}
    assert plan.restart
    assert plan.message == "Set AMP=1, BATCH=8, WORKERS=6 and restart from a checkpoint."


def test_adjust_config_builds_on_earlier_overrides_and_refuses_a_no_op() -> None:
    earlier = JobOverrides(env={"WORKERS": "4"}, avoid_nodes=["n1"])
    plan = planned(view({"WORKERS": "2"}, earlier), recommend(AMP="1", WORKERS="4"))
    assert dict(plan.changes) == {"AMP": "1"}, "WORKERS already runs at 4"
    assert plan.target == JobOverrides(env={"WORKERS": "4", "AMP": "1"}, avoid_nodes=["n1"])
    refusal = ADJUST_CONFIG.plan(view({"WORKERS": "6"}), recommend(WORKERS="9", AMP="yes"), SETTINGS)
    assert isinstance(refusal, Refusal) and refusal.reason == "NothingToChange"


def test_keep_global_batch_size_refuses_a_plan_that_changes_it() -> None:
    job = view({"BATCH": "32", "ACCUM": "4"}, keepGlobalBatchSize=True)
    assert dict(planned(job, recommend(BATCH="64", ACCUM="2")).changes) == {"BATCH": "64", "ACCUM": "2"}
    assert dict(planned(job, recommend(WORKERS="4")).changes) == {"WORKERS": "4"}, "the batch is not touched"
    refused = {
        "no accumulation to go with it": (job, recommend(BATCH="64")),
        "a different product": (job, recommend(BATCH="64", ACCUM="3")),
        "the bound clamps the batch": (job, recommend(BATCH="512", ACCUM="1")),
        "the batch is not a plain value": (view(keepGlobalBatchSize=True), recommend(BATCH="64", ACCUM="1")),
    }
    for why, (subject, recommendation) in refused.items():
        refusal = ADJUST_CONFIG.plan(subject, recommendation, SETTINGS)
        assert isinstance(refusal, Refusal) and refusal.reason == "GlobalBatchChanged", why
    different = ADJUST_CONFIG.plan(job, recommend(BATCH="64", ACCUM="3"), SETTINGS)
    assert isinstance(different, Refusal) and "would go from 128 to 192" in different.message
    not_asked = view({"BATCH": "32", "ACCUM": "4"})
    assert dict(planned(not_asked, recommend(BATCH="64")).changes) == {"BATCH": "64"}


def test_reschedule_avoids_the_straggler_node() -> None:
    status = {
        "findings": [{"kind": "Straggler", "worker": 2}],
        "workers": [{"index": 0, "node": "n0"}, {"index": 2, "node": "slow"}],
    }
    job = view(status=status, current=JobOverrides(avoid_nodes=["a", "b", "c", "d"]))
    plan = planned(job, recommend(ActionKind.RESCHEDULE, "Straggler"))
    assert plan.target.avoid_nodes == ["b", "c", "d", "slow"], "the oldest avoided node is forgiven"
    assert plan.restart and dict(plan.details) == {"worker": "2", "node": "slow"}
    nowhere = RESCHEDULE.plan(
        view(status={"findings": [{"kind": "Straggler", "worker": 5}]}),
        recommend(ActionKind.RESCHEDULE, "Straggler"),
        SETTINGS,
    )
    assert isinstance(nowhere, Refusal) and nowhere.reason == "WorkerNodeUnknown"


def test_reschedule_to_a_smaller_gpu_class_replaces_the_class_selector() -> None:
    classes = [
        GpuClass(name="a100", node_selector={"gpu": "a100"}, gpu_model="NVIDIA A100-SXM4-80GB"),
        GpuClass(name="l4", node_selector={"gpu": "l4", "pool": "small"}, gpu_model="NVIDIA L4"),
    ]
    settings = ActionSettings(gpu_classes=classes)
    job = view(current=JobOverrides(node_selector={"gpu": "a100", "team": "ml"}))
    plan = planned(job, recommend(ActionKind.RESCHEDULE, "OversizedGPU", gpuClass="l4"), settings)
    assert plan.target.node_selector == {"gpu": "l4", "pool": "small", "team": "ml"}
    assert dict(plan.changes) == {"gpuClass": "l4"} and plan.restart
    unknown = RESCHEDULE.plan(job, recommend(ActionKind.RESCHEDULE, "OversizedGPU", gpuClass="h200"), settings)
    assert isinstance(unknown, Refusal) and "a100, l4" in unknown.message


def test_a_class_label_the_spec_pins_and_the_new_class_does_not_set_refuses_the_move() -> None:
    """Overrides add to spec.pod.nodeSelector: a label of the old class left there would match no node."""
    classes = [
        GpuClass(name="big", node_selector={"pool": "big", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
        GpuClass(name="l4", node_selector={"nvidia.com/gpu.product": "NVIDIA-L4"}),
    ]
    settings = ActionSettings(gpu_classes=classes)
    pinned = view()
    pinned.spec.pod.node_selector.update({"pool": "big", "team": "ml"})
    refusal = RESCHEDULE.plan(pinned, recommend(ActionKind.RESCHEDULE, "OversizedGPU", gpuClass="l4"), settings)
    assert isinstance(refusal, Refusal) and refusal.reason == "PinnedBySpec"
    assert refusal.message == (
        "spec.pod.nodeSelector sets pool, which GPU class l4 does not: its nodes would not match"
    )
    by_product = view()
    by_product.spec.pod.node_selector.update({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    plan = planned(by_product, recommend(ActionKind.RESCHEDULE, "OversizedGPU", gpuClass="l4"), settings)
    assert plan.target.node_selector == {"nvidia.com/gpu.product": "NVIDIA-L4"}, "the override replaces its value"


def measured(samples: float | None, util: float | None = None) -> Measurement:
    return Measurement(samples_per_second=samples, gpu_utilization=util, at=NOW)


def test_worse_means_less_throughput_beyond_the_tolerance() -> None:
    assert compare(measured(100), measured(96), 0.05).keep
    worse = compare(measured(100), measured(90), 0.05)
    assert (worse.keep, worse.reason) == (False, "Worse")
    assert compare(measured(100), measured(130), 0.05).reason == "Improved"
    assert compare(measured(None, 40), measured(None, 20), 0.05).reason == "Worse", "utilization without samples"
    unknown = compare(measured(None), measured(80), 0.05)
    assert (unknown.keep, unknown.reason) == (True, "NotMeasured"), "nothing is judged on invented numbers"
    assert compare(None, None, 0.05).reason == "NotMeasured"


def test_records_keep_a_bounded_history_and_status_a_bounded_list() -> None:
    plan = Plan(target=NONE, message="m")
    record = new_record(ActionKind.ADJUST_CONFIG, "InputBound", plan, NONE, NOW)
    assert record.id == f"adjustconfig-{int(NOW.timestamp())}" == request_id(record)
    assert request_id(record.model_copy(update={"reverting": True})) == f"{record.id}-revert"
    for _ in range(MAX_ACTION_HISTORY + 5):
        record = transition(record, ActionState.APPLYING, "Again", "m", NOW)
    assert len(record.history) == MAX_ACTION_HISTORY
    dry = transition(record, ActionState.DRY_RUN, "DryRun", "would", NOW)
    done = transition(record, ActionState.DONE, "NoWorse", "kept", NOW)
    kept = trimmed([done, *[dry] * MAX_ACTION_RECORDS, done])
    assert len(kept) == MAX_ACTION_RECORDS
    assert kept[0] is done and kept[-1] is done, "dry runs go first"
