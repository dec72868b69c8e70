"""The NVML backend against a stand-in of pynvml: values, gaps with reasons, MIG, XID, GPM."""

from __future__ import annotations

import pynvml
import pytest

from gpuwise.sidecar import exposition
from gpuwise.sidecar.backend import BackendUnavailable
from gpuwise.sidecar.collector import SidecarCollector
from gpuwise.sidecar.identity import Identity
from gpuwise.sidecar.nvml import NvmlBackend
from gpuwise.sidecar.sampler import Sampler
from gpuwise.sidecar.steps import StepBook
from tests.sidecar.fake_nvml import FakeGpu, FakeInstance, FakeNvml
from tests.sidecar.support import Series, parse, select, value
from tests.support.waiting import eventually

IDENTITY = Identity(hostname="node-a", namespace="team", pod="job-worker-0", trainingjob="job", worker="0")
GPM_PERCENT = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: 90.0,
    pynvml.NVML_GPM_METRIC_SM_UTIL: 75.0,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 40.0,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 35.0,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 50.0,
}


class Harness:
    def __init__(self, nvml: FakeNvml) -> None:
        self.clock = 1000.0
        self.backend = NvmlBackend(nvml, clock=lambda: self.clock)
        self.sampler = Sampler(self.backend, 1.0)
        self.collector = SidecarCollector(IDENTITY, self.sampler, StepBook(), backend="nvml")

    def sample(self) -> list[Series]:
        self.sampler.sample_once()
        self.clock += 1.0
        return parse(exposition.render(self.collector.collect()).decode())

    def errors(self, series: list[Series], **labels: str) -> float:
        return sum(s.value for s in select(series, "gpuwise_sample_errors_total", **labels))


@pytest.fixture
def harness_for():
    made: list[Harness] = []

    def make(*gpus: FakeGpu) -> Harness:
        made.append(Harness(FakeNvml(list(gpus))))
        return made[-1]

    yield make
    for harness in made:
        harness.backend.close()


