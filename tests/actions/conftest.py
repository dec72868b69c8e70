"""The emulator over HTTP and the operator's own Kubernetes facade pointed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import config

from gpuwise.operator.kube import Kube
from tests.integration.conftest import Cluster
from tests.support.emulator import EmulatorThread


@pytest.fixture
def emulator() -> Iterator[EmulatorThread]:
    thread = EmulatorThread().start()
    yield thread
    thread.stop()


@pytest.fixture
def kube(emulator: EmulatorThread) -> Kube:
    return Kube(config.new_client_from_config(config_file=str(emulator.kubeconfig)))


@pytest.fixture
def cluster(emulator: EmulatorThread) -> Cluster:
    """The emulator as a kubectl-like client sees it (for tests that also run the operator)."""
    return Cluster(emulator)
