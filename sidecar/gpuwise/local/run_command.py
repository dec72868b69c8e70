"""`gpuwise run`: run a training command with step instrumentation and an embedded sidecar.

    gpuwise run [--report out.html|out.json] [--prometheus-port 9400] [--simulate SCENARIO] -- python train.py

The command runs with the sidecar's `sitecustomize` first on its PYTHONPATH (exactly as in a
pod), its steps arrive on a private socket, GPUs are sampled through NVML when there are any, and
a live view shows it all. At exit a report is written and the command's exit code returned.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

from gpuwise.sidecar.scenarios import SCENARIOS


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpuwise run",
        description="Run a training command with gpuwise telemetry; show it live and write a report.",
        epilog="example: gpuwise run --report run.html -- python train.py --epochs 1",
    )
    p.add_argument(
        "--report",
        type=Path,
        action="append",
        default=[],
        help="write a report here at exit: JSON if it ends in .json, else HTML (may be repeated)",
    )
    p.add_argument("--prometheus-port", type=int, help="also serve /metrics on 127.0.0.1:PORT while it runs")
    p.add_argument("--simulate", choices=sorted(SCENARIOS), metavar="SCENARIO", help="simulate GPUs playing SCENARIO")
    p.add_argument("--gpus", type=int, default=1, help="how many GPUs --simulate models (default 1)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between GPU samples (default 1)")
    p.add_argument("--no-live", action="store_true", help="no live view, even on a terminal")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the training command, after --")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the command to run after --, e.g. gpuwise run -- python train.py")
    if args.prometheus_port is not None and not 0 <= args.prometheus_port <= 65535:
        p.error(f"--prometheus-port must be between 0 and 65535, not {args.prometheus_port}")
    if not 0.1 <= args.interval <= 60:
        p.error(f"--interval must be between 0.1 and 60 seconds, not {args.interval:g}")
    if not 1 <= args.gpus <= 64:
        p.error(f"--gpus must be between 1 and 64, not {args.gpus}")
    if importlib.util.find_spec("rich") is None:
        sys.stderr.write("gpuwise run: needs the 'rich' package: pip install 'gpuwise[local]'\n")
        return 2
    from gpuwise.local import session

    return session.run(args, command)


if __name__ == "__main__":
    sys.exit(main())
