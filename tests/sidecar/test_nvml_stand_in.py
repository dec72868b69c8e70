"""The pynvml stand-in cannot drift from the real `pynvml` module (nvidia-ml-py, installed).

The NVML backend is tested against `fake_nvml`; these tests hold the stand-in to the real module
for everything the backend reads from it: each name exists in pynvml, each function takes the
same parameters (names, kinds, defaults), each constant has the same value, and each record a
function returns has only fields the real ctypes structure has.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from tests.sidecar.fake_nvml import FakeGpu, FakeNvml, Handle
from tests.sidecar.support import ROOT

# Every module that is handed the pynvml module (or the stand-in) and reads from it.
BACKEND = [
    ROOT / "sidecar" / "gpuwise" / "sidecar" / name for name in ("nvml.py", "gpm.py", "xid.py", "nvml_errors.py")
]


def used_by_the_backend() -> set[str]:
    """The attributes the backend reads from the NVML module: `nvml.X` and `self._nvml.X`."""
    names = set()
    for path in BACKEND:
        for node in ast.walk(ast.parse(Path(path).read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id == "nvml") or (
                isinstance(owner, ast.Attribute) and owner.attr == "_nvml"
            ):
                names.add(node.attr)
    return names


USED = sorted(used_by_the_backend())
STAND_IN = FakeNvml([])
FUNCTIONS = [name for name in USED if inspect.ismethod(getattr(STAND_IN, name, None))]
CONSTANTS = [name for name in USED if isinstance(getattr(STAND_IN, name, None), int)]


def test_the_backend_reads_what_these_tests_check() -> None:
    """A guard on the guard: the walk over the backend finds its calls and constants."""
    assert {"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetProcessUtilization", "nvmlEventSetWait_v2"} <= set(FUNCTIONS)
    assert {"NVML_ERROR_NOT_SUPPORTED", "nvmlMemory_v2", "NVML_CLOCK_SM"} <= set(CONSTANTS)
    assert len(FUNCTIONS) >= 30
    assert set(USED) - set(FUNCTIONS) - set(CONSTANTS) == {"NVMLError", "c_nvmlGpmMetricsGet_t"}


def test_every_name_the_backend_reads_is_in_the_stand_in_and_in_pynvml() -> None:
    assert [name for name in USED if not hasattr(STAND_IN, name)] == []
    assert [name for name in USED if not hasattr(pynvml, name)] == []


def shape(function: Any) -> list[tuple[str, Any, bool]]:
    return [(p.name, p.kind, p.default is p.empty) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("name", FUNCTIONS)
def test_each_function_takes_the_real_parameters(name: str) -> None:
    assert shape(getattr(STAND_IN, name)) == shape(getattr(pynvml, name))


@pytest.mark.parametrize("name", CONSTANTS)
def test_each_constant_has_the_real_value(name: str) -> None:
    assert getattr(STAND_IN, name) == getattr(pynvml, name)


def fields(structure: Any) -> set[str]:
    return {name for name, *_ in structure._fields_}


def test_the_errors_and_the_gpm_request_are_the_real_ones() -> None:
    assert STAND_IN.NVMLError is pynvml.NVMLError
    request = STAND_IN.c_nvmlGpmMetricsGet_t()
    real = pynvml.c_nvmlGpmMetricsGet_t
    assert set(vars(request)) <= fields(real)
    assert set(vars(request.metrics[0])) <= fields(pynvml.c_nvmlGpmMetric_t)


PLAIN = FakeGpu(0, processes=[(4242, 2**30, None)], process_util=[(4242, 50, 10)], gpm={})
NVML = FakeNvml([PLAIN])
# What each function returns (a record standing in for a ctypes structure), and that structure.
RECORDS: dict[str, tuple[Any, type]] = {
    "nvmlDeviceGetPciInfo": (lambda: NVML.nvmlDeviceGetPciInfo(Handle(PLAIN)), pynvml.nvmlPciInfo_t),
    "nvmlDeviceGetUtilizationRates": (
        lambda: NVML.nvmlDeviceGetUtilizationRates(Handle(PLAIN)),
        pynvml.c_nvmlUtilization_t,
    ),
    "nvmlDeviceGetMemoryInfo": (lambda: NVML.nvmlDeviceGetMemoryInfo(Handle(PLAIN)), pynvml.c_nvmlMemory_t),
    "nvmlDeviceGetMemoryInfo_v2": (
        lambda: NVML.nvmlDeviceGetMemoryInfo(Handle(PLAIN), version=pynvml.nvmlMemory_v2),
        pynvml.c_nvmlMemory_v2_t,
    ),
    "nvmlDeviceGetComputeRunningProcesses": (
        lambda: NVML.nvmlDeviceGetComputeRunningProcesses(Handle(PLAIN))[0],
        pynvml.c_nvmlProcessInfo_v3_t,
    ),
    "nvmlDeviceGetProcessUtilization": (
        lambda: NVML.nvmlDeviceGetProcessUtilization(Handle(PLAIN), 0)[0],
        pynvml.c_nvmlProcessUtilizationSample_t,
    ),
    "nvmlGpmQueryDeviceSupport": (lambda: NVML.nvmlGpmQueryDeviceSupport(Handle(PLAIN)), pynvml.c_nvmlGpmSupport_t),
}


@pytest.mark.parametrize("name", RECORDS)
def test_each_record_has_only_real_fields(name: str) -> None:
    answer, real = RECORDS[name]
    record: SimpleNamespace = answer()
    assert vars(record) and set(vars(record)) <= fields(real)


def test_an_xid_event_has_only_real_fields() -> None:
    nvml = FakeNvml([FakeGpu(0)])
    nvml.xid(0, 79)
    event = nvml.nvmlEventSetWait_v2(nvml.nvmlEventSetCreate(), 1000)
    assert set(vars(event)) <= fields(pynvml.c_nvmlEventData_t)
