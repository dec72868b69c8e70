"""A GPU's compute capability: NVML's where it was reported, the model name's table entry where not."""

from __future__ import annotations

import math

import pytest

from gpuwise.hardware.compute_capability import (
    amp_speedup_bound,
    as_gauge,
    capability,
    compute_capability,
    from_gauge,
    tensor_core_gain,
)


@pytest.mark.parametrize("version", [(7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 1)])
def test_the_gauge_round_trips_every_version(version: tuple[int, int]) -> None:
    assert from_gauge(as_gauge(version)) == version


@pytest.mark.parametrize("value", [None, 0.0, -1.0, math.nan, math.inf, 0.5])
def test_no_gauge_or_a_nonsense_one_is_no_capability(value: float | None) -> None:
    assert from_gauge(value) is None


def test_what_nvml_reported_wins_over_the_model_name() -> None:
    # A renamed or newer board: the name's table says Hopper, the chip says otherwise.
    assert capability(8.9, "NVIDIA H100 80GB HBM3") == (8, 9)
    assert capability(None, "NVIDIA H100 80GB HBM3") == (9, 0), "a dcgm-exporter series, an older report"
    assert capability(None, "Some Future GPU") is None, "unknown: not guessed"


def test_the_name_table_matches_tokens_not_substrings() -> None:
    assert compute_capability("NVIDIA A100-SXM4-80GB") == (8, 0)
    assert compute_capability("NVIDIA L4") == (8, 9)
    assert compute_capability("NVIDIA L40S") == (8, 9)
    assert compute_capability("Quadro RTX 6000") is None


def test_tensor_core_gain_is_the_table_s_or_the_last_below_it() -> None:
    assert tensor_core_gain((9, 0)) == 15.0 and tensor_core_gain((8, 0)) == 16.0
    assert tensor_core_gain((10, 0)) == 15.0, "a newer GPU than the table: the gain it can vouch for"
    assert tensor_core_gain((8, 7)) == 4.0 and tensor_core_gain((6, 1)) is None
    assert amp_speedup_bound(15.0, 0.0) == 1.0 and amp_speedup_bound(15.0, 1.0) == 15.0
    assert amp_speedup_bound(4.0, 1.7) == 4.0, "a busy share past 1 is read as 1"
