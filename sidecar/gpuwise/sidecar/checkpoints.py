"""The checkpoint acknowledgements a worker's training processes sent, for the operator to see.

The operator restarts a job only once Prometheus shows that worker 0 acknowledged its checkpoint
request (`gpuwise_checkpoint_ack_timestamp_seconds{request_id=...}`). Worker 0 holds global rank 0,
and on every worker the process that counts is local rank 0: under torchrun it is the worker's
first rank (on worker 0, rank 0, the one that saves in `if rank == 0: torch.save(...)`), and with
a callback every rank answers, so waiting for local rank 0 never restarts a job whose rank 0 is
still writing. Answers from other local ranks are logged and otherwise ignored.

A request is answered once; a repeated answer (a restarted process reading the same request)
keeps the first time and path. The path the trainer gave (if any) goes with the acknowledgement,
unless longer than `MAX_PATH` (cut, it would name another file): the operator hands it to the
restarted trainer as GPUWISE_RESUME_FROM. Only the latest `MAX_REQUESTS` requests are kept: the
operator waits for one request at a time per job, and the series must not grow with the job's
history.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Final

from gpuwise.instrument.wire import CheckpointAck

log = logging.getLogger(__name__)

MAX_REQUESTS: Final = 8
# A longer path is no path: cut, it would name another file.
MAX_PATH: Final = 1024
# The training process whose answer stands for the worker's.
ANSWERING_LOCAL_RANK: Final = 0


class CheckpointAcks:
    def __init__(self, limit: int = MAX_REQUESTS) -> None:
        self._lock = threading.Lock()
        self._limit = limit
        self._acknowledged: OrderedDict[str, tuple[float, str]] = OrderedDict()  # request -> (time, path)
        self._logged: OrderedDict[tuple[str, int], None] = OrderedDict()  # (request, local rank) said once

    def record(self, ack: CheckpointAck, now: float) -> bool:
        """Note `ack`, received at unix time `now`; True when it acknowledged a request for the first time.

        The path is the trainer's text: it is logged quoted (a newline in it cannot make a log line
        of its own), and each request and local rank is logged once, however often it is repeated.
        """
        where = f" at {ack.path!r}" if ack.path else ""
        with self._lock:
            first = (ack.request_id, ack.local_rank) not in self._logged
            if first:
                self._logged[ack.request_id, ack.local_rank] = None
                while len(self._logged) > self._limit:
                    self._logged.popitem(last=False)
            if ack.local_rank != ANSWERING_LOCAL_RANK or ack.request_id in self._acknowledged:
                acknowledged = False
            else:
                acknowledged = True
                self._acknowledged[ack.request_id] = (now, ack.path if len(ack.path) <= MAX_PATH else "")
                while len(self._acknowledged) > self._limit:
                    self._acknowledged.popitem(last=False)
        if acknowledged:
            log.info(
                "checkpoint request %s acknowledged by rank %d (pid %d)%s", ack.request_id, ack.rank, ack.pid, where
            )
        elif first and ack.local_rank != ANSWERING_LOCAL_RANK:
            log.info("checkpoint request %s: local rank %d saved%s", ack.request_id, ack.local_rank, where)
        return acknowledged

    def latest(self) -> list[tuple[str, float, str]]:
        """(request id, unix time of its acknowledgement, checkpoint path or ""), oldest first."""
        with self._lock:
            return [(request, at, path) for request, (at, path) in self._acknowledged.items()]
