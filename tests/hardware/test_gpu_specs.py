"""The datasheet figures the OversizedGPU rule sizes a move to a smaller GPU class with."""

from __future__ import annotations

import pytest

from gpuwise.hardware.gpu_specs import SPECS, gpu_spec, work_slowdown


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA L4", "NVIDIA L4"),  # NVML's name
        ("NVIDIA-L4", "NVIDIA L4"),  # the nvidia.com/gpu.product label's
        ("l4", "NVIDIA L4"),
        ("NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB HBM3"),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
        ("NVIDIA-A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"),
        ("Tesla-T4", "Tesla T4"),
    ],
)
def test_a_model_is_found_by_any_of_its_names(name: str, model: str) -> None:
    spec = gpu_spec(name)
    assert spec is not None and spec.model == model


def test_an_unlisted_model_has_no_figures_rather_than_a_neighbour_s() -> None:
    assert gpu_spec("NVIDIA RTX 6000 Ada Generation") is None
    assert gpu_spec("NVIDIA A10G") is None, "AWS's A10 variant: NVIDIA publishes no datasheet for it"
    assert gpu_spec(None) is None and gpu_spec("") is None
    names = [name.upper() for spec in SPECS for name in spec.names]
    assert len(names) == len(set(names)), "a name names one model"


def test_the_slowdown_bound_is_the_largest_of_the_three_peak_ratios_and_never_a_speedup() -> None:
    h100, l40s, l4 = gpu_spec("H100"), gpu_spec("L40S"), gpu_spec("L4")
    assert h100 is not None and l40s is not None and l4 is not None
    ratio, basis = work_slowdown(h100, l4)
    assert (round(ratio, 2), basis) == (11.17, "memory bandwidth"), "3,350 / 300 GB/s"
    ratio, basis = work_slowdown(l40s, l4)
    assert (round(ratio, 2), basis) == (3.02, "fp32"), "91.6 / 30.3 TFLOPS"
    assert work_slowdown(l4, h100) == (1.0, "fp32"), "a larger GPU is not assumed faster"
    assert round(l4.memory_mib) == 22_888, "24 decimal GB: under the 23,034 MiB NVML reports"
