"""The operator's half of the checkpoint handshake: ask every worker to checkpoint, see the answer.

- **Request**: the pod annotation `gpuwise.io/checkpoint-request: <request id>` on every worker
  pod. The injected sidecar setup projects it (downward API) into the trainer as the file named by
  `GPUWISE_CHECKPOINT_REQUEST_FILE`; the kubelet refreshes such files within about a minute, so
  `spec.checkpoint.timeoutSeconds` must allow for that on top of the time a checkpoint takes.
- **Acknowledgement**: the training process (gpuwise.instrument) checkpoints at a step boundary
  and tells its sidecar, which exports `gpuwise_checkpoint_ack_timestamp_seconds{request_id, path}`
  (the checkpoint's path when the trainer gave one: the restarted trainer gets it as
  GPUWISE_RESUME_FROM).
  Worker 0 holds global rank 0, which writes the checkpoint in the usual torch.distributed
  pattern, so its acknowledgement is the one that counts.
- One Prometheus query per cycle answers for every job waiting (`Acks`).

No acknowledgement, no restart: the runner fails the action with `CheckpointTimeout`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpuwise import wiring
from gpuwise.act.measure import PerCycle
from gpuwise.kube.client import Kube
from gpuwise.metrics import catalog
from gpuwise.metrics.promql import sel
from gpuwise.prometheus.client import Prometheus
from gpuwise.prometheus.labels import JobKey, job_key

ACK_WORKER: Final = "0"
_ACKS_OF_WORKER_0: Final = sel(catalog.CHECKPOINT_ACK, f'worker="{ACK_WORKER}"')
ACK_QUERY: Final = f"max by (namespace, trainingjob, request_id, path) ({_ACKS_OF_WORKER_0})"


@dataclass(frozen=True, slots=True)
class Ack:
    """Worker 0's acknowledgement of a checkpoint request: when, and the checkpoint's path ("": none given)."""

    at: float
    path: str = ""


def _pending(pod: Mapping[str, Any]) -> str | None:
    value: str | None = (pod.get("metadata", {}).get("annotations") or {}).get(wiring.ANNOTATION_CHECKPOINT_REQUEST)
    return value


def _live(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [p for p in pods if not p.get("metadata", {}).get("deletionTimestamp")]


async def request(kube: Kube, pods: Sequence[Mapping[str, Any]], request_id: str) -> int:
    """Annotate every live worker pod that does not carry `request_id` yet; how many were patched."""
    patch = {"metadata": {"annotations": {wiring.ANNOTATION_CHECKPOINT_REQUEST: request_id}}}
    todo = [p["metadata"] for p in _live(pods) if _pending(p) != request_id]
    for meta in todo:
        await kube.patch("v1", "Pod", meta["namespace"], meta["name"], patch)
    return len(todo)


async def withdraw(kube: Kube, pods: Sequence[Mapping[str, Any]], request_id: str) -> None:
    """Remove the request from the pods still carrying it: the trainer stops waiting for it."""
    patch = {"metadata": {"annotations": {wiring.ANNOTATION_CHECKPOINT_REQUEST: None}}}
    for pod in _live(pods):
        if _pending(pod) == request_id:
            await kube.patch("v1", "Pod", pod["metadata"]["namespace"], pod["metadata"]["name"], patch)


class Acks:
    """Every worker-0 acknowledgement Prometheus holds, read at most once per cycle."""

    def __init__(self, source: Prometheus, cycle_seconds: float) -> None:
        self.source = source
        self._answers = PerCycle(self._read, cycle_seconds)

    async def _read(self) -> dict[JobKey, dict[str, Ack]]:
        result = await asyncio.to_thread(self.source.instant, ACK_QUERY, time.time())
        acks: dict[JobKey, dict[str, Ack]] = {}
        for sample in result:
            labels = sample["metric"]
            ack = Ack(float(sample["value"][1]), labels.get("path", ""))
            known = acks.setdefault(job_key(labels), {})
            request = labels.get("request_id", "")
            # Re-sent after a sidecar restart: the latest; in the same second, the same one whatever
            # order the series come in.
            if request not in known or (known[request].at, known[request].path) < (ack.at, ack.path):
                known[request] = ack
        return acks

    async def acknowledged(self, namespace: str, name: str, request_id: str) -> Ack | None:
        """Worker 0's acknowledgement of `request_id`, or None."""
        return (await self._answers.get()).get((namespace, name), {}).get(request_id)

    @property
    def fetches(self) -> int:
        return self._answers.fetches
