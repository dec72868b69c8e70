"""The emulator over HTTP, the operator's own Kubernetes facade pointed at it, and the Events
that the code under test posts through kopf (collected here, as no kopf operator runs)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import kopf
import pytest
from kopf._core.engines import posting
from kubernetes import config

from gpuwise.kube.client import Kube
from tests.act import cycles
from tests.act.scenario import Trainer
from tests.integration.conftest import cluster, emulator  # noqa: F401 - the same fixtures as the integration tests
from tests.support.emulator import EmulatorThread
from tests.support.prometheus import Prometheus, scraping


@pytest.fixture
def kube(emulator: EmulatorThread) -> Kube:  # noqa: F811 - the fixture imported above
    return Kube(config.new_client_from_config(config_file=str(emulator.kubeconfig)))


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """The Prometheus of `tests.act.cycles`, scraping what its tests' sidecars would export; a test
    module that defines its own `prometheus` (a scenario's fleet) uses that one instead."""
    with scraping(tmp_path_factory.mktemp("prometheus"), cycles.exposition) as server:
        yield server


@pytest.fixture
def trainer(light: tuple[Prometheus, Trainer]) -> Iterator[Trainer]:
    """The worker of a scenario module's `light` job (scenario.light_telemetry), reset after a test."""
    yield light[1]
    light[1].request_file.write_text("")  # the next test's job starts without a pending request


@pytest.fixture(autouse=True)
async def events() -> AsyncIterator[asyncio.Queue[posting.K8sEvent]]:
    """The Events the runner posts (kopf.info / kopf.warn), collected instead of sent."""
    queue: asyncio.Queue[posting.K8sEvent] = asyncio.Queue()
    loop_token = posting.event_queue_loop_var.set(asyncio.get_running_loop())
    queue_token = posting.event_queue_var.set(queue)
    settings_token = posting.settings_var.set(kopf.OperatorSettings())
    yield queue
    posting.settings_var.reset(settings_token)
    posting.event_queue_var.reset(queue_token)
    posting.event_queue_loop_var.reset(loop_token)


def told(queue: asyncio.Queue[posting.K8sEvent]) -> list[tuple[str, str, str]]:
    """(type, reason, message) of every Event posted since the last look."""
    posted = []
    while not queue.empty():
        event = queue.get_nowait()
        posted.append((event.type, event.reason, event.message))
    return posted


def drained(queue: asyncio.Queue[posting.K8sEvent]) -> list[tuple[str, str]]:
    """(type, reason) of every Event posted since the last look."""
    return [(kind, reason) for kind, reason, _ in told(queue)]
