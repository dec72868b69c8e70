"""`gpuwise sidecar` as the operator runs it: arguments, start-up, readiness, environment."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwise.sidecar import sidecar_command as sidecar_main
from tests.sidecar.support import ROOT, environment, sidecar, value
from tests.support.waiting import get


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backend", "nvml", "--gpus", "2"], "--gpus only apply to --backend simulated"),
        (["--backend", "simulated", "--gpus", "0"], "--gpus must be between 1 and 64, not 0"),
        (["--backend", "simulated", "--interval", "0.01"], "--interval must be between 0.1 and 3600 seconds"),
        (["--interval", "soon"], "argument --interval: invalid float value: 'soon'"),
        (["--port", "70000"], "--port must be between 0 and 65535"),
        (["--backend", "cuda"], "argument --backend: invalid choice: 'cuda'"),
        (["--backend", "simulated", "--trace", "t.jsonl", "--scenario", "idle"], "--trace replays its own GPUs"),
        (["--backend", "nvml", "--model", "L4"], "--model only apply to --backend simulated"),
        (["--backend", "simulated", "--model", "T4"], "argument --model: invalid choice: 'T4'"),
    ],
)
def test_bad_arguments_say_what_to_fix(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        sidecar_main.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_nvml_without_a_gpu_fails_clearly(short_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import gpu_available

    if gpu_available():
        pytest.skip("a GPU is present")
    assert sidecar_main.main(["--socket", str(short_tmp / "s.sock"), "--port", "0", "--address", "127.0.0.1"]) == 1
    assert "use --backend simulated" in capsys.readouterr().err


def test_a_busy_port_fails_clearly(short_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        argv = [
            "--backend",
            "simulated",
            "--address",
            "127.0.0.1",
            "--port",
            str(port),
            "--socket",
            str(short_tmp / "s.sock"),
        ]
        assert sidecar_main.main(argv) == 1
    assert "cannot start" in capsys.readouterr().err


def test_ready_only_with_instrumentation_and_socket_in_place(short_tmp: Path) -> None:
    env = environment(
        GPUWISE_POD_NAME="train-0",
        GPUWISE_POD_NAMESPACE="ml",
        GPUWISE_NODE_NAME="gpu-node-7",
        GPUWISE_TRAININGJOB="resnet",
        GPUWISE_WORKER_INDEX="2",
        GPUWISE_CONTAINER="trainer",
    )
    with sidecar(short_tmp, "--backend", "simulated", "--gpus", "8", env=env) as side:
        assert (side.instrument_dir / "sitecustomize.py").is_file()
        assert side.socket.is_socket()
        assert get(f"{side.url}/healthz") == (200, "ok\n")
        series = side.scrape()
    util = [s for s in series if s.name == "DCGM_FI_DEV_GPU_UTIL"]
    assert len(util) == 8
    assert {(s.labels["Hostname"], s.labels["pod"], s.labels["namespace"], s.labels["container"]) for s in util} == {
        ("gpu-node-7", "train-0", "ml", "trainer")
    }
    info = value(series, "gpuwise_sidecar_info", backend="simulated", trainingjob="resnet", worker="2")
    assert info == 1
    assert not side.socket.exists(), "the socket is removed on SIGTERM"
    assert side.process.returncode == 0


def test_the_cli_entry_point_dispatches_the_verb() -> None:
    command = [sys.executable, "-m", "gpuwise.cli", "sidecar", "--help"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 0
    assert "--instrument-dir" in result.stdout and "--interval" in result.stdout


def test_healthz_says_starting_until_ready() -> None:
    from prometheus_client.registry import CollectorRegistry

    from gpuwise.sidecar.server import MetricsServer

    ready = [False]
    server = MetricsServer(CollectorRegistry(), "127.0.0.1", 0, lambda: ready[0])
    server.start()
    try:
        assert get(f"http://127.0.0.1:{server.port}/healthz") == (503, "starting\n")
        ready[0] = True
        assert get(f"http://127.0.0.1:{server.port}/healthz") == (200, "ok\n")
    finally:
        server.stop()


def test_an_unwritable_instrument_dir_fails_clearly(short_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = short_tmp / "file"
    blocker.write_text("")
    argv = ["--backend", "simulated", "--address", "127.0.0.1", "--port", "0"]
    argv += ["--socket", str(short_tmp / "s.sock"), "--instrument-dir", str(blocker / "python")]
    assert sidecar_main.main(argv) == 1
    assert "cannot start" in capsys.readouterr().err
