"""Fixtures for running the real operator, over HTTP, against the Kubernetes emulator."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import config, dynamic

from tests.support.emulator import EmulatorThread


class Cluster:
    """The emulator plus a dynamic client to read and write it the way kubectl would."""

    def __init__(self, emulator: EmulatorThread) -> None:
        self.emulator = emulator
        self.client = dynamic.DynamicClient(config.new_client_from_config(config_file=str(emulator.kubeconfig)))

    def api(self, api_version: str, kind: str) -> Any:
        return self.client.resources.get(api_version=api_version, kind=kind)

    def get(self, api_version: str, kind: str, name: str, namespace: str = "default") -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.api(api_version, kind).get(name=name, namespace=namespace).to_dict()
        except dynamic.exceptions.NotFoundError:
            return None
        return found

    def list(self, api_version: str, kind: str, namespace: str | None = "default", **kw: Any) -> list[dict[str, Any]]:
        items = self.api(api_version, kind).get(namespace=namespace, **kw).items
        return [item.to_dict() for item in items]

    def create(self, body: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
        created: dict[str, Any] = (
            self.api(body["apiVersion"], body["kind"]).create(body=body, namespace=namespace).to_dict()
        )
        return created

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        body: dict[str, Any],
        *,
        status: bool = False,
        namespace: str = "default",
    ) -> None:
        api = self.api(api_version, kind)
        (api.status if status else api).patch(
            name=name, namespace=namespace, body=body, content_type="application/merge-patch+json"
        )

    def delete(self, api_version: str, kind: str, name: str, namespace: str = "default") -> None:
        self.api(api_version, kind).delete(name=name, namespace=namespace)

    def trainingjob(self, name: str) -> dict[str, Any] | None:
        return self.get("gpuwise.io/v1alpha1", "TrainingJob", name)

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        tj = self.trainingjob(name) or {}
        return next((c for c in (tj.get("status") or {}).get("conditions", []) if c["type"] == type_), None)


class Operator:
    """`gpuwise operator` as a separate process, the way it runs in a cluster."""

    def __init__(self, emulator: EmulatorThread, log_path: Any, extra_args: list[str]) -> None:
        self.emulator = emulator
        self.log_path = log_path
        self.extra_args = extra_args
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Operator:
        args = [
            sys.executable,
            "-m",
            "gpuwise.cli",
            "operator",
            "--verbose",
            "--resync-seconds=2",
            *self.extra_args,
        ]
        env = self.emulator.client_env()
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
        return self

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        return open(self.log_path, encoding="utf-8", errors="replace").read()


@pytest.fixture
def emulator() -> Iterator[EmulatorThread]:
    thread = EmulatorThread().start()
    yield thread
    thread.stop()


@pytest.fixture
def cluster(emulator: EmulatorThread) -> Cluster:
    return Cluster(emulator)


@pytest.fixture
def operator_args() -> list[str]:
    return []


@pytest.fixture
def operator(emulator: EmulatorThread, tmp_path: Any, operator_args: list[str]) -> Iterator[Operator]:
    running = Operator(emulator, tmp_path / "operator.log", operator_args).start()
    yield running
    running.stop()
    if os.environ.get("GPUWISE_SHOW_OPERATOR_LOG"):
        sys.stderr.write(running.log())
