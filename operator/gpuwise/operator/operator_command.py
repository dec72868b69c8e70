"""`gpuwise operator`: run the operator against the cluster in the kubeconfig or in-cluster."""

from __future__ import annotations

import argparse
import asyncio
import logging
import pathlib
import random
import sys
from collections.abc import Sequence
from typing import Any

import kopf

from gpuwise import wiring
from gpuwise.kube.client import Kube, NoCluster, connect
from gpuwise.operator import metrics
from gpuwise.operator.config import LiveSettings, OperatorSettings, SettingsError, load_settings
from gpuwise.operator.evaluate import Evaluator
from gpuwise.operator.handlers import build_registry, build_runner
from gpuwise.operator.reconcile import ReconcileContext
from gpuwise.prometheus.client import Prometheus


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpuwise operator", description=__doc__)
    parser.add_argument("--config", type=pathlib.Path, help="operator settings file (YAML)")
    parser.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        dest="namespaces",
        help="watch this namespace (repeatable; glob patterns allowed); default: all",
    )
    parser.add_argument("--sidecar-image", help="image of the injected telemetry sidecar")
    parser.add_argument("--resync-seconds", type=float, help="periodic re-check of every TrainingJob")
    parser.add_argument(
        "--prometheus-url", help="diagnose running jobs from this Prometheus, e.g. http://prometheus:9090"
    )
    parser.add_argument("--evaluate-seconds", type=float, help="how often every running job is diagnosed (30)")
    parser.add_argument("--query-step-seconds", type=float, help="range-query resolution: the scrape interval (15)")
    parser.add_argument(
        "--peering",
        metavar="NAME",
        help="coordinate replicas through this KopfPeering; default: run standalone",
    )
    parser.add_argument(
        "--priority",
        type=_priority,
        help="this replica's peering priority: an integer, or 'random' so that peered replicas differ",
    )
    parser.add_argument("--liveness", metavar="URL", help="serve a liveness probe, e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument("--metrics-port", type=int, help="serve the operator's Prometheus metrics on this port")
    hook = parser.add_argument_group("admission webhook (sidecar injection for labelled pods)")
    hook.add_argument("--webhook-port", type=int, help="serve the webhook on this port")
    hook.add_argument("--webhook-host", help="host name the API server uses to reach the webhook")
    hook.add_argument("--webhook-cert", type=pathlib.Path, help="TLS certificate (default: self-signed)")
    hook.add_argument("--webhook-key", type=pathlib.Path, help="TLS private key")
    hook.add_argument("--webhook-insecure", action="store_true", help="plain HTTP: for local tests only")
    hook.add_argument(
        "--webhook-managed",
        action="store_true",
        help="create and keep the MutatingWebhookConfiguration up to date",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser.parse_args(argv)


def _priority(text: str) -> int:
    # kopf pauses every peer when two share the highest priority: replicas of one Deployment
    # (same arguments) each draw their own, and the highest one handles events.
    return random.SystemRandom().randrange(1, 2**31) if text == "random" else int(text)


def configure_kopf(settings: kopf.OperatorSettings, args: argparse.Namespace) -> None:
    # Progress and the diff base live in our own annotations, never in status: the status schema
    # is structural, so anything else written there would be pruned and lost.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=wiring.API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=wiring.API_GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{wiring.API_GROUP}/finalizer"
    settings.posting.level = logging.INFO
    if args.webhook_port is not None:
        settings.admission.server = kopf.WebhookServer(
            port=args.webhook_port,
            host=args.webhook_host,
            certfile=str(args.webhook_cert) if args.webhook_cert else None,
            pkeyfile=str(args.webhook_key) if args.webhook_key else None,
            insecure=args.webhook_insecure,
        )
        if args.webhook_managed:
            settings.admission.managed = wiring.API_GROUP


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    flags: dict[str, Any] = {
        "sidecar": {"image": args.sidecar_image} if args.sidecar_image else None,
        "resyncSeconds": args.resync_seconds,
        "prometheusUrl": args.prometheus_url,
        "evaluationSeconds": args.evaluate_seconds,
        "queryStepSeconds": args.query_step_seconds,
    }
    try:
        settings: OperatorSettings = load_settings(args.config, flags)
    except SettingsError as exc:
        sys.stderr.write(f"gpuwise operator: {exc}\n")
        return 2
    if (args.webhook_cert is None) != (args.webhook_key is None):
        sys.stderr.write("gpuwise operator: give both --webhook-cert and --webhook-key, or neither\n")
        return 2
    namespaces = args.namespaces or settings.namespaces
    kopf.configure(verbose=args.verbose, log_prefix=True)
    kopf_settings = kopf.OperatorSettings()
    configure_kopf(kopf_settings, args)
    try:
        client = connect()  # before anything starts: a missing cluster is one line, not a traceback
    except NoCluster as exc:
        sys.stderr.write(f"gpuwise operator: {exc}\n")
        return 2
    kube_class = Kube
    if args.metrics_port is not None:
        metrics.serve(args.metrics_port)
        kube_class = metrics.MeteredKube
    kube = kube_class(client)
    memo = kopf.Memo(context=ReconcileContext(kube=kube, settings=settings))
    if settings.prometheus_url:
        source = Prometheus(settings.prometheus_url)
        memo.evaluator = Evaluator(
            source,
            settings.evaluation_seconds,
            settings.query_step_seconds,
            refresh_seconds=settings.status_refresh_seconds,
        )
        memo.evaluator.gpu_classes = settings.actions.sized_gpu_classes()
        memo.runner = build_runner(kube, source, settings)
        if args.config is not None:
            memo.live = LiveSettings(args.config, settings, flags)  # the kill switch, read every cycle
    asyncio.run(
        kopf.operator(
            registry=build_registry(settings, webhook=args.webhook_port is not None),
            settings=kopf_settings,
            memo=memo,
            clusterwide=not namespaces,
            namespaces=namespaces,
            standalone=args.peering is None,
            peering_name=args.peering,
            priority=args.priority,
            liveness_endpoint=args.liveness,
        )
    )
    return 0
