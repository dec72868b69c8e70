"""The `gpuwise` command: one entry point, one verb per component.

Each verb lives in its own module and is imported only when asked for, so `gpuwise sidecar`
never pays for kopf or pydantic, and `gpuwise crd` never starts an event loop.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

# verb -> (module with a `main(argv) -> int`, one-line help)
VERBS: dict[str, tuple[str, str]] = {
    "operator": ("gpuwise.operator.operator_command", "run the Kubernetes operator"),
    "sidecar": ("gpuwise.sidecar.sidecar_command", "run the telemetry exporter next to a training pod"),
    "run": ("gpuwise.local.run_command", "run a training command locally with telemetry and a report"),
    "crd": ("gpuwise.api.crd", "print the TrainingJob CustomResourceDefinition"),
    "simulate": ("gpuwise.simulate.simulate_command", "replay a cluster trace through the planners"),
    "diagnose": ("gpuwise.diagnose_command", "diagnose running jobs from a Prometheus server"),
}


def _usage() -> str:
    width = max(map(len, VERBS))
    lines = [f"  {verb.ljust(width)}  {help_}" for verb, (_, help_) in VERBS.items()]
    return "usage: gpuwise <verb> [options]\n\nverbs:\n" + "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help"}:
        sys.stdout.write(_usage())
        return 0
    verb, rest = args[0], args[1:]
    if verb not in VERBS:
        sys.stderr.write(f"gpuwise: unknown verb {verb!r}\n\n{_usage()}")
        return 2
    module_name = VERBS[verb][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise
        sys.stderr.write(f"gpuwise {verb}: not available in this version yet\n")
        return 2
    code: int = module.main(rest)
    return code


if __name__ == "__main__":
    sys.exit(main())
