"""Who this sidecar reports for: pod, namespace, node, TrainingJob, worker and GPU container.

The operator sets these from the downward API (names in `gpuwise.wiring`); outside Kubernetes
only the host name is known. They become labels, and an empty one is simply left out. The
container (the one the pod's GPUs work for) is set only where the operator knows it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from gpuwise import wiring


@dataclass(frozen=True, slots=True)
class Identity:
    hostname: str
    namespace: str = ""
    pod: str = ""
    trainingjob: str = ""
    worker: str = ""
    container: str = ""

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Identity:
        return cls(
            hostname=environ.get(wiring.ENV_NODE_NAME) or socket.gethostname(),
            namespace=environ.get(wiring.ENV_POD_NAMESPACE, ""),
            pod=environ.get(wiring.ENV_POD_NAME, ""),
            trainingjob=environ.get(wiring.ENV_TRAININGJOB, ""),
            worker=environ.get(wiring.ENV_WORKER_INDEX, ""),
            container=environ.get(wiring.ENV_CONTAINER, ""),
        )
