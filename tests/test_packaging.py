"""The distribution: three source roots become one `gpuwise` package, and the image stays lean."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (path,) = out.glob("gpuwise-*.whl")
    return zipfile.ZipFile(path)


def test_wheel_merges_the_source_roots(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for module in (
        "gpuwise/cli.py",
        "gpuwise/wiring.py",
        "gpuwise/api/trainingjob.py",
        "gpuwise/operator/operator_command.py",
        "gpuwise/kube/client.py",
        "gpuwise/prometheus/batched.py",
        "gpuwise/hardware/mig_profiles.py",
        "gpuwise/sidecar/sidecar_command.py",
        "gpuwise/instrument/__init__.py",
    ):
        assert module in names, module
    assert not any(name.startswith(("operator/", "sidecar/", "core/", "tests/")) for name in names)
    assert "gpuwise/__init__.py" not in names, "gpuwise is a namespace package across three roots"
    entry_points = wheel.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "gpuwise = gpuwise.cli:main" in entry_points


def test_wheel_does_not_need_torch(wheel: zipfile.ZipFile) -> None:
    metadata = wheel.read(next(n for n in wheel.namelist() if n.endswith("METADATA"))).decode()
    required = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert required and not any("torch" in line for line in required)


def test_stdlib_operator_is_never_shadowed() -> None:
    # Run from the repository root, where a top-level operator/ directory sits on sys.path[0].
    out = subprocess.run(
        [sys.executable, "-c", "import operator; print(operator.__file__)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert not out.stdout.strip().startswith(str(ROOT))


def test_dockerfile_is_multi_stage_non_root_and_torch_free() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    lines = [line.strip() for line in dockerfile.splitlines() if line.strip() and not line.startswith("#")]
    assert sum(line.startswith("FROM ") for line in lines) == 2
    final_stage = lines[max(i for i, line in enumerate(lines) if line.startswith("FROM ")) :]
    user = next(line for line in final_stage if line.startswith("USER "))
    assert user.split()[1].split(":")[0] not in {"0", "root"}
    assert 'ENTRYPOINT ["gpuwise"]' in final_stage
    assert "torch" not in " ".join(line for line in lines if "pip install" in line)
