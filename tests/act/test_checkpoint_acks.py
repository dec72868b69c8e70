"""Only worker 0's acknowledgement lets a restart go on, as a real Prometheus holds the acks.

A job's every worker answers the checkpoint request, but only worker 0 (its local rank 0) saves the
checkpoint the job resumes from: an ack from another worker alone must never count (issue 23: a
mutant that accepted every worker's ack survived the scenarios).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwise.act.checkpoint import Ack, Acks
from gpuwise.prometheus.client import Prometheus as Source
from tests.support.prometheus import AVAILABLE, Prometheus, scraping
from tests.support.waiting import eventually

pytestmark = [pytest.mark.prometheus, pytest.mark.skipif(not AVAILABLE, reason="needs prometheus (make system-deps)")]

ACKS = [  # (job, worker, request id, unix time acknowledged, checkpoint path, pod's suffix)
    ("bert", 1, "only-worker-1", 1795000000, "/ckpt/w1.pt", "x"),
    ("bert", 0, "both", 1795000100, "/ckpt/step-400.pt", "x"),
    ("bert", 1, "both", 1795000050, "/ckpt/w1.pt", "x"),
    ("gpt", 0, "only-worker-1", 1795000200, "", "x"),
    # Worker 0's pod was replaced and its sidecar acknowledged again: the later ack is the one, and
    # two in the same second are told apart the same way whatever order the query returns them in.
    ("t5", 0, "resent", 1795000300, "/ckpt/step-900.pt", "x"),
    ("t5", 0, "resent", 1795000310, "/ckpt/step-910.pt", "y"),
    ("t5", 0, "resent", 1795000300, "/ckpt/step-901.pt", "z"),
    ("t5", 0, "same-second", 1795000400, "/ckpt/a.pt", "y"),
    ("t5", 0, "same-second", 1795000400, "/ckpt/b.pt", "x"),
]
EXPOSITION = b"# TYPE gpuwise_checkpoint_ack_timestamp_seconds gauge\n" + b"".join(
    f'gpuwise_checkpoint_ack_timestamp_seconds{{namespace="ml",pod="{job}-{worker}-{pod}",trainingjob="{job}",'
    f'worker="{worker}",request_id="{request}",path="{path}"}} {at}\n'.encode()
    for job, worker, request, at, path, pod in ACKS
)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    with scraping(tmp_path_factory.mktemp("prometheus"), lambda: EXPOSITION) as server:
        eventually(lambda: server.query("gpuwise_checkpoint_ack_timestamp_seconds"), what="the acks scraped")
        yield server


async def test_only_worker_0_acknowledges(prometheus: Prometheus, tmp_path: Path) -> None:
    acks = Acks(Source(prometheus.url), cycle_seconds=30)
    assert await acks.acknowledged("ml", "bert", "only-worker-1") is None, "worker 1 alone: no checkpoint to resume"
    assert await acks.acknowledged("ml", "bert", "both") == Ack(1795000100, "/ckpt/step-400.pt"), "worker 0's own"
    assert await acks.acknowledged("ml", "gpt", "only-worker-1") == Ack(1795000200, ""), "each job's own acks"
    assert await acks.acknowledged("ml", "bert", "never") is None
    assert await acks.acknowledged("ml", "t5", "resent") == Ack(1795000310, "/ckpt/step-910.pt"), "the latest"
    assert await acks.acknowledged("ml", "t5", "same-second") == Ack(1795000400, "/ckpt/b.pt")
    assert acks.fetches == 1, "one query a cycle, whatever is asked"
