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
from gpuwise.sidecar.steps import ProcessSteps, StepDelta


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
    assert set(diagnosis.window(recorder, summary, [], 1.0).gpu_utilization) == {100.0}


def recorded(steps: int, seconds: float, *, wait: float, util: float, warm_up_wait: float | None = None) -> Recorder:
    """`steps` steps spread over `seconds`, reported as the tracker does (at most every 10 ms, so
    fast steps ten to a datagram), and a GPU sampled every second."""
    now = [0.0]
    recorder = Recorder(clock=lambda: now[0], wall_clock=lambda: 1_795_000_000.0 + now[0])
    backend = Scripted()
    backend.util = util
    sampler = Sampler(backend, 1.0, on_sample=recorder.on_sample)
    step = seconds / steps
    chunk = 10 if step < 0.01 else 1
    for first in range(0, steps, chunk):
        ended = (first + chunk) * step
        while now[0] + 1.0 <= ended:
            now[0] += 1.0
            sampler.sample_once()
        share = warm_up_wait if warm_up_wait is not None and first < 5 else wait
        recorder.on_step(
            StepDelta(0, chunk, chunk * step, chunk * step * share, 32 * chunk, step, 1_795_000_000.0 + ended)
        )
    return recorder


def judge(recorder: Recorder) -> tuple[str | None, list[str]]:
    processes = [ProcessSteps(0, steps=sum(r.count for r in recorder.steps()), batch_size=32, num_workers=0)]
    summary = recorder.summary(processes)
    reason = diagnosis.not_judged(recorder, summary)
    return reason, [f["kind"] for f in diagnosis.findings(recorder, summary, processes, 1.0)]


def test_a_short_run_with_many_steps_has_evidence() -> None:
    reason, kinds = judge(recorded(3_000, 30.0, wait=0.8, util=20.0))
    assert reason is None
    assert "InputBound" in kinds


def test_too_few_steps_or_samples_are_not_judged_and_say_so() -> None:
    reason, _ = judge(recorded(20, 60.0, wait=0.8, util=20.0))
    assert reason is not None and reason.startswith("Too short to judge: 20 steps")
    reason, kinds = judge(recorded(50, 15.0, wait=0.9, util=1.0))
    assert reason is None and "InputBound" in kinds, "a slow, starved job's 15 s is evidence enough"
    reason, _ = judge(recorded(200, 3.0, wait=0.8, util=20.0))
    assert reason is not None and "samples while the steps ran" in reason


def test_the_warm_up_steps_are_not_judged() -> None:
    """A first batch that takes long to prefetch is not an input-bound job."""
    recorder = recorded(3_000, 30.0, wait=0.02, util=20.0, warm_up_wait=0.95)
    waits = diagnosis.window(recorder, recorder.summary([]), [], 1.0).data_wait_fraction
    assert waits and max(waits) < 0.1
