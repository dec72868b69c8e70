"""A job's telemetry for real: a simulated-GPU sidecar, a process reporting steps, Prometheus scraping.

The trainer waits 30 ms for each batch and computes for 10 ms: an input-bound loop, which the
efficiency engine should diagnose from what Prometheus stores.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.sidecar.support import ROOT, environment, sidecar
from tests.support.prometheus import Prometheus, running
from tests.support.waiting import eventually

INPUT_BOUND_TRAINER = textwrap.dedent(
    """
    import time
    from gpuwise import instrument
    while True:
        with instrument.data_wait():
            time.sleep(0.03)
        time.sleep(0.01)
        instrument.step_end(samples=16)
    """
)


@contextmanager
def input_bound_job(
    tmp: Path, *, namespace: str, trainingjob: str, pod: str, settle: float = 8.0, scenario: str = "data-starved"
) -> Iterator[Prometheus]:
    """Yield a Prometheus that has scraped `settle` seconds of the job's sidecar (its GPUs playing `scenario`)."""
    labels = {
        "GPUWISE_POD_NAME": pod,
        "GPUWISE_POD_NAMESPACE": namespace,
        "GPUWISE_TRAININGJOB": trainingjob,
        "GPUWISE_WORKER_INDEX": "0",
    }
    args = ("--backend", "simulated", "--gpus", "2", "--scenario", scenario, "--interval", "0.5")
    with sidecar(tmp, *args, env=environment(**labels)) as side:
        trainer = subprocess.Popen(
            [sys.executable, "-c", INPUT_BOUND_TRAINER], env=side.trainer_env("manual"), cwd=ROOT
        )
        config = {
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": "gpuwise-sidecar",
                    "honor_labels": True,
                    "static_configs": [{"targets": [f"127.0.0.1:{side.port}"]}],
                }
            ],
        }
        try:
            with running(tmp, config) as server:
                eventually(lambda: server.query("gpuwise_data_wait_ratio"), timeout=30, what="step metrics")
                time.sleep(settle)
                yield server
        finally:
            trainer.terminate()
            trainer.wait(timeout=10)
