"""The trainer names the pod's GPUs: its container's visible devices, in a file the sidecar reads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwise.instrument import pod_gpus
from tests.sidecar.support import ROOT, environment

UUID_A = "GPU-5a1f9c2e-0c3b-4d1e-9a7f-0123456789ab"
UUID_B = "GPU-6b2fac3f-1d4c-5e2f-ab80-123456789abc"


@pytest.mark.parametrize(
    ("value", "ids"),
    [
        (f"{UUID_B},{UUID_A}", (UUID_A, UUID_B)),
        (" 3, 0 ", ("0", "3")),
        ("MIG-0a1b2c3d-0000-1111-2222-333344445555", ("MIG-0a1b2c3d-0000-1111-2222-333344445555",)),
        ("1:0,1:1", ("1:0", "1:1")),
        ("all", ()),
        ("none", ()),
        ("void", ()),
        ("", ()),
        (f"{UUID_A},all", ()),  # not a list of the container's own
        (f"{UUID_A},$(rm -rf /)", (UUID_A,)),  # not an id: skipped
    ],
)
def test_the_visible_devices_the_device_plugin_set(value: str, ids: tuple[str, ...]) -> None:
    assert pod_gpus.visible_devices({"NVIDIA_VISIBLE_DEVICES": value}) == ids


def test_no_variable_names_nothing() -> None:
    assert pod_gpus.visible_devices({}) == ()


def test_volume_mounts_name_the_devices_by_their_entries(tmp_path: Path) -> None:
    listed = tmp_path / "nvidia-container-devices"
    listed.mkdir()
    for device in (UUID_A, UUID_B):
        (listed / device).touch()
    assert pod_gpus.visible_devices({"NVIDIA_VISIBLE_DEVICES": str(listed)}) == (UUID_A, UUID_B)
    assert pod_gpus.visible_devices({"NVIDIA_VISIBLE_DEVICES": str(tmp_path / "missing")}) == ()


def test_every_container_adds_its_own_file_and_the_same_set_is_written_once(tmp_path: Path) -> None:
    directory = str(tmp_path / "pod-gpus")
    pod_gpus.report(directory, (UUID_A,))
    written = sorted(os.listdir(directory))
    pod_gpus.report(directory, (UUID_A,))  # another process of the same container
    assert sorted(os.listdir(directory)) == written == [pod_gpus.file_name((UUID_A,))]
    pod_gpus.report(directory, (UUID_B,))  # the pod's second GPU container
    pod_gpus.report(directory, ())  # a container without GPUs says nothing
    assert pod_gpus.read(directory) == {UUID_A, UUID_B}


def test_what_is_read_is_bounded_and_checked(tmp_path: Path) -> None:
    (tmp_path / "a.gpus").write_text(f"{UUID_A}\nnot an id\n\n")
    (tmp_path / ".123.gpus").write_text(f"{UUID_B}\n")  # a write in progress
    (tmp_path / "notes.txt").write_text(f"{UUID_B}\n")
    assert pod_gpus.read(str(tmp_path)) == {UUID_A}


def test_the_instrumentation_names_them_as_reporting_starts(short_tmp: Path) -> None:
    directory = short_tmp / "pod-gpus"
    env = environment(
        GPUWISE_SOCKET=str(short_tmp / "nobody.sock"),
        GPUWISE_INSTRUMENT="manual",
        GPUWISE_POD_GPUS_DIR=str(directory),
        NVIDIA_VISIBLE_DEVICES=f"{UUID_A},{UUID_B}",
    )
    script = "from gpuwise import instrument; instrument.step_end()"
    subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, check=True, timeout=60)
    assert pod_gpus.read(str(directory)) == {UUID_A, UUID_B}


def test_a_directory_it_cannot_write_is_said_once_and_training_goes_on(short_tmp: Path) -> None:
    blocker = short_tmp / "file"
    blocker.write_text("")
    env = environment(
        GPUWISE_SOCKET=str(short_tmp / "nobody.sock"),
        GPUWISE_INSTRUMENT="manual",
        GPUWISE_POD_GPUS_DIR=str(blocker / "pod-gpus"),
        NVIDIA_VISIBLE_DEVICES=UUID_A,
    )
    script = "from gpuwise import instrument; instrument.step_end(); instrument.step_end(); print('trained')"
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout == "trained\n"
    assert done.stderr.count("cannot tell the sidecar which GPUs are the pod's") == 1
