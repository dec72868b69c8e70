"""MIG Manager's configs as per-GPU layouts, a node's repartition as the fewest changes next to what
other pods use, and the config gpuwise writes for it, checked against the mig-parted format as
tests.support.mig_parted_spec reads it (written apart from the code under test)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from gpuwise.decide import mig_parted
from gpuwise.decide.mig_geometry import NoGeometryError
from gpuwise.decide.mig_parted import WHOLE, GpuLayout, MigPartedError
from gpuwise.hardware.mig_profiles import gpu_model
from tests.support import mig_parted_spec

H100 = gpu_model("H100-80GB")
PRODUCT = "NVIDIA-H100-80GB-HBM3"


def sliced(**counts: int) -> GpuLayout:
    """GpuLayout(True, ...) from keyword counts: sliced(_1g_10gb=7) is seven 1g.10gb."""
    by_name = {k.removeprefix("_").replace("_", "."): n for k, n in counts.items()}
    return GpuLayout(True, tuple((p.name, by_name[p.name]) for p in H100.profiles if by_name.get(p.name)))


# An 8-GPU node as a platform team partitioned it: two whole GPUs, a few shapes of MIG.
MIXED: dict[str, Any] = {
    "mixed": [
        {"devices": [0, 1], "mig-enabled": False},
        {"devices": [2, 3], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
        {"devices": [4], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"devices": [5], "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
        {"devices": [6, 7], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
    ]
}


def document(configs: dict[str, Any]) -> str:
    return yaml.safe_dump({"version": "v1", "mig-configs": configs})


def test_a_nodes_config_reads_as_one_layout_per_gpu() -> None:
    configs = mig_parted.parse(
        document({**MIXED, "all-3g.40gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]})
    )
    now = mig_parted.layouts(configs["mixed"], H100, 8)
    assert now == (
        WHOLE,
        WHOLE,
        sliced(_1g_10gb=7),
        sliced(_1g_10gb=7),
        sliced(_3g_40gb=2),
        sliced(_1g_10gb=2, _2g_20gb=1, _3g_40gb=1),
        sliced(_7g_80gb=1),
        sliced(_7g_80gb=1),
    )
    assert mig_parted.layouts(configs["all-3g.40gb"], H100, 2) == (sliced(_3g_40gb=2),) * 2


@pytest.mark.parametrize(
    ("entries", "gpus", "problem"),
    [
        (
            [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}],
            1,
            "H100-80GB has no MIG profile '1g.5gb'",
        ),
        ([{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 8}}], 1, "no valid H100-80GB geometry"),
        ([{"devices": [0, 2], "mig-enabled": False}], 2, r"GPU index 2 is not on a node with 2 GPU\(s\)"),
        ([{"devices": [0], "mig-enabled": False}, {"devices": "all", "mig-enabled": False}], 1, "GPU 0 is in more"),
        ([{"devices": [0], "mig-enabled": False}], 2, r"no device entry covers GPU\(s\) \[1\]"),
        ([{"devices": "all", "mig-enabled": "yes"}], 1, "mig-enabled must be true or false"),
        ([{"devices": "all", "mig-enabled": True, "device-filter": "0x233010DE"}], 1, "device-filter"),
        ([{"devices": "0,1", "mig-enabled": False}], 2, "devices must be 'all' or a list of GPU indexes"),
    ],
)
def test_what_gpuwise_cannot_read_as_mig_manager_would_is_explained(
    entries: list[dict[str, Any]], gpus: int, problem: str
) -> None:
    with pytest.raises(MigPartedError, match=problem):
        mig_parted.layouts(entries, H100, gpus)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("version: v2\nmig-configs: {}\n", "not a mig-parted config of version v1"),
        ("version: v1\nmig-configs: [a]\n", "must map each name"),
        ("version: v1\nmig-configs: {a: [\n", "not YAML"),
        (None, "not a mig-parted config"),
    ],
)
def test_documents_that_are_not_mig_parted_configs_are_refused(text: str | None, problem: str) -> None:
    with pytest.raises(MigPartedError, match=problem):
        mig_parted.parse(text)


def test_one_jobs_slices_change_only_the_gpus_the_plan_needs() -> None:
    """GPUs 0-1 run whole-GPU pods; GPU 2's seven 1g.10gb, a 3g.40gb (GPU 4's) and a 7g.80gb (GPU
    6's) hold pods. A job asking for a 4g.40gb gets GPU 7 (its 7g.80gb → one 4g.40gb: two instance
    changes; GPU 3 would need five, GPU 5 three); every other GPU keeps its layout."""
    now = mig_parted.layouts(MIXED["mixed"], H100, 8)
    used = {"1g.10gb": 7, "3g.40gb": 1, "7g.80gb": 1}
    plan = mig_parted.replan(H100, now, {"4g.40gb": 1}, whole_in_use=2, slices_in_use=used)
    assert plan.changed == (7,)
    assert plan.layouts[7] == sliced(_4g_40gb=1) and plan.instance_changes == 2
    assert plan.layouts[:7] == now[:7]
    # With GPU 7 in use too, GPU 5 (3g.40gb, 2g.20gb, two 1g.10gb, its 3g.40gb free) is next best.
    busier = mig_parted.replan(H100, now, {"4g.40gb": 1}, whole_in_use=2, slices_in_use={**used, "7g.80gb": 2})
    assert busier.changed == (5,) and dict(busier.layouts[5].counts)["4g.40gb"] == 1
    # Nothing in use: a whole GPU needs one instance created, fewer changes than any sliced one.
    free = mig_parted.replan(H100, now, {"4g.40gb": 1})
    (whole,) = free.changed
    assert whole in (0, 1) and free.layouts[whole] == sliced(_4g_40gb=1) and free.instance_changes == 1


def test_slices_in_use_and_whole_gpus_in_use_are_kept() -> None:
    now = (WHOLE, sliced(_3g_40gb=2))
    # GPU 1 has a free 3g.40gb already: no change at all.
    assert mig_parted.replan(H100, now, {"3g.40gb": 1}, whole_in_use=1, slices_in_use={"3g.40gb": 1}).changed == ()
    # Both 3g.40gb in use and the whole GPU too: nothing left to repartition.
    with pytest.raises(NoGeometryError, match=r"cannot offer \{'1g.10gb': 1\} free beside the 1 whole GPU"):
        mig_parted.replan(H100, now, {"1g.10gb": 1}, whole_in_use=1, slices_in_use={"3g.40gb": 2})
    # The whole GPU free: it is the one sliced.
    plan = mig_parted.replan(H100, now, {"1g.10gb": 1}, slices_in_use={"3g.40gb": 2})
    assert plan.changed == (0,) and plan.layouts[1] == now[1]


def test_the_generated_config_is_what_mig_parted_expects() -> None:
    now = mig_parted.layouts(MIXED["mixed"], H100, 8)
    used = {"1g.10gb": 7, "3g.40gb": 1, "7g.80gb": 1}
    plan = mig_parted.replan(H100, now, {"4g.40gb": 1}, whole_in_use=2, slices_in_use=used)
    devices = mig_parted.entry(plan.layouts)
    name = mig_parted.config_name("gpu-node-a", devices)
    assert re.fullmatch(r"gpuwise-gpu-node-a-[0-9a-f]{10}", name)
    text = mig_parted.merged(document(MIXED), name, devices)
    before = mig_parted_spec.apply(text, "mixed", PRODUCT, 8, [None] * 8)
    after = mig_parted_spec.apply(text, name, PRODUCT, 8, before)
    assert [i for i in range(8) if before[i] != after[i]] == [7]
    assert after[7] == {"4g.40gb": 1} and after[:2] == [None, None]
    # Device indexes as lists of ints, GPUs with the same layout in one entry, in index order.
    assert [entry["devices"] for entry in devices] == [[0, 1], [2, 3], [4], [5], [6], [7]]
    assert devices[0] == {"devices": [0, 1], "mig-enabled": False}


def test_config_names_are_deterministic_label_values() -> None:
    devices = mig_parted.entry((sliced(_3g_40gb=2),))
    assert mig_parted.config_name("n", devices) == mig_parted.config_name("n", [dict(d) for d in devices])
    assert mig_parted.config_name("n", devices) != mig_parted.config_name("m", devices)
    assert mig_parted.config_name("n", devices) != mig_parted.config_name("n", mig_parted.entry((WHOLE,)))
    long = "ip-10-0-12-34.eu-central-1.compute.internal.example.com"
    name = mig_parted.config_name(long, devices)
    assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9_.]*[a-z0-9])?", name)
    assert mig_parted.owned_by(name, long) and not mig_parted.owned_by(name, "n")
    assert not mig_parted.owned_by("gpuwise-n-balanced", "n")


def test_merging_keeps_every_other_config_and_drops_only_the_stale_ones_named() -> None:
    stale = mig_parted.config_name("n", mig_parted.entry((WHOLE,)))
    text = document({**MIXED, stale: mig_parted.entry((WHOLE,))})
    fresh = mig_parted.entry((sliced(_7g_80gb=1),))
    name = mig_parted.config_name("n", fresh)
    merged = mig_parted.parse(mig_parted.merged(text, name, fresh, drop={stale}))
    assert merged == {**MIXED, name: fresh}
