"""The simulated backend: deterministic scenarios, trace replay, always labelled simulated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.metrics import catalog
from gpuwise.sidecar import device_trace, exposition
from gpuwise.sidecar.collector import SidecarCollector
from gpuwise.sidecar.identity import Identity
from gpuwise.sidecar.sampler import Sampler
from gpuwise.sidecar.scenarios import SCENARIOS
from gpuwise.sidecar.simulated import L4, SimulatedBackend
from gpuwise.sidecar.steps import StepBook
from tests.sidecar.support import parse, value


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def values_over(backend: SimulatedBackend, clock: Clock, seconds: int, name: str, gpu: int = 0) -> list[float]:
    found = []
    for _ in range(seconds):
        sample = backend.sample()
        found += [r.value for r in sample.readings if r.metric.name == name and r.device.index == gpu]
        clock.now += 1.0
    return found


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def scenario(name: str, gpus: int = 1) -> tuple[SimulatedBackend, Clock]:
    clock = Clock()
    return SimulatedBackend(name, gpus, clock=clock), clock


def test_scenarios_are_deterministic() -> None:
    (a, clock_a), (b, clock_b) = scenario("bursty", 2), scenario("bursty", 2)
    assert values_over(a, clock_a, 30, "DCGM_FI_DEV_GPU_UTIL", 1) == values_over(
        b, clock_b, 30, "DCGM_FI_DEV_GPU_UTIL", 1
    )
    assert [d.uuid for d in a.devices] == [d.uuid for d in b.devices]
    assert len({d.uuid for d in a.devices}) == 2


def test_scenarios_have_their_shapes() -> None:
    util = {name: mean(values_over(*scenario(name), 80, "DCGM_FI_DEV_GPU_UTIL")) for name in SCENARIOS}
    assert util["idle"] == 0
    assert util["steady"] > 90
    assert util["data-starved"] < 40
    assert 40 < util["bursty"] < 60
    memory = mean(values_over(*scenario("memory-light"), 10, "DCGM_FI_DEV_FB_USED"))
    assert memory < 0.15 * 81559 and util["memory-light"] > 80
    straggler, clock = scenario("straggler", 4)
    clocks = [mean(values_over(straggler, clock, 5, "DCGM_FI_DEV_SM_CLOCK", gpu)) for gpu in range(4)]
    assert clocks[3] < 0.6 * clocks[0], "the last GPU is throttled"
    reasons = [values_over(straggler, clock, 1, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu)[0] for gpu in range(4)]
    assert reasons == [0, 0, 0, 0x60], "...and says why: thermal slowdown"
    hot, clock = scenario("throttled", 2)
    assert mean(values_over(hot, clock, 5, "DCGM_FI_DEV_SM_CLOCK", 1)) < 0.65 * 1980
    assert set(values_over(hot, clock, 5, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 1)) == {0x60}
    assert values_over(*scenario("idle"), 1, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS") == [0x1]


def test_energy_is_a_counter_integrating_power() -> None:
    backend, clock = scenario("steady")
    energy = values_over(backend, clock, 3, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    power = values_over(backend, clock, 1, "DCGM_FI_DEV_POWER_USAGE")[0]
    assert energy[0] < energy[1] < energy[2]
    assert energy[2] - energy[1] == pytest.approx(power * 1000, rel=0.1)  # W x 1 s = J; in mJ


def test_every_series_is_labelled_simulated() -> None:
    backend = SimulatedBackend("steady", 2)
    sampler = Sampler(backend, 1.0)
    sampler.sample_once()
    collector = SidecarCollector(
        Identity("host"), sampler, StepBook(), backend="simulated", scenario="steady", simulated=True
    )
    series = parse(exposition.render(collector.collect()).decode())
    device_series = [s for s in series if "gpu" in s.labels]
    assert device_series
    assert all(s.labels["simulated"] == "true" for s in device_series)
    assert value(series, "gpuwise_sidecar_info", backend="simulated", scenario="steady") == 1
    assert {s.name for s in series} >= {m.name for m in catalog.CATALOG if m.dcgm}, "the same metrics as NVML"


def test_a_simulated_gpu_can_be_a_model_without_mig() -> None:
    clock = Clock()
    backend = SimulatedBackend("steady", 1, model=L4, clock=clock)
    assert backend.devices[0].model == "NVIDIA L4"
    used = values_over(backend, clock, 1, "DCGM_FI_DEV_FB_USED")[0]
    free = values_over(backend, clock, 1, "DCGM_FI_DEV_FB_FREE")[0]
    assert used + free == 23034 - 434, "its memory, not an H100's"
    assert max(values_over(backend, clock, 5, "DCGM_FI_DEV_POWER_USAGE")) <= 72.0


def test_unknown_scenario_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="choose one of idle, steady"):
        SimulatedBackend("fast")


def test_a_recorded_trace_replays(short_tmp: Path) -> None:
    backend, clock = scenario("bursty", 2)
    lines = []
    for _ in range(50):
        lines += [json.dumps(r) for r in device_trace.records(backend.sample(), clock.now)]
        clock.now += 1.0
    path = short_tmp / "device_trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    recorded = device_trace.load(path)
    assert recorded.gpus == 2 and recorded.duration == 50.0
    replay_clock = Clock()
    replay = SimulatedBackend(trace=recorded, clock=replay_clock)
    assert replay.scenario == "trace"
    original = [json.loads(line)["values"]["DCGM_FI_DEV_GPU_UTIL"] for line in lines[1::2]]
    assert values_over(replay, replay_clock, 50, "DCGM_FI_DEV_GPU_UTIL", 1) == original
    assert values_over(replay, replay_clock, 1, "DCGM_FI_DEV_GPU_UTIL", 1) == original[:1], "it loops"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "has no records"),
        ("{not json\n", ":1: not JSON"),
        ('{"t": 0, "gpu": 0, "values": {"DCGM_FI_DEV_NOPE": 1}}\n', "'DCGM_FI_DEV_NOPE' is not a per-device metric"),
        ('{"t": -1, "gpu": 0, "values": {}}\n', "'t' must be seconds >= 0"),
        ('{"t": 0, "gpu": 1, "values": {}}\n', "GPUs must be numbered 0..0"),
        ('{"t": 0, "gpu": 0, "values": {"DCGM_FI_DEV_GPU_UTIL": "high"}}\n', "must be a number"),
    ],
)
def test_bad_traces_say_what_is_wrong(short_tmp: Path, content: str, message: str) -> None:
    path = short_tmp / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(device_trace.TraceError, match=message):
        device_trace.load(path)


def test_a_run_report_is_a_trace(short_tmp: Path) -> None:
    path = short_tmp / "report.json"
    path.write_text(json.dumps({"trace": [{"t": 0.0, "gpu": 0, "values": {"DCGM_FI_DEV_GPU_UTIL": 12.0}}]}))
    backend = SimulatedBackend(trace=device_trace.load(path))
    assert [r.value for r in backend.sample().readings if r.metric is catalog.GPU_UTIL] == [12.0]
