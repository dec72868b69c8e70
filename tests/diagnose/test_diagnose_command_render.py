"""How a recommendation reads where a person sees it: `gpuwise diagnose`'s text and `gpuwise run`'s
report. Only AdjustConfig's changes are settings a user sets; other actions' changes are the
action's own parameters (a MIG profile, a time-sliced share)."""

from __future__ import annotations

from gpuwise.diagnose_command import Result, render
from gpuwise.local.diagnosis import _advice
from tests.diagnose.test_rules import LIGHT, TUNABLES, run, window


def test_diagnose_shows_packs_parameters_and_no_settings_to_set() -> None:
    light_l4 = window(**LIGHT, memory_used_mib=1_500.0, memory_total_mib=23_034.0, gpu_model="NVIDIA L4")
    found = run(light_l4)
    text = render([Result(("ml", "vit"), light_l4, [found["OversizedGPU"]])])
    assert "ml/vit: OversizedGPU" in text
    assert "gpuShare=0.13" in text and "→ Run each worker on a time-sliced share of a GPU" in text
    assert "    Pack: share=time-slicing, gpuShare=0.13" in text
    assert "set share" not in text and "set gpuShare" not in text
    assert "the CLI does not see spec.efficiency.tunables" not in text, "Pack needs no tunables"


def test_diagnose_still_lists_adjust_configs_settings() -> None:
    starved = window(gpu_utilization=[30.0] * 60, data_wait_fraction=[0.7] * 60, num_workers=2, pin_memory=False)
    text = render([Result(("ml", "bert"), starved, [run(starved, tunables=TUNABLES)["InputBound"]])])
    assert "    set NUM_WORKERS=7" in text and "    set PIN_MEMORY=1" in text


def test_gpuwise_run_says_try_only_for_settings_of_the_script() -> None:
    (_, pack) = run(window(**LIGHT, memory_used_mib=1_500.0, memory_total_mib=23_034.0, gpu_model="L4"))["OversizedGPU"]
    assert pack is not None and _advice(pack) == pack.message, "a share of a GPU is the operator's to give"
    starved = window(gpu_utilization=[30.0] * 60, data_wait_fraction=[0.7] * 60, num_workers=2, pin_memory=False)
    (_, more_workers) = run(starved)["InputBound"]
    assert more_workers is not None and _advice(more_workers).endswith("Try: NUM_WORKERS=7, PIN_MEMORY=1.")
