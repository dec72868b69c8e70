"""The window `gpuwise run` judges: the compute capability NVML reported, as the operator takes it."""

from __future__ import annotations

import dataclasses

from gpuwise.diagnose.window import JobWindow
from gpuwise.local import diagnosis
from gpuwise.local.recorder import Recorder
from gpuwise.metrics import catalog
from gpuwise.sidecar.backend import Device, Sample, SampleBuilder
from gpuwise.sidecar.sampler import Sampler
from gpuwise.sidecar.simulated import H100, SimulatedBackend
from gpuwise.sidecar.steps import StepDelta


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


class Scripted:
    """One GPU whose utilization the test sets before each sample."""

    name, scenario, simulated = "simulated", "scripted", True

    def __init__(self) -> None:
        self.util = 0.0
        self.device = Device(0, "GPU-0", "00000000:18:00.0", "Test GPU")

    def sample(self) -> Sample:
        builder = SampleBuilder()
        builder.add(catalog.GPU_UTIL, self.device, self.util)
        return builder.build()

    def close(self) -> None:
        pass


def test_the_summary_judges_the_training_not_the_set_up_before_it() -> None:
    """9 s of model set-up at 0 %, then 10 s of training at 100 %: the GPU was busy all the training."""
    now = [0.0]
    recorder = Recorder(clock=lambda: now[0], wall_clock=lambda: 1_795_000_000.0 + now[0])
    backend = Scripted()
    sampler = Sampler(backend, 1.0, on_sample=recorder.on_sample)
    for second in range(20):
        now[0] = float(second)
        backend.util = 0.0 if second < 9 else 100.0
        sampler.sample_once()
        if second >= 10:  # one 1 s step ending each second from 10 s: training runs from 9 s
            recorder.on_step(StepDelta(0, 1, 1.0, 0.0, None, 1.0, 1_795_000_000.0 + second))
    summary = recorder.summary([])
    assert summary.gpus[0]["mean_util"] == 100.0
    assert summary.span_seconds == 10.0
    assert diagnosis.window(recorder, summary, [], 1.0).gpu_utilization == [100.0] * 11
