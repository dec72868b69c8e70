"""Trace variants: another workload mix drawn from one trace's pods, as the ATC'23 family is."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwise.decide.packing.cluster import MILLI, Pods
from gpuwise.simulate.variants import VariantError, parse, share, variant


def mixed_pods(count: int = 4000, seed: int = 7, bound: float = 0.2) -> Pods:
    """CPU-only, GPU-sharing, whole-GPU and multi-GPU pods, in random proportions; about ``bound``
    of them accept only T4s."""
    rng = np.random.default_rng(seed)
    kinds = rng.choice(4, count, p=[0.1, 0.45, 0.4, 0.05])
    num_gpu = np.select([kinds == 0, kinds == 3], [0, rng.choice([2, 4, 8], count)], 1)
    gpu_milli = np.select([kinds == 0, kinds == 1], [0, rng.integers(1, 100, count) * 10], MILLI)
    to_t4 = (rng.random(count) < bound) & (num_gpu > 0)
    return Pods.build(
        names=[f"pod-{i}" for i in range(count)],
        cpu_milli=(rng.integers(1, 32, count) * 1000).tolist(),
        memory_mib=[1024] * count,
        num_gpu=num_gpu.tolist(),
        gpu_milli=gpu_milli.tolist(),
        gpu_models=[["T4"] if t4 else [] for t4 in to_t4.tolist()],
        models=["T4", "V100"],
    )


@pytest.mark.parametrize(
    ("kind", "wanted"),
    [("gpushare", 0.2), ("gpushare", 0.6), ("gpushare", 1.0), ("multigpu", 0.1), ("multigpu", 0.7), ("gpuspec", 0.5)],
)
def test_the_kind_asks_for_the_share_of_the_gpu_asked_for(kind: str, wanted: float) -> None:
    pods = mixed_pods()
    drawn = variant(pods, kind, wanted)
    assert share(drawn, kind) == pytest.approx(wanted, abs=0.03)
    assert abs(share(pods, kind) - wanted) > 0.05, "the case must move the share"


def test_cpu_only_pods_stay_and_the_gpu_pods_keep_their_number() -> None:
    pods = mixed_pods()
    drawn = variant(pods, "gpushare", 0.5)
    cpu_only = [name for name, gpus in zip(pods.names, pods.num_gpu.tolist(), strict=True) if not gpus]
    assert [name for name, gpus in zip(drawn.names, drawn.num_gpu.tolist(), strict=True) if not gpus] == cpu_only
    assert (drawn.num_gpu > 0).sum() == (pods.num_gpu > 0).sum()
    assert len(set(drawn.names)) == len(drawn), "a pod drawn twice gets a name of its own"


@pytest.mark.parametrize("wanted", [0.05, 0.25])
def test_cpu_variants_set_the_share_of_pods_that_ask_for_no_gpu_and_keep_the_gpu_pods(wanted: float) -> None:
    pods = mixed_pods()
    drawn = variant(pods, "cpu", wanted, seed=3)
    assert share(drawn, "cpu") == pytest.approx(wanted, abs=0.001)
    assert abs(share(pods, "cpu") - wanted) > 0.03, "the case must move the share"
    gpu_names = [name for name, gpus in zip(pods.names, pods.num_gpu.tolist(), strict=True) if gpus]
    assert [name for name, gpus in zip(drawn.names, drawn.num_gpu.tolist(), strict=True) if gpus] == gpu_names
    assert drawn.total_gpu_milli.sum() == pods.total_gpu_milli.sum(), "the GPU demand is the trace's"
    assert len(set(drawn.names)) == len(drawn)


def test_a_seed_fixes_the_draw() -> None:
    pods = mixed_pods()
    first, again, other = (
        variant(pods, "multigpu", 0.4, 1),
        variant(pods, "multigpu", 0.4, 1),
        variant(pods, "multigpu", 0.4, 2),
    )
    assert first.names == again.names
    assert first.names != other.names


def test_names_follow_the_trace_family() -> None:
    assert parse("gpushare40") == ("gpushare", 0.4)
    assert parse("multigpu50") == ("multigpu", 0.5)
    assert parse("gpuspec25") == ("gpuspec", 0.25)
    assert parse("gpushare100") == ("gpushare", 1.0)
    assert parse("cpu050") == ("cpu", 0.05)
    assert parse("cpu250") == ("cpu", 0.25)
    for wrong in ("gpushare", "gpushare101", "gpushare0", "cpu50", "cpu1000", "cpu000", "multigpu2x", "40", "050"):
        with pytest.raises(VariantError, match="no trace variant"):
            parse(wrong)


def test_impossible_variants_say_why() -> None:
    pods = mixed_pods()
    with pytest.raises(VariantError, match="at most 1"):
        variant(pods, "gpushare", 1.5)
    with pytest.raises(VariantError, match="below 1 for cpu"):
        variant(pods, "cpu", 1.0)
    with pytest.raises(VariantError, match="unknown pod kind"):
        variant(pods, "cpuonly", 0.2)
    with pytest.raises(VariantError, match="needs CPU-only pods and GPU pods"):
        variant(pods.take(np.flatnonzero(pods.num_gpu > 0)), "cpu", 0.2)
    with pytest.raises(VariantError, match="needs GPU pods of kind 'gpuspec' and others"):
        variant(mixed_pods(bound=0), "gpuspec", 0.2)
    whole_only = pods.take(np.flatnonzero(pods.gpu_milli == MILLI))
    with pytest.raises(VariantError, match="needs GPU pods of kind 'gpushare' and others"):
        variant(whole_only, "gpushare", 0.3)
