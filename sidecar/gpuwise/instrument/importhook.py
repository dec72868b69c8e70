"""Run a callback right after a module is first imported, without importing it ourselves.

The sitecustomize runs before the training script, usually before `import torch`; importing
torch eagerly would cost seconds in processes that never use it (torchrun's launcher, data
tools). A one-shot meta-path finder waits for the import instead, lets the real finder locate
the module, and wraps that spec's loader so the callback runs once the module is complete.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from gpuwise.instrument import runtime


class _Watcher(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self._name = name
        self._callback = callback

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self._name:
            return None
        # One shot: step aside so that find_spec below asks the real finders.
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module
        callback = self._callback

        def exec_and_notify(module: ModuleType) -> None:
            exec_module(module)
            _notify(callback, module)

        try:
            # On the instance only: the loader keeps its type, which other tools check.
            spec.loader.exec_module = exec_and_notify  # type: ignore[method-assign]
        except AttributeError:
            runtime.warn(f"cannot watch the import of {fullname}; it is not instrumented")
        return spec


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call `callback(module)` once `name` is imported: now if it already is, else afterwards."""
    module = sys.modules.get(name)
    if module is not None:
        _notify(callback, module)
    else:
        sys.meta_path.insert(0, _Watcher(name, callback))


def _notify(callback: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        callback(module)
    except Exception as exc:  # instrumentation must never break the program's imports
        runtime.warn(f"instrumenting {module.__name__} failed: {exc!r}")
