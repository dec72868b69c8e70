"""`gpuwise sidecar`: the telemetry exporter that runs next to a training pod.

    gpuwise sidecar --backend nvml --port 9400 --socket /var/run/gpuwise/steps.sock \\
        --instrument-dir /var/run/gpuwise/python --interval 1 \\
        --pod-gpus-dir /var/run/gpuwise/pod-gpus --requested-gpus 2

Without `--pod-gpus-dir` it exports every GPU it sees; with it, only the pod's (see `pod_gpus`).

Exits 2 on bad arguments, 1 when it cannot start (the message says why), 0 on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from gpuwise import wiring
from gpuwise.sidecar.assembly import Sidecar
from gpuwise.sidecar.backend import Backend, BackendUnavailable
from gpuwise.sidecar.identity import Identity
from gpuwise.sidecar.pod_gpus import PodGpus
from gpuwise.sidecar.receiver import SocketPathError
from gpuwise.sidecar.scenarios import SCENARIOS
from gpuwise.sidecar.simulated import MODELS

log = logging.getLogger("gpuwise.sidecar")

MIN_INTERVAL = wiring.MIN_SAMPLE_INTERVAL_SECONDS
MAX_INTERVAL = wiring.MAX_SAMPLE_INTERVAL_SECONDS
MAX_GPUS = 64


def parser() -> argparse.ArgumentParser:
    default_interval = os.environ.get(wiring.ENV_SAMPLE_INTERVAL, "1")
    p = argparse.ArgumentParser(
        prog="gpuwise sidecar",
        description="Sample GPUs and training steps; serve them at /metrics for Prometheus.",
    )
    p.add_argument("--backend", choices=("nvml", "simulated"), default="nvml", help="where GPU samples come from")
    p.add_argument("--gpus", type=int, help="simulated: how many GPUs (default 1)")
    p.add_argument("--scenario", choices=sorted(SCENARIOS), help="simulated: what the GPUs do (default steady)")
    p.add_argument("--trace", type=Path, help="simulated: replay this trace (JSON Lines, or a gpuwise run report)")
    p.add_argument("--model", choices=sorted(MODELS), help="simulated: which GPU model (default H100)")
    p.add_argument("--seed", type=int, default=0, help="simulated: vary GPU identities and noise")
    p.add_argument("--interval", type=float, default=default_interval, help="seconds between samples (default 1)")
    p.add_argument("--address", default="0.0.0.0", help="address to serve /metrics on (default all)")
    p.add_argument("--port", type=int, default=wiring.METRICS_PORT, help=f"default {wiring.METRICS_PORT}")
    p.add_argument("--socket", type=Path, default=Path(wiring.STEP_SOCKET), help="unix socket for step events")
    p.add_argument("--instrument-dir", type=Path, help="copy the training instrumentation here at start-up")
    p.add_argument(
        "--pod-gpus-dir",
        type=Path,
        help="export only the GPUs the pod's trainers name in this directory (default: every GPU seen)",
    )
    p.add_argument(
        "--requested-gpus",
        type=int,
        help="with --pod-gpus-dir: the pod's nvidia.com/gpu; all the node's GPUs are the pod's when it has as many",
    )
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    return p


def check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject what argparse cannot: each message says what to change."""
    simulated_only = [
        flag
        for flag, value in (
            ("--gpus", args.gpus),
            ("--scenario", args.scenario),
            ("--trace", args.trace),
            ("--model", args.model),
        )
        if value is not None
    ]
    if args.backend != "simulated" and simulated_only:
        p.error(f"{', '.join(simulated_only)} only apply to --backend simulated; NVML reports the GPUs it finds")
    if args.trace is not None and (args.scenario is not None or args.gpus is not None):
        p.error("--trace replays its own GPUs and activity; drop --scenario/--gpus, or drop --trace")
    if args.gpus is not None and not 1 <= args.gpus <= MAX_GPUS:
        p.error(f"--gpus must be between 1 and {MAX_GPUS}, not {args.gpus}")
    if args.requested_gpus is not None and args.pod_gpus_dir is None:
        p.error("--requested-gpus only applies with --pod-gpus-dir, where trainers name the pod's GPUs")
    if args.requested_gpus is not None and not 1 <= args.requested_gpus <= MAX_GPUS:
        p.error(f"--requested-gpus must be between 1 and {MAX_GPUS}, not {args.requested_gpus}")
    if not MIN_INTERVAL <= args.interval <= MAX_INTERVAL:
        p.error(f"--interval must be between {MIN_INTERVAL} and {MAX_INTERVAL:g} seconds, not {args.interval:g}")
    if not 0 <= args.port <= 65535:
        p.error(f"--port must be between 0 and 65535, not {args.port}")


def make_backend(args: argparse.Namespace) -> Backend:
    if args.backend == "nvml":
        from gpuwise.sidecar.nvml import NvmlBackend

        return NvmlBackend()
    from gpuwise.sidecar import device_trace
    from gpuwise.sidecar.simulated import SimulatedBackend

    replay = device_trace.load(args.trace) if args.trace is not None else None
    model = MODELS[args.model or "H100"]
    return SimulatedBackend(args.scenario or "steady", args.gpus or 1, trace=replay, seed=args.seed, model=model)


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    check(p, args)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        backend = make_backend(args)
    except (BackendUnavailable, ValueError) as exc:
        sys.stderr.write(f"gpuwise sidecar: {exc}\n")
        return 1
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    try:
        sidecar = Sidecar(
            backend=backend,
            identity=Identity.from_environment(),
            socket_path=args.socket,
            interval=args.interval,
            instrument_path=args.instrument_dir,
            address=args.address,
            port=args.port,
            pod_gpus=PodGpus(args.pod_gpus_dir, args.requested_gpus) if args.pod_gpus_dir is not None else None,
        )
        sidecar.start()
    except (SocketPathError, OSError) as exc:
        backend.close()
        sys.stderr.write(f"gpuwise sidecar: cannot start: {exc}\n")
        return 1
    assert sidecar.server is not None
    log.info(
        "serving http://%s:%d/metrics; steps on %s; backend %s%s",
        args.address,
        sidecar.server.port,
        args.socket,
        backend.name,
        f" ({backend.scenario})" if backend.scenario else "",
    )
    stopping.wait()
    log.info("stopping")
    sidecar.stop()
    return 0
