"""The few Kubernetes API calls the operator makes itself, as coroutines over plain dicts.

kopf watches and patches the object a handler is called for; everything else (creating the Job,
patching a TrainingJob's status from a pod event) goes through here. It wraps the kubernetes
client's dynamic client — one code path for every resource kind, dicts in and out — and runs its
blocking calls in threads so the operator's event loop never waits on the network.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kubernetes
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ConflictError, NotFoundError, ResourceNotFoundError

JsonDict = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"


class ApiError(Exception):
    """The API server refused a request; `status` and `message` are its own."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class NoCluster(Exception):
    """Neither in a pod nor given a kubeconfig that works; the message says what to set."""


def connect() -> kubernetes.client.ApiClient:
    """A client configured the way kopf logs in: in-cluster first, then the kubeconfig."""
    try:
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        try:
            kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
        except (kubernetes.config.ConfigException, OSError) as exc:
            raise NoCluster(
                "no Kubernetes cluster to talk to: not running in a pod, and no usable kubeconfig "
                f"({exc}); set KUBECONFIG or write ~/.kube/config, or run the operator in the cluster"
            ) from exc
    return kubernetes.client.ApiClient()


def _message(exc: Exception) -> ApiError:
    status = int(getattr(exc, "status", 0) or 0)
    summary = getattr(exc, "summary", None)
    text = summary() if callable(summary) else str(exc)
    return ApiError(status, str(text))


class Kube:
    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self._api_client = api_client
        self._client: DynamicClient | None = None
        self._lock = asyncio.Lock()

    async def _resource(self, api_version: str, kind: str) -> Any:
        async with self._lock:  # discovery runs once, not once per concurrent caller
            if self._client is None:
                self._client = await asyncio.to_thread(DynamicClient, self._api_client)
        try:
            return self._client.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError as exc:  # a kind the cluster does not serve (a CRD not installed)
            raise ApiError(404, f"the API server serves no {api_version} {kind}") from exc

    @staticmethod
    async def _call(method: Any, expected: type[Exception] | None = None, **kwargs: Any) -> JsonDict | None:
        """Run a blocking client call in a thread: None for the `expected` refusal, ApiError for others."""
        try:
            result = await asyncio.to_thread(method, **kwargs)
        except Exception as exc:
            if expected is not None and isinstance(exc, expected):
                return None
            raise _message(exc) from exc
        as_dict: JsonDict = result.to_dict()
        return as_dict

    async def create(self, body: JsonDict) -> JsonDict | None:
        """Create the object; None if one of that name already exists."""
        resource = await self._resource(body["apiVersion"], body["kind"])
        namespace = body["metadata"].get("namespace")
        return await self._call(resource.create, ConflictError, body=body, namespace=namespace)

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> JsonDict | None:
        """The object, or None if there is none."""
        resource = await self._resource(api_version, kind)
        return await self._call(resource.get, NotFoundError, name=name, namespace=namespace)

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[JsonDict]:
        """The objects of a kind (every namespace when `namespace` is None), filtered by selectors."""
        resource = await self._resource(api_version, kind)
        selectors = {"label_selector": label_selector, "field_selector": field_selector}
        found = await self._call(resource.get, None, namespace=namespace, **{k: v for k, v in selectors.items() if v})
        return list((found or {}).get("items") or [])

    async def evict(self, namespace: str, name: str) -> None:
        """Ask the API server to evict a pod (policy/v1 Eviction), which honours its disruption budget.

        ApiError 429 means a PodDisruptionBudget forbids it now; 404 that the pod is gone.
        """
        resource = await self._resource("v1", "Pod")
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        await self._call(resource.eviction.create, body=body, name=name, namespace=namespace)

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete the object and, before it goes, its dependents (foreground); False if it was gone.

        Foreground deletion keeps a Job until its pods are gone, so a replacement Job never runs
        beside the pods of the one it replaces.
        """
        resource = await self._resource(api_version, kind)
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground"}
        found = await self._call(resource.delete, NotFoundError, name=name, namespace=namespace, body=options)
        return found is not None

    async def patch(
        self, api_version: str, kind: str, namespace: str, name: str, body: JsonDict, *, status: bool = False
    ) -> JsonDict | None:
        """JSON merge-patch the object, or its status subresource."""
        resource = await self._resource(api_version, kind)
        target = resource.status if status else resource
        return await self._call(target.patch, name=name, namespace=namespace, body=body, content_type=MERGE_PATCH)
