"""The emulator over HTTP and the operator's own Kubernetes facade pointed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import config

from gpuwise.kube.client import Kube
from tests.act.scenario import Trainer
from tests.integration.conftest import cluster, emulator  # noqa: F401 - the same fixtures as the integration tests
from tests.support.emulator import EmulatorThread
from tests.support.prometheus import Prometheus


@pytest.fixture
def kube(emulator: EmulatorThread) -> Kube:  # noqa: F811 - the fixture imported above
    return Kube(config.new_client_from_config(config_file=str(emulator.kubeconfig)))


@pytest.fixture
def trainer(light: tuple[Prometheus, Trainer]) -> Iterator[Trainer]:
    """The worker of a scenario module's `light` job (scenario.light_telemetry), reset after a test."""
    yield light[1]
    light[1].request_file.write_text("")  # the next test's job starts without a pending request
