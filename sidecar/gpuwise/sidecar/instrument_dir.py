"""Put the training-side instrumentation where the trainer's Python will find it.

The sidecar shares a volume with the trainer; it copies the pure-Python `gpuwise.instrument`
package, `gpuwise.wiring` (the names it reads) and the activating `sitecustomize.py` there, and
the operator puts that directory first on the trainer's PYTHONPATH. So the trainer's image needs
no gpuwise installed, and the instrumentation always matches the sidecar that receives it.
`gpuwise` stays a namespace package (no `__init__.py`) so it merges with any installed gpuwise.
Each file is written to a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import gpuwise.instrument
import gpuwise.wiring

SITECUSTOMIZE = "_sitecustomize.py"


def install(target: Path) -> list[Path]:
    """Copy the instrumentation into `target`; return the files written."""
    package = Path(gpuwise.instrument.__file__).parent
    plan = {target / "gpuwise" / "instrument" / source.name: source for source in sorted(package.glob("*.py"))}
    plan[target / "gpuwise" / "wiring.py"] = Path(gpuwise.wiring.__file__)
    plan[target / "sitecustomize.py"] = package / SITECUSTOMIZE
    for destination, source in plan.items():
        _write(destination, source.read_bytes())
    return list(plan)


def _write(destination: Path, data: bytes) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=destination.parent, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, destination)
    except BaseException:
        os.unlink(temporary)
        raise
