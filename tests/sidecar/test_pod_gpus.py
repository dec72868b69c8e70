"""The sidecar exports only the pod's GPUs: eight simulated on the node, two in the pod (issue 20 item 8).

The sidecar and the trainer are real processes: the trainer names its GPUs through the
instrumentation, as it does in a pod, and the sidecar's /metrics is read over HTTP.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwise.metrics import Scope, catalog
from gpuwise.sidecar.backend import Device, Reading, Sample
from gpuwise.sidecar.nvml import NvmlBackend
from gpuwise.sidecar.pod_gpus import REQUEST, TRAINER, UNKNOWN, PodGpus, named
from gpuwise.sidecar.simulated import SimulatedBackend
from tests.sidecar.fake_nvml import FakeGpu, FakeInstance, FakeNvml, mig_uuid
from tests.sidecar.support import ROOT, Series, SidecarProcess, select, sidecar, value
from tests.support.waiting import eventually

NODE_GPUS = 8
# The straggler scenario: GPU 7 runs at ~99 %, the others at ~62 %. A pod holding 6 and 7 averages
# ~80 %, the node ~67 %: the pod's utilization is told apart from the node's.
SCENARIO = ("--backend", "simulated", "--gpus", str(NODE_GPUS), "--scenario", "straggler", "--interval", "0.2")
UUIDS = [device.uuid for device in SimulatedBackend(gpus=NODE_GPUS).devices]
TRAINER_SCRIPT = "from gpuwise import instrument; instrument.step_end(samples=1)"


def gpus_exported(series: list[Series]) -> dict[str, float]:
    """The utilization of each GPU /metrics shows, by its `gpu` label."""
    return {s.labels["gpu"]: s.value for s in select(series, catalog.GPU_UTIL.name)}


def run_trainer(side: SidecarProcess, pod_gpus: Path, visible_devices: str) -> None:
    env = {**side.trainer_env("manual"), "GPUWISE_POD_GPUS_DIR": str(pod_gpus)}
    env["NVIDIA_VISIBLE_DEVICES"] = visible_devices
    subprocess.run([sys.executable, "-c", TRAINER_SCRIPT], env=env, cwd=ROOT, check=True, timeout=60)


@pytest.mark.parametrize(
    ("visible_devices", "gpus"),
    [(f"{UUIDS[6]},{UUIDS[7]}", {"6", "7"}), ("0,3", {"0", "3"})],
    ids=["by-uuid", "by-index"],
)
def test_a_trainer_naming_two_of_eight_gpus_gets_exactly_those(
    short_tmp: Path, visible_devices: str, gpus: set[str]
) -> None:
    pod_gpus = short_tmp / "pod-gpus"
    with sidecar(short_tmp, *SCENARIO, "--pod-gpus-dir", str(pod_gpus), "--requested-gpus", "2") as side:
        assert gpus_exported(side.scrape()) == {}, "nobody named the pod's GPUs yet: none"
        run_trainer(side, pod_gpus, visible_devices)
        eventually(lambda: set(gpus_exported(side.scrape())) == gpus, timeout=10.0)
        series = side.scrape()
        assert {s.labels["UUID"] for s in select(series, catalog.FB_USED.name)} == {UUIDS[int(gpu)] for gpu in gpus}, (
            "every device series is the pod's GPUs' only"
        )
        assert value(series, catalog.POD_GPUS.name, source=TRAINER) == 2
        assert value(series, catalog.STEPS.name) == 1, "steps go on as before"
    if "6" in gpus:
        utilization = gpus_exported(series)
        pod_mean = sum(utilization.values()) / len(utilization)
        assert pod_mean > 75, f"the pod's GPUs (6 at ~62 %, 7 at ~99 %) average {pod_mean}, not the node's ~67 %"


def test_nobody_named_and_fewer_requested_than_the_node_has_exports_no_gpu(short_tmp: Path) -> None:
    pod_gpus = short_tmp / "pod-gpus"
    with sidecar(short_tmp, *SCENARIO, "--pod-gpus-dir", str(pod_gpus), "--requested-gpus", "2") as side:
        run_trainer(side, pod_gpus, "all")  # a CUDA image's default: no GPU of its own
        eventually(lambda: value(side.scrape(), catalog.STEPS.name) == 1)
        series = side.scrape()
    device_families = {metric.name for metric in catalog.CATALOG if metric.scope is Scope.DEVICE}
    assert not [s for s in series if s.name in device_families], "no device series at all, never another's"
    assert value(series, catalog.POD_GPUS.name, source=UNKNOWN) == 0
    assert value(series, catalog.SIDECAR_INFO.name) == 1


def test_as_many_requested_as_the_node_has_exports_them_all(short_tmp: Path) -> None:
    pod_gpus = short_tmp / "pod-gpus"
    with sidecar(short_tmp, *SCENARIO, "--pod-gpus-dir", str(pod_gpus), "--requested-gpus", "8") as side:
        series = side.scrape()
    assert set(gpus_exported(series)) == {str(index) for index in range(NODE_GPUS)}
    assert value(series, catalog.POD_GPUS.name, source=REQUEST) == NODE_GPUS


def test_requested_gpus_needs_the_directory(capsys: pytest.CaptureFixture[str]) -> None:
    from gpuwise.sidecar import sidecar_command

    with pytest.raises(SystemExit) as exited:
        sidecar_command.main(["--backend", "simulated", "--requested-gpus", "2"])
    assert exited.value.code == 2
    assert "--requested-gpus only applies with --pod-gpus-dir" in capsys.readouterr().err


# --- which devices a trainer's ids name, on MIG and without -------------------------------------


def mig_node() -> list[Device]:
    """GPU 0 whole; GPU 1 in MIG mode with GPU instances 3 and 5 in slots 0 and 1."""
    gpus = [FakeGpu(0), FakeGpu(1, instances=[FakeInstance(3, "1g.10gb"), FakeInstance(5, "3g.40gb")])]
    backend = NvmlBackend(FakeNvml(gpus))
    try:
        return backend.devices
    finally:
        backend.close()


def describe(devices: frozenset[Device]) -> set[tuple[int, int | None]]:
    return {(device.index, device.mig_instance) for device in devices}


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([mig_uuid(1, 5)], {(1, 5)}),
        (["1:1"], {(1, 5)}),
        ([f"MIG-{FakeGpu(1).uuid}/5/0"], {(1, 5)}),
        ([FakeGpu(1).uuid], {(1, None), (1, 3), (1, 5)}),
        (["0"], {(0, None)}),
        (["GPU-elsewhere"], set()),
    ],
    ids=["mig-uuid", "mig-index", "legacy-mig-uuid", "whole-gpu-with-its-instances", "index", "unknown"],
)
def test_a_named_mig_instance_comes_without_its_shared_parent(
    ids: list[str], expected: set[tuple[int, int | None]]
) -> None:
    assert describe(named(mig_node(), ids)) == expected


def test_the_count_never_stands_for_mig_instances(short_tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    devices = mig_node()
    sample = Sample(tuple(Reading(catalog.FB_USED, device, 1.0) for device in devices))
    scope = PodGpus(short_tmp / "pod-gpus", requested=2)  # two whole GPUs on the node, one in MIG mode
    with caplog.at_level(logging.WARNING, logger="gpuwise.sidecar.pod_gpus"):
        first = scope.attribute(sample)
        scope.attribute(sample)
    assert (first.source, first.devices) == (UNKNOWN, frozenset())
    assert first.keep(sample).readings == ()
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 1 and "the pod's GPUs are unknown" in said[0], "said once, with why"
