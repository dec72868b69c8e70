"""The copied instrumentation and its sitecustomize, in fresh interpreters."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from gpuwise.sidecar import instrument_dir
from tests.sidecar.support import ROOT, environment

REPORT = textwrap.dedent(
    """
    import sys
    expected = sys.stdlib_module_names | {"gpuwise", "sitecustomize", "_distutils_hack", "__main__"}
    new = [m for m in sys.modules if m.split(".")[0] not in expected]
    instrument = sys.modules.get("gpuwise.instrument")
    print(repr({
        "third_party": sorted(new),
        "instrument_from": getattr(instrument, "__file__", None),
        "chained": getattr(sys.modules.get("sitecustomize"), "CHAINED", 0),
    }))
    """
)


def run(pythonpath: list[Path], **env: str) -> tuple[dict[str, object], str]:
    result = subprocess.run(
        [sys.executable, "-c", REPORT],
        env=environment(PYTHONPATH=":".join(map(str, pythonpath)), **env),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return eval(result.stdout), result.stderr


def other_sitecustomize(where: Path) -> Path:
    where.mkdir()
    (where / "sitecustomize.py").write_text(
        "import builtins\nbuiltins.CHAINED = getattr(builtins, 'CHAINED', 0) + 1\nCHAINED = builtins.CHAINED\n"
    )
    return where


def test_install_copies_a_namespace_package(short_tmp: Path) -> None:
    written = instrument_dir.install(short_tmp / "python")
    names = {path.relative_to(short_tmp / "python").as_posix() for path in written}
    assert {
        "sitecustomize.py",
        "gpuwise/wiring.py",
        "gpuwise/instrument/__init__.py",
        "gpuwise/instrument/wire.py",
    } <= names
    assert not (short_tmp / "python" / "gpuwise" / "__init__.py").exists()
    assert not list((short_tmp / "python").rglob("*.tmp"))


def test_activation_loads_the_copy_and_nothing_heavy(short_tmp: Path) -> None:
    target = short_tmp / "python"
    instrument_dir.install(target)
    report, stderr = run([target], GPUWISE_SOCKET=str(short_tmp / "s.sock"), GPUWISE_INSTRUMENT="auto")
    assert stderr == ""
    assert str(report["instrument_from"]).startswith(str(target))
    assert report["third_party"] == [], "no torch, numpy or anything else before the program imports it"


def test_it_hands_over_to_the_sitecustomize_it_shadows(short_tmp: Path) -> None:
    target = short_tmp / "python"
    instrument_dir.install(target)
    other = other_sitecustomize(short_tmp / "other")
    report, _ = run([target, other], GPUWISE_SOCKET=str(short_tmp / "s.sock"))
    assert report["chained"] == 1
    assert report["instrument_from"] is not None


def test_two_copies_on_the_path_chain_once_each(short_tmp: Path) -> None:
    first, second = short_tmp / "one", short_tmp / "two"
    instrument_dir.install(first)
    instrument_dir.install(second)
    other = other_sitecustomize(short_tmp / "other")
    report, _ = run([first, second, other, first], GPUWISE_SOCKET=str(short_tmp / "s.sock"))
    assert report["chained"] == 1


def test_a_broken_copy_still_starts_the_program_and_chains(short_tmp: Path) -> None:
    target = short_tmp / "python"
    instrument_dir.install(target)
    (target / "gpuwise" / "instrument" / "boot.py").write_text("raise ImportError('damaged')\n")
    other = other_sitecustomize(short_tmp / "other")
    report, stderr = run([target, other], GPUWISE_SOCKET=str(short_tmp / "s.sock"))
    assert "gpuwise: instrumentation is off: ImportError('damaged')" in stderr
    assert report["chained"] == 1


def test_the_sidecar_imports_nothing_it_must_not() -> None:
    code = (
        "import sys; import gpuwise.sidecar.sidecar_command, gpuwise.sidecar.nvml, gpuwise.sidecar.simulated\n"
        "import gpuwise.instrument\n"
        "print(' '.join(sorted(m for m in sys.modules)))"
    )
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
        ).stdout.split()
    )
    for forbidden in ("kopf", "kubernetes", "pydantic", "numpy", "torch", "rich", "aiohttp", "yaml"):
        assert not {m for m in loaded if m == forbidden or m.startswith(forbidden + ".")}, forbidden
    assert "prometheus_client" in loaded
