"""The checkpoint acknowledgements as the operator sees them: a real sidecar's /metrics."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

from gpuwise.instrument import wire
from gpuwise.instrument.checkpoint import Checkpoints
from gpuwise.instrument.sender import Sender
from gpuwise.sidecar.checkpoints import MAX_PATH, MAX_REQUESTS, CheckpointAcks
from tests.sidecar.support import Series, environment, select, sidecar
from tests.support.waiting import eventually, get

ACK = "gpuwise_checkpoint_ack_timestamp_seconds"
JOB = {"namespace": "research", "pod": "llama-0-x7k2p", "trainingjob": "llama", "worker": "0"}


def test_the_sidecar_exports_the_latest_acknowledgements(short_tmp: Path) -> None:
    labels = {
        "GPUWISE_POD_NAMESPACE": "research",
        "GPUWISE_POD_NAME": "llama-0-x7k2p",
        "GPUWISE_TRAININGJOB": "llama",
        "GPUWISE_WORKER_INDEX": "0",
    }
    with (
        sidecar(short_tmp, "--backend", "simulated", env=environment(**labels)) as side,
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as raw,
    ):
        # The training library answers a request through the step socket.
        file = short_tmp / "checkpoint-request"
        file.write_text("resize-0")
        requests = Checkpoints(str(file), Sender(str(side.socket)).send, print, local_rank=0, rank=0)
        requests.callback = lambda request_id: "/ckpt/step-00000400.pt"
        before = time.time()
        requests.poll()
        answered = eventually(lambda: select(side.scrape(), ACK, request_id="resize-0"), timeout=10)
        assert answered[0].labels == {**JOB, "request_id": "resize-0", "path": "/ckpt/step-00000400.pt"}
        assert before <= answered[0].value <= time.time()

        def send(ack: wire.CheckpointAck) -> None:
            raw.sendto(wire.encode_ack(ack), str(side.socket))

        send(wire.CheckpointAck(7, 0, 0, "resize-0", ""))  # answered again: the first time stays
        send(wire.CheckpointAck(8, 1, 1, "rank-1-only", ""))  # local rank 1 does not answer for the worker
        raw.sendto(wire.encode_ack(wire.CheckpointAck(7, 0, 0, "bad-length", ""))[:-2], str(side.socket))
        for number in range(1, MAX_REQUESTS + 2):
            send(wire.CheckpointAck(7, 0, 0, f"resize-{number}", "/ckpt"))

        def settled() -> list[Series] | None:
            series = side.scrape()
            return series if select(series, ACK, request_id=f"resize-{MAX_REQUESTS + 1}") else None

        series = eventually(settled, timeout=10)
        kept = sorted(int(s.labels["request_id"].split("-")[1]) for s in select(series, ACK))
        assert kept == list(range(2, MAX_REQUESTS + 2)), "only the latest requests are kept"
        assert select(series, ACK, request_id="rank-1-only") == []
        assert select(series, "gpuwise_step_events_dropped_total", reason="malformed")[0].value == 1

        if shutil.which("promtool"):
            _, text = get(f"{side.url}/metrics")
            family = re.search(rf"(?ms)^# HELP {ACK} .*?(?=^# HELP )", text)
            assert family is not None
            check = subprocess.run(
                ["promtool", "check", "metrics"], input=family[0], capture_output=True, text=True, check=False
            )
            assert (check.returncode, check.stdout + check.stderr) == (0, "")


def test_an_acknowledgement_keeps_its_first_path_and_no_path_too_long_to_be_whole() -> None:
    acks = CheckpointAcks()
    assert acks.record(wire.CheckpointAck(7, 0, 0, "a", "/ckpt/a.pt"), now=10.0)
    assert not acks.record(wire.CheckpointAck(9, 0, 0, "a", "/ckpt/other.pt"), now=20.0), "a restarted process"
    assert acks.record(wire.CheckpointAck(7, 0, 0, "b", "/x" * MAX_PATH), now=30.0)
    assert acks.latest() == [("a", 10.0, "/ckpt/a.pt"), ("b", 30.0, "")], "a cut path would name another file"
