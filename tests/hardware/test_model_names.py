"""One spelling of a GPU model's name for every table of models."""

from __future__ import annotations

import pytest

from gpuwise.hardware.compute_capability import compute_capability
from gpuwise.hardware.gpu_specs import gpu_spec
from gpuwise.hardware.mig_profiles import GPU_MODELS, gpu_model
from gpuwise.hardware.model_names import model_key


def test_a_key_is_the_letters_and_digits_in_upper_case_one_space_between_runs() -> None:
    assert model_key("NVIDIA-A100-SXM4-80GB") == "NVIDIA A100 SXM4 80GB"
    assert model_key("  nvidia a100__sxm4 / 80gb-") == "NVIDIA A100 SXM4 80GB"
    assert model_key("") == "" and model_key("--") == ""


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA H100 80GB HBM3",  # NVML's
        "NVIDIA-H100-80GB-HBM3",  # the nvidia.com/gpu.product label's
        "nvidia_h100_80gb_hbm3",  # someone's
    ],
)
def test_every_table_finds_a_model_by_any_spelling_of_its_name(name: str) -> None:
    spec = gpu_spec(name)
    assert spec is not None and spec.model == "NVIDIA H100 80GB HBM3"
    assert gpu_model(name) is GPU_MODELS["H100-80GB"]
    assert compute_capability(name) == (9, 0)