def test_a_healthy_gpu_in_dcgm_names_units_and_labels(harness_for) -> None:
    h = harness_for(FakeGpu(0, processes=[(4242, 3 * 2**30, None)], process_util=[(4242, 64, 10)]))
    series = h.sample()
    gpu = select(series, "DCGM_FI_DEV_GPU_UTIL")[0]
    assert gpu.value == 87
    assert gpu.labels == {
        "gpu": "0",
        "UUID": "GPU-00000000-0000-0000-0000-000000000000",
        "pci_bus_id": "00000000:18:00.0",
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "node-a",
        "pod": "job-worker-0",
        "namespace": "team",
    }
    assert value(series, "DCGM_FI_DEV_MEM_COPY_UTIL") == 41
    assert value(series, "DCGM_FI_DEV_FB_USED") == 40000
    assert value(series, "DCGM_FI_DEV_FB_RESERVED") == 512
    assert value(series, "DCGM_FI_DEV_FB_FREE") == 81559 - 40000 - 512
    assert value(series, "DCGM_FI_DEV_POWER_USAGE") == 312.5  # mW -> W
    assert value(series, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") == 9_000_000
    assert value(series, "DCGM_FI_DEV_GPU_TEMP") == 61
    assert value(series, "DCGM_FI_DEV_SM_CLOCK") == 1755
    assert value(series, "DCGM_FI_DEV_MEM_CLOCK") == 2619
    assert value(series, "DCGM_FI_PROF_PCIE_TX_BYTES") == 1000 * 1024  # KB/s -> B/s
    assert value(series, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER") == 2
    assert value(series, "DCGM_FI_DEV_XID_ERRORS") == 0
    assert value(series, "gpuwise_gpu_mig_enabled") == 0
    memory = select(series, "gpuwise_process_gpu_memory_bytes")[0]
    assert (memory.value, memory.labels["pid"], memory.labels["trainingjob"]) == (3 * 2**30, "4242", "job")
    assert value(series, "gpuwise_process_sm_utilization_ratio", pid="4242") == 0.64
    assert not select(series, "gpuwise_sample_errors_total", reason="gpu_lost")
    assert "simulated" not in gpu.labels


def test_one_series_per_process_with_its_newest_utilization(harness_for) -> None:
    """NVML's buffer can hold several samples of one process since the last read: the newest wins."""
    gpu = FakeGpu(0, processes=[(7, 2**30, None)], process_util=[(7, 30, 200), (8, 10, 150), (7, 90, 100)])
    h = harness_for(gpu)
    series = h.sample()
    assert [(s.labels["pid"], s.value) for s in select(series, "gpuwise_process_sm_utilization_ratio")] == [
        ("7", 0.3),
        ("8", 0.1),
    ]
    gpu.process_util += [(8, 40, 300), (8, 20, 250)]
    series = h.sample()  # only samples newer than those already read
    assert [(s.labels["pid"], s.value) for s in select(series, "gpuwise_process_sm_utilization_ratio")] == [("8", 0.4)]


def test_unsupported_readings_are_absent_and_counted(harness_for) -> None:
    h = harness_for(
        FakeGpu(0, unsupported={"nvmlDeviceGetPowerUsage", "nvmlDeviceGetMemoryInfo_v2"}, mig_capable=False)
    )
    h.sample()
    series = h.sample()
    assert not select(series, "DCGM_FI_DEV_POWER_USAGE"), "never a fake zero"
    assert h.errors(series, field="DCGM_FI_DEV_POWER_USAGE", reason="not_supported") == 2
    # An old driver without memory v2: used and free from v1, reserved absent.
    assert value(series, "DCGM_FI_DEV_FB_USED") == 40512
    assert not select(series, "DCGM_FI_DEV_FB_RESERVED")
    assert h.errors(series, field="DCGM_FI_DEV_FB_RESERVED", reason="not_supported") == 2
    assert value(series, "gpuwise_gpu_mig_enabled") == 0, "a GPU without MIG does not have it enabled"
    assert value(series, "DCGM_FI_DEV_GPU_TEMP") == 61, "the rest is unaffected"


def test_clock_event_reasons_under_either_name_and_absent_when_unsupported(harness_for) -> None:
    new, old, none = (
        FakeGpu(0, clock_events=0x40 | 0x20),
        FakeGpu(1, clock_events=0x8, missing={"nvmlDeviceGetCurrentClocksEventReasons"}),
        FakeGpu(2, unsupported={"nvmlDeviceGetCurrentClocksEventReasons"}),
    )
    h = harness_for(new, old, none)
    series = h.sample()
    assert value(series, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu="0") == 0x60
    assert value(series, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu="1") == 0x8, "a pre-R535 driver's throttle reasons"
    assert not select(series, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu="2"), "never a fake zero"
    assert h.errors(series, field="DCGM_FI_DEV_CLOCKS_EVENT_REASONS", reason="not_supported") == 1


def test_profiling_metrics_need_gpm(harness_for) -> None:
    h = harness_for(FakeGpu(0, gpm=dict(GPM_PERCENT)), FakeGpu(1))
    first = h.sample()
    assert not select(first, "DCGM_FI_PROF_SM_ACTIVE"), "a GPM metric needs two samples"
    series = h.sample()
    assert value(series, "DCGM_FI_PROF_SM_ACTIVE", gpu="0") == 0.75
    assert value(series, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", gpu="0") == 0.35
    assert value(series, "DCGM_FI_PROF_DRAM_ACTIVE", gpu="0") == 0.5
    assert value(series, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="0") == 0.9
    assert not select(series, "DCGM_FI_PROF_SM_ACTIVE", gpu="1")
    assert h.errors(series, gpu="1", field="DCGM_FI_PROF_SM_ACTIVE", reason="not_supported") == 2


def test_mig_instances_are_labelled_like_dcgm_exporter(harness_for) -> None:
    instances = [
        FakeInstance(
            gi=1, profile="3g.40gb", used_mib=20000, total_mib=40192, gpm={pynvml.NVML_GPM_METRIC_SM_UTIL: 60.0}
        ),
        FakeInstance(gi=2, profile="1g.10gb", used_mib=500, total_mib=9984),
    ]
    h = harness_for(
        FakeGpu(0, instances=instances, gpm=dict(GPM_PERCENT), processes=[(77, 2**30, 1)], process_util=[(77, 50, 5)])
    )
    h.sample()
    series = h.sample()
    mig = select(series, "DCGM_FI_DEV_FB_USED", GPU_I_ID="1")[0]
    assert mig.value == 20000
    assert mig.labels["GPU_I_PROFILE"] == "3g.40gb"
    assert mig.labels["gpu"] == "0" and mig.labels["UUID"].startswith("GPU-"), "the parent's identity"
    assert value(series, "DCGM_FI_DEV_FB_USED", GPU_I_ID="2") == 500
    assert value(series, "gpuwise_gpu_mig_enabled") == 1
    # Utilization has no value on MIG, for the GPU and for its instances: absent, and said why.
    assert not select(series, "DCGM_FI_DEV_GPU_UTIL")
    assert h.errors(series, field="DCGM_FI_DEV_GPU_UTIL", reason="mig_unsupported") == 6
    assert h.errors(series, field="gpuwise_process_sm_utilization_ratio", reason="mig_unsupported") == 2
    # GPM per instance, where the instance has the metric.
    assert value(series, "DCGM_FI_PROF_SM_ACTIVE", GPU_I_ID="1") == 0.6
    assert not select(series, "DCGM_FI_PROF_SM_ACTIVE", GPU_I_ID="2")
    assert h.errors(series, field="DCGM_FI_PROF_SM_ACTIVE", GPU_I_ID="2", reason="not_supported") == 1
    assert value(series, "gpuwise_process_gpu_memory_bytes", pid="77", GPU_I_ID="1") == 2**30
    assert "nvmlDeviceGetUtilizationRates" not in h.backend._nvml.calls, "known to fail on MIG: not even asked"


def test_a_lost_gpu_goes_absent_without_taking_the_others_along(harness_for) -> None:
    lost, healthy = FakeGpu(0), FakeGpu(1)
    h = harness_for(lost, healthy)
    assert value(h.sample(), "DCGM_FI_DEV_GPU_UTIL", gpu="0") == 87
    lost.lost = True
    series = h.sample()
    assert not select(series, "DCGM_FI_DEV_GPU_UTIL", gpu="0")
    assert not select(series, "DCGM_FI_DEV_FB_USED", gpu="0")
    assert h.errors(series, gpu="0", field="DCGM_FI_DEV_GPU_UTIL", reason="gpu_lost") == 1
    assert value(series, "DCGM_FI_DEV_GPU_UTIL", gpu="1") == 87


def test_an_unexpected_exception_is_a_reason_too(harness_for) -> None:
    h = harness_for(FakeGpu(0, broken={"nvmlDeviceGetTemperature"}))
    series = h.sample()
    assert not select(series, "DCGM_FI_DEV_GPU_TEMP")
    assert h.errors(series, field="DCGM_FI_DEV_GPU_TEMP", reason="exception") == 1


def test_xid_events_are_kept_and_counted(harness_for) -> None:
    h = harness_for(FakeGpu(0), FakeGpu(1, xid_supported=False))
    nvml = h.backend._nvml
    nvml.xid(0, 79)
    nvml.xid(0, 13)
    nvml.xid(0, 79)

    def both_79s_seen() -> list[Series] | None:
        series = h.sample()
        seen = select(series, "gpuwise_xid_errors_total", xid="79", gpu="0")
        return series if seen and seen[0].value == 2 else None

    series = eventually(both_79s_seen)
    assert value(series, "DCGM_FI_DEV_XID_ERRORS", gpu="0") == 79, "the last one, as dcgm-exporter"
    assert value(series, "gpuwise_xid_errors_total", gpu="0", xid="13") == 1
    assert not select(series, "DCGM_FI_DEV_XID_ERRORS", gpu="1")
    assert h.errors(series, gpu="1", field="DCGM_FI_DEV_XID_ERRORS", reason="not_supported") >= 1


def test_no_driver_is_a_clear_error() -> None:
    with pytest.raises(BackendUnavailable, match="use --backend simulated"):
        NvmlBackend(FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))


def test_close_releases_nvml(harness_for) -> None:
    h = harness_for(FakeGpu(0))
    h.backend.close()
    assert h.backend._nvml.shut_down.is_set()


def test_compute_capability_comes_from_nvml_and_is_absent_where_it_has_none(harness_for) -> None:
    ada = FakeGpu(0, name="NVIDIA L40S", capability=(8, 9))
    unknown = FakeGpu(1, name="NVIDIA H100 80GB HBM3", unsupported={"nvmlDeviceGetCudaComputeCapability"})
    h = harness_for(ada, unknown)
    series = h.sample()
    assert value(series, "gpuwise_gpu_compute_capability", gpu="0") == 8.9
    assert not select(series, "gpuwise_gpu_compute_capability", gpu="1"), "never guessed from the name here"
    h.sample()
    calls = h.backend._nvml.calls
    assert calls.count("nvmlDeviceGetCudaComputeCapability") == 2, "read once per GPU, not every sample"
