"""The emulator over HTTP and the operator's own Kubernetes facade pointed at it."""

from __future__ import annotations

import pytest
from kubernetes import config

from gpuwise.operator.kube import Kube
from tests.integration.conftest import cluster, emulator  # noqa: F401 - the same fixtures as the integration tests
from tests.support.emulator import EmulatorThread


@pytest.fixture
def kube(emulator: EmulatorThread) -> Kube:  # noqa: F811 - the fixture imported above
    return Kube(config.new_client_from_config(config_file=str(emulator.kubeconfig)))
