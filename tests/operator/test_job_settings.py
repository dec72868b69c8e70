"""`JobSettingsCache`: a job's settings validated once while its generation and overrides stay the same."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuwise.api.overrides import JobOverrides
from gpuwise.api.trainingjob import EfficiencyMode
from gpuwise.kube.job_overrides import annotation_patch
from gpuwise.operator import job_settings
from gpuwise.operator.job_settings import JobSettingsCache


def body(
    name: str = "train", num_nodes: Any = 1, accumulation: str = "4", generation: int | None = 1
) -> dict[str, Any]:
    trainer = {"image": "x", "numNodes": num_nodes, "env": [{"name": "ACCUM", "value": "4"}]}
    tunables = {"gradientAccumulationSteps": {"env": "ACCUM", "max": 8}}
    efficiency = {"mode": "Enforce", "window": "10m", "tunables": tunables, "actions": ["AdjustConfig"]}
    meta = {"name": name, "namespace": "ml", "uid": f"uid-{name}", "generation": generation}
    return {"metadata": meta, "spec": {"trainer": trainer, "efficiency": efficiency}}


def changed(job: dict[str, Any], **efficiency: Any) -> dict[str, Any]:
    """`job` with its spec changed, as the API server stores it: the next generation."""
    new = copy.deepcopy(job)
    new["spec"]["efficiency"].update(efficiency)
    new["metadata"]["generation"] += 1
    return new


def test_settings_come_from_the_validated_spec_and_the_overrides() -> None:
    cache = JobSettingsCache()
    settings = cache.settings(body())
    assert settings is not None
    assert (settings.mode, settings.actions, settings.window_seconds, settings.gradient_accumulation_steps) == (
        EfficiencyMode.ENFORCE, ("AdjustConfig",), 600.0, 4
    )  # fmt: skip
    tunable = settings.tunables().gradient_accumulation_steps
    assert tunable is not None and tunable.env == "ACCUM"
    overridden = body()
    overridden["metadata"].update(annotation_patch(JobOverrides(env={"ACCUM": "2"}))["metadata"])
    later = cache.settings(overridden)
    assert later is not None and later.gradient_accumulation_steps == 2, "new overrides: read again"
    assert cache.validations == 2


def test_a_job_is_validated_again_only_at_a_new_generation() -> None:
    cache = JobSettingsCache()
    first = body()
    settings = cache.settings(first)
    assert cache.settings(body()) is settings, "a new body of the same generation: a watch event for its status"
    assert cache.validations == 1
    moved = cache.settings(changed(first, window="20m"))
    assert moved is not None and moved.window_seconds == 1200.0 and cache.validations == 2
    recreated = {**first, "metadata": {**first["metadata"], "uid": "another"}}
    assert cache.settings(recreated) is not moved, "deleted and created again: generation 1 anew"


def test_a_body_without_a_generation_is_validated_every_time() -> None:
    cache = JobSettingsCache()
    for _ in range(2):
        assert cache.settings(body(generation=None)) is not None
    assert cache.validations == 2 and len(cache) == 0


def test_an_invalid_spec_or_name_has_no_settings_until_it_is_fixed() -> None:
    cache = JobSettingsCache()
    broken = body(num_nodes=0)
    assert cache.settings(broken) is None
    assert cache.settings(body(num_nodes=0)) is None and cache.validations == 1, "remembered as invalid"
    fixed = copy.deepcopy(broken)
    fixed["spec"]["trainer"]["numNodes"] = 1
    fixed["metadata"]["generation"] += 1
    assert cache.settings(fixed) is not None and cache.validations == 2
    assert cache.settings(body(name="Not_A_Label")) is None, "the name is validated too"


def test_jobs_not_asked_for_between_two_turns_are_dropped() -> None:
    cache = JobSettingsCache()
    cache.settings(body("a"))
    cache.settings(body("b"))
    cache.turn()
    cache.settings(body("a"))  # asked for again: kept, without a validation
    assert len(cache) == 2 and cache.validations == 2
    cache.turn()
    assert len(cache) == 1, "b was not asked for since the turn before"
    cache.forget("ml", "a")
    assert len(cache) == 0


def test_jobs_with_equal_settings_share_their_values_and_validated_tunables() -> None:
    cache = JobSettingsCache()
    a, b = cache.settings(body("a")), cache.settings(body("b"))
    assert a is not None and b is not None
    assert a.tunables() is b.tunables() and a.actions is b.actions and a.raw_tunables is None
    other = body("c")
    other["spec"]["efficiency"]["tunables"]["gradientAccumulationSteps"]["max"] = 8.0  # another type: not the same
    c = cache.settings(other)
    assert c is not None and c.tunables() is not a.tunables() and c.tunables() == a.tunables()


def test_past_the_shared_limit_tunables_are_validated_when_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_settings, "SHARED_TUNABLES", 1)
    cache = JobSettingsCache()
    cache.settings(body("a"))
    other = body("b")
    other["spec"]["efficiency"]["tunables"]["keepGlobalBatchSize"] = True
    settings = cache.settings(other)
    assert settings is not None and settings.shared_tunables is None
    assert settings.tunables().keep_global_batch_size is True


def test_past_the_shared_limit_values_are_kept_per_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_settings, "SHARED_VALUES", 0)
    cache = JobSettingsCache()
    a, b = cache.settings(body("a")), cache.settings(body("b"))
    assert a is not None and b is not None
    assert a.actions == b.actions == ("AdjustConfig",) and a.actions is not b.actions
