"""The window `gpuwise run` judges: the compute capability NVML reported, as the operator takes it."""

from __future__ import annotations

import dataclasses

from gpuwise.diagnose.window import JobWindow
from gpuwise.local import diagnosis
from gpuwise.local.recorder import Recorder
from gpuwise.sidecar.sampler import Sampler
from gpuwise.sidecar.simulated import H100, SimulatedBackend


def window_of(backend: SimulatedBackend) -> JobWindow:
    now = [0.0]
    recorder = Recorder(clock=lambda: now[0])
    sampler = Sampler(backend, 1.0, on_sample=recorder.on_sample)
    for _ in range(3):
        sampler.sample_once()
        now[0] += 1.0
    return diagnosis.window(recorder, recorder.summary([]), [], 1.0)


def test_the_capability_nvml_reported_is_judged_not_the_name() -> None:
    unnamed = dataclasses.replace(H100, name="Some Future GPU", compute_capability=(12, 1))
    assert window_of(SimulatedBackend("steady", model=unnamed)).compute_capability == (12, 1)


def test_without_the_series_the_model_name_serves() -> None:
    backend = SimulatedBackend("steady")
    original = backend._values
    backend._values = lambda activity: {  # type: ignore[method-assign]  # a sidecar from before the series
        name: value for name, value in original(activity).items() if name != "gpuwise_gpu_compute_capability"
    }
    assert window_of(backend).compute_capability == (9, 0)
