"""Where kopf meets gpuwise: which events wake the reconciler, and the injection webhook.

Three in-memory indexes (TrainingJobs, their Jobs, their pods) are kept current by kopf's
watches, so a reconcile reads the world from memory and only writes go to the API server. Every
trigger — the TrainingJob created, changed, resumed after a restart, the periodic resync, any
event on one of its Jobs or pods — ends in the same `reconcile()`.

Handlers are registered on a registry built per operator run, so settings such as the resync
interval are plain arguments instead of module-level globals.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from typing import Any

import kopf

from gpuwise import wiring
from gpuwise.act.checkpoint import Acks
from gpuwise.act.kinds import AVAILABLE
from gpuwise.act.measure import Meter
from gpuwise.act.runner import Runner
from gpuwise.api.base import parse_duration
from gpuwise.api.trainingjob import PLURAL, VERSION, Instrumentation
from gpuwise.kube.client import Kube
from gpuwise.operator.config import LiveSettings, OperatorSettings
from gpuwise.operator.evaluate import Evaluator, evaluate_job
from gpuwise.operator.inject import inject_sidecar
from gpuwise.operator.metrics import JOBS, RECLAIMED
from gpuwise.operator.reconcile import ReconcileContext, reconcile
from gpuwise.prometheus.client import Prometheus

JsonDict = dict[str, Any]
TRAININGJOBS = (wiring.API_GROUP, VERSION, PLURAL)
OURS = {wiring.LABEL_TRAININGJOB: kopf.PRESENT}
ANNOTATION_INSTRUMENTATION = f"{wiring.API_GROUP}/instrumentation"


def _first(store: Iterable[JsonDict] | None) -> JsonDict | None:
    return next(iter(store), None) if store is not None else None


class IndexedObjects:
    """Every object in a kopf index, read when iterated: a view, not a copy.

    Each job's evaluation gets the fleet for its disruption budgets, but reads it only when an
    action is about to start; copying 10,000 objects into a list for every job would make each
    cycle cost the square of the number of jobs.
    """

    def __init__(self, index: kopf.Index[Any, JsonDict]) -> None:
        self._index = index

    def __iter__(self) -> Iterator[JsonDict]:
        for store in self._index.values():
            yield from store


def build_registry(settings: OperatorSettings, *, webhook: bool = False) -> kopf.OperatorRegistry:
    """All handlers; the injection webhook only when a webhook server is configured to serve it."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(id="login", registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # A registry of our own starts empty: log in the way kopf does by default.
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    # --- indexes: the world as the reconciler reads it ----------------------------------------

    @kopf.index(*TRAININGJOBS, id="trainingjobs", registry=registry)
    def trainingjobs(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Any, JsonDict]:
        return {(namespace, name): copy.deepcopy(dict(body))}

    @kopf.index("batch", "v1", "jobs", labels=OURS, id="jobs", registry=registry)
    def jobs(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict[Any, JsonDict]:
        return {(namespace, labels[wiring.LABEL_TRAININGJOB]): copy.deepcopy(dict(body))}

    @kopf.index("", "v1", "pods", labels=OURS, id="pods", registry=registry)
    def pods(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict[Any, JsonDict]:
        return {(namespace, labels[wiring.LABEL_TRAININGJOB]): copy.deepcopy(dict(body))}

    async def run(
        *,
        key: tuple[str | None, str],
        owner: JsonDict | None,
        jobs: kopf.Index[Any, JsonDict],
        pods: kopf.Index[Any, JsonDict],
        memo: kopf.Memo,
        logger: kopf.Logger,
    ) -> None:
        if owner is None:  # a leftover child of a deleted TrainingJob: the garbage collector's
            return
        context: ReconcileContext = memo["context"]
        await reconcile(owner, _first(jobs.get(key)), list(pods.get(key, [])), context, logger)

    # --- triggers -----------------------------------------------------------------------------
    # (kopf's handler protocols cannot know our index keyword arguments: hence the ignores.)

    @kopf.on.resume(*TRAININGJOBS, id="reconcile", registry=registry)
    @kopf.on.create(*TRAININGJOBS, id="reconcile", registry=registry)
    @kopf.on.update(*TRAININGJOBS, field="spec", id="reconcile", registry=registry)
    @kopf.timer(  # type: ignore[arg-type]
        *TRAININGJOBS,
        interval=settings.resync_seconds,
        initial_delay=settings.resync_seconds,
        id="resync",
        registry=registry,
    )
    async def trainingjob_changed(
        *,
        namespace: str | None,
        name: str,
        body: kopf.Body,
        jobs: kopf.Index[Any, JsonDict],
        pods: kopf.Index[Any, JsonDict],
        memo: kopf.Memo,
        logger: kopf.Logger,
        **_: Any,
    ) -> None:
        await run(
            key=(namespace, name),
            owner=copy.deepcopy(dict(body)),
            jobs=jobs,
            pods=pods,
            memo=memo,
            logger=logger,
        )

    @kopf.on.event("batch", "v1", "jobs", labels=OURS, id="job-changed", registry=registry)
    @kopf.on.event("", "v1", "pods", labels=OURS, id="pod-changed", registry=registry)  # type: ignore[arg-type]
    async def child_changed(
        *,
        namespace: str | None,
        labels: kopf.Labels,
        trainingjobs: kopf.Index[Any, JsonDict],
        jobs: kopf.Index[Any, JsonDict],
        pods: kopf.Index[Any, JsonDict],
        memo: kopf.Memo,
        logger: kopf.Logger,
        **_: Any,
    ) -> None:
        key = (namespace, labels[wiring.LABEL_TRAININGJOB])
        await run(key=key, owner=_first(trainingjobs.get(key)), jobs=jobs, pods=pods, memo=memo, logger=logger)

    @kopf.on.delete(*TRAININGJOBS, optional=True, id="forget", registry=registry)
    def trainingjob_deleted(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
        # Children go with their owner through ownerReferences; only our own memory is left.
        if "runner" in memo:
            runner: Runner = memo["runner"]
            runner.forget(namespace or "", name)
        if "evaluator" in memo:
            evaluator: Evaluator = memo["evaluator"]
            evaluator.settings.forget(namespace or "", name)
        JOBS.forget(namespace or "", name)  # its gpuwise_job_* series go now, not at their expiry
        RECLAIMED.released(namespace or "", name, forget=True)

    if settings.prometheus_url:

        @kopf.timer(  # type: ignore[arg-type]
            *TRAININGJOBS, interval=settings.evaluation_seconds, id="evaluate", registry=registry
        )
        async def evaluate(
            *,
            namespace: str | None,
            name: str,
            body: kopf.Body,
            trainingjobs: kopf.Index[Any, JsonDict],
            pods: kopf.Index[Any, JsonDict],
            memo: kopf.Memo,
            logger: kopf.Logger,
            **_: Any,
        ) -> None:
            """Diagnose, publish, then act: one cycle of the loop for one job."""
            runner: Runner = memo["runner"]
            evaluator: Evaluator = memo["evaluator"]
            if "live" in memo:
                live: LiveSettings = memo["live"]
                actions = live.current().actions
                if actions is not runner.settings:  # the file changed: its GPU classes too, maybe
                    evaluator.gpu_classes = actions.sized_gpu_classes()
                runner.settings = actions
            await evaluate_job(
                body,
                list(pods.get((namespace, name), [])),
                IndexedObjects(trainingjobs),
                evaluator=evaluator,
                runner=runner,
                context=memo["context"],
                logger=logger,
            )

    if webhook:
        register_webhook(registry, settings)
    return registry


def build_runner(kube: Kube, source: Prometheus, settings: OperatorSettings) -> Runner:
    """The action runner, with every kind registered and its Prometheus readers per cycle."""
    cycle = settings.evaluation_seconds
    window = parse_duration(settings.actions.verify_window)
    meter = Meter(source, window_seconds=window, cycle_seconds=cycle)
    return Runner(kube, settings.actions, Acks(source, cycle), meter, kinds=AVAILABLE)


def register_webhook(registry: kopf.OperatorRegistry, settings: OperatorSettings) -> None:
    """The sidecar for pods that are not TrainingJobs (Kubeflow, JobSet, plain Jobs…)."""

    @kopf.on.mutate(
        "",
        "v1",
        "pods",
        labels={wiring.LABEL_INJECT: "true"},
        operations=["CREATE"],
        id="inject-sidecar",
        # Telemetry must never block a workload: with the operator down, pods start without it.
        ignore_failures=True,
        registry=registry,
    )
    def inject(body: kopf.Body, annotations: kopf.Annotations, patch: kopf.Patch, **_: Any) -> None:
        wanted = annotations.get(ANNOTATION_INSTRUMENTATION, Instrumentation.AUTO.value)
        try:
            instrumentation = Instrumentation(wanted)
        except ValueError:
            choices = ", ".join(i.value for i in Instrumentation)
            raise kopf.AdmissionError(
                f"annotation {ANNOTATION_INSTRUMENTATION}={wanted!r} is not one of: {choices}", code=400
            ) from None
        spec = inject_sidecar(
            copy.deepcopy(dict(body["spec"])), settings=settings.sidecar, instrumentation=instrumentation
        )
        for key in ("initContainers", "containers", "volumes"):
            patch.spec[key] = spec[key]
        patch.metadata.annotations[wiring.ANNOTATION_INJECTED] = "true"
