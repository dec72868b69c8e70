"""gpuwise's sitecustomize: turn step instrumentation on, then run the sitecustomize it shadows.

The sidecar copies this file to `sitecustomize.py` at the front of the trainer's PYTHONPATH.
Python imports only the first `sitecustomize` on sys.path, so this one hands over to the next one
(the image's, a virtualenv's, a distribution's): without that the trainer would silently lose it.
Only the directories *after* this file's own are searched, so two copies cannot loop.
"""

from __future__ import annotations

import os
import sys


def _activate() -> None:
    try:
        from gpuwise.instrument import boot

        boot.activate()
    except Exception as exc:  # the trainer must start, instrumented or not
        sys.stderr.write(f"gpuwise: instrumentation is off: {exc!r}\n")


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.realpath(__file__))
    entries = [os.path.realpath(entry or os.curdir) for entry in sys.path]
    rest = sys.path[entries.index(here) + 1 :] if here in entries else sys.path
    rest = [entry for entry in rest if os.path.realpath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec(__name__, rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[__name__] = module
    spec.loader.exec_module(module)


if __name__ == "sitecustomize":
    _activate()
    _chain()
