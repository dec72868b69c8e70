"""The chart, rendered by the real Helm engine with default and non-default values."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from gpuwise import wiring
from gpuwise.api.crd import main as crd_main
from gpuwise.kube.pod_security import Level
from gpuwise.metrics.promql import OPERATOR_JOB, SIDECAR_JOB
from gpuwise.operator.config import OperatorSettings, SidecarSettings
from gpuwise.operator.handlers import build_registry
from gpuwise.operator.operator_command import parse_args
from tests.chart.support import (
    CHART,
    CLUSTERWIDE_HA,
    EVERYTHING,
    NAMESPACE,
    ROOT,
    VALUE_SETS,
    Manifest,
    chart,
    find,
    one,
    operator_container,
    prometheus_relabel_configs,
    render,
    render_files,
    sidecar_scrape_endpoint,
)


def rules_of(docs: list[Manifest], kind: str) -> list[dict[str, Any]]:
    return [rule for role in find(docs, kind) for rule in role["rules"]]


def grants(docs: list[Manifest], resource: str, kind: str = "ClusterRole") -> set[str]:
    return {verb for rule in rules_of(docs, kind) if resource in rule["resources"] for verb in rule["verbs"]}


# --- values ------------------------------------------------------------------------------------


def test_lint_is_clean_for_kubernetes_1_30() -> None:
    report = helm.lint(CHART, kube_version="v1.30.0", strict=True)
    assert report["errors"] == [] and not [m for m in report["messages"] if m["severity"] >= 2], report


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"operator": {"replicas": "many"}}, "at '/operator/replicas': got string, want integer"),
        ({"operator": {"replicas": 0}}, "at '/operator/replicas'"),
        ({"operator": {"replica": 2}}, "replica"),  # a typo names the key
        ({"webhook": {"failurePolicy": "Sometimes"}}, "at '/webhook/failurePolicy'"),
        ({"sidecar": {"resources": {"limits": {"memory": "lots"}}}}, "at '/sidecar/resources/limits/memory'"),
        ({"monitoring": {"podMonitor": {"interval": "often"}}}, "at '/monitoring/podMonitor/interval'"),
        ({"image": {"digest": "latest"}}, "at '/image/digest'"),
        ({"podSecurity": "Restricted"}, "at '/podSecurity'"),
    ],
)
def test_bad_values_fail_with_a_message_that_names_the_key(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmValuesError) as error:
        render_files(values)
    assert message in str(error.value)


@pytest.mark.parametrize("level", list(Level))
def test_the_pod_security_level_reaches_the_operator(level: Level) -> None:
    configmap = one(render({"podSecurity": level.value}), "ConfigMap", "gw-gpuwise-settings")
    assert OperatorSettings.model_validate(yaml.safe_load(configmap["data"]["settings.yaml"])).pod_security is level
    default = one(render(), "ConfigMap", "gw-gpuwise-settings")
    assert yaml.safe_load(default["data"]["settings.yaml"])["podSecurity"] == Level.RESTRICTED.value


def test_replicas_with_glob_namespaces_are_refused() -> None:
    with pytest.raises(helm.HelmError, match="KopfPeering in every watched namespace"):
        render_files({"operator": {"replicas": 2, "watchNamespaces": ["team-*"]}})


def test_servicemonitor_needs_the_operator_metrics() -> None:
    values = {"operator": {"metrics": {"enabled": False}}, "monitoring": {"serviceMonitor": {"enabled": True}}}
    with pytest.raises(helm.HelmError, match=r"needs operator\.metrics\.enabled"):
        render_files(values)


def test_every_documented_value_is_in_the_schema() -> None:
    # values.yaml and values.schema.json describe the same keys (additionalProperties: false).
    schema = chart().schema
    assert schema is not None

    def walk(values: dict[str, Any], node: dict[str, Any], path: str) -> None:
        for key, value in values.items():
            assert key in node.get("properties", {}), f"{path}{key} is not in values.schema.json"
            child = node["properties"][key]
            if isinstance(value, dict) and child.get("properties"):
                walk(value, child, f"{path}{key}.")

    walk(chart().values, schema, "")


# --- the CRDs ----------------------------------------------------------------------------------


def test_chart_crd_is_the_generated_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert crd_main([]) == 0
    generated = capsys.readouterr().out
    assert (CHART / "crds" / "trainingjob.yaml").read_text() == generated, (
        "charts/gpuwise/crds/trainingjob.yaml drifted: run `gpuwise crd > charts/gpuwise/crds/trainingjob.yaml`"
    )
    assert (ROOT / "crds" / "trainingjob.yaml").read_text() == generated


def test_chart_installs_trainingjob_and_kopf_peering_crds() -> None:
    names = {doc["metadata"]["name"] for doc in find(render(), "CustomResourceDefinition")}
    assert names == {"trainingjobs.gpuwise.io", "kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"}


# --- the operator ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_settings_configmap_is_valid_operator_settings(name: str) -> None:
    values = VALUE_SETS[name]
    docs = render(values)
    settings = OperatorSettings.model_validate(
        yaml.safe_load(one(docs, "ConfigMap", "gw-gpuwise-settings")["data"]["settings.yaml"])
    )
    assert settings.namespaces == values.get("operator", {}).get("watchNamespaces", [])
    assert settings.sidecar.resources.to_k8s() == chart().values["sidecar"]["resources"]
    # The operator reads it where the chart mounts it.
    container = operator_container(docs)
    config = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--config="))
    mount = next(m for m in container["volumeMounts"] if m["name"] == "settings")
    assert config.startswith(mount["mountPath"] + "/")


def test_default_images_are_the_chart_app_version_and_match_the_operator_defaults() -> None:
    docs = render()
    app_version = chart().metadata["appVersion"]
    assert operator_container(docs)["image"] == f"ghcr.io/gpuwise/gpuwise:{app_version}"
    settings = yaml.safe_load(one(docs, "ConfigMap", "gw-gpuwise-settings")["data"]["settings.yaml"])
    assert settings["sidecar"]["image"] == SidecarSettings().image == f"ghcr.io/gpuwise/gpuwise:{app_version}"


def test_images_and_sidecar_are_configurable() -> None:
    digest = "sha256:" + "a" * 64
    values = {
        "image": {"repository": "registry.example/gw", "digest": digest},
        "sidecar": {
            "image": {"repository": "registry.example/gw-sidecar", "tag": "1.2.3"},
            "resources": {"limits": {"memory": "1Gi"}},
        },
    }
    docs = render(values)
    assert operator_container(docs)["image"] == f"registry.example/gw@{digest}"
    settings = yaml.safe_load(one(docs, "ConfigMap", "gw-gpuwise-settings")["data"]["settings.yaml"])
    assert settings["sidecar"]["image"] == "registry.example/gw-sidecar:1.2.3"
    assert settings["sidecar"]["resources"]["limits"] == {"memory": "1Gi"}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_operator_arguments_parse(name: str) -> None:
    args = operator_container(render(VALUE_SETS[name]))["args"]
    assert args[0] == "operator"
    parsed = parse_args(args[1:])  # the operator's own parser accepts every flag the chart passes
    assert parsed.liveness == "http://0.0.0.0:8080/healthz"
    assert parsed.metrics_port == 9090


def test_default_deployment_is_standalone_and_hardened() -> None:
    docs = render()
    deployment = one(docs, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = operator_container(docs)
    assert not [a for a in container["args"] if a.startswith(("--peering", "--webhook"))]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["runAsUser"] == 65532  # the Dockerfile's USER
    assert set(container["resources"]) == {"requests", "limits"}
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])
    # A writable /tmp (the kubernetes client caches discovery there) on a read-only root.
    tmp = next(m for m in container["volumeMounts"] if m["mountPath"] == "/tmp")
    assert next(v for v in pod["volumes"] if v["name"] == tmp["name"])["emptyDir"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["health"] == 8080
    assert not find(docs, "ClusterKopfPeering") and not find(docs, "MutatingWebhookConfiguration")


def test_several_replicas_peer_with_distinct_priorities() -> None:
    docs = render(CLUSTERWIDE_HA)
    assert one(docs, "Deployment")["spec"]["strategy"]["type"] == "RollingUpdate"
    args = operator_container(docs)["args"]
    assert "--peering=gw-gpuwise" in args and "--priority=random" in args
    assert one(docs, "ClusterKopfPeering", "gw-gpuwise")
    assert grants(docs, "clusterkopfpeerings") == {"get", "list", "watch", "patch"}
    first, second = parse_args([*args[1:]]).priority, parse_args([*args[1:]]).priority
    assert first != second

    namespaced = render(EVERYTHING)
    peerings = find(namespaced, "KopfPeering")
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["team-a", "team-b"]
    assert not find(namespaced, "ClusterKopfPeering")
    assert grants(namespaced, "kopfpeerings", "Role") == {"get", "list", "watch", "patch"}


# --- RBAC --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rbac_has_no_wildcards(name: str) -> None:
    docs = render(VALUE_SETS[name])
    for rule in rules_of(docs, "ClusterRole") + rules_of(docs, "Role"):
        for key in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[key], rule
        assert not {"deletecollection", "escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
        # The one deletion: with actions.enforce, a checkpointed restart replaces the Job gpuwise owns.
        assert "delete" not in rule["verbs"] or rule["resources"] == ["jobs"], rule
    assert not [r for r in rules_of(docs, "ClusterRole") + rules_of(docs, "Role") if "secrets" in r["resources"]]


def test_default_rbac_is_least_privilege() -> None:
    docs = render()
    assert grants(docs, "trainingjobs") == {"get", "list", "watch", "patch"}
    assert grants(docs, "trainingjobs/status") == {"patch"}
    # Owner references with blockOwnerDeletion (OwnerReferencesPermissionEnforcement admission).
    assert grants(docs, "trainingjobs/finalizers") == {"update"}
    assert grants(docs, "jobs") == {"create", "get", "list", "watch", "patch"}
    assert grants(docs, "services") == {"create", "get", "list", "watch"}
    assert grants(docs, "pods") == {"get", "list", "watch"}
    assert grants(docs, "events") == {"create", "patch"}
    assert grants(docs, "customresourcedefinitions") == {"get", "list", "watch"}
    assert grants(docs, "namespaces") == {"list", "watch"}
    for absent in ("nodes", "pods/eviction", "mutatingwebhookconfigurations", "clusterkopfpeerings"):
        assert not grants(docs, absent), absent
    assert not find(docs, "Role")


def test_actions_add_only_their_permissions() -> None:
    for action in ("migRepartition", "pack"):
        docs = render({"actions": {action: True}})
        assert grants(docs, "nodes") == {"get", "list", "watch", "patch"}, action
        assert grants(docs, "pods/eviction") == {"create"}, action
        assert grants(docs, "poddisruptionbudgets") == {"get", "list"}, "read only: the Eviction API enforces"
    # MigRepartition writes its plan into MIG Manager's ConfigMap: that one, in its namespace, nothing else.
    assert not grants(render({"actions": {"pack": True}}), "configmaps", "Role")
    (role,) = find(render({"actions": {"migRepartition": True}}), "Role")
    assert role["metadata"]["namespace"] == "gpu-operator"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["custom-mig-config"],
            "verbs": ["get", "patch"],
        }
    ]
    # AdjustConfig and Reschedule restart the job (Job delete, pod patch): nothing on nodes, no eviction.
    enforce = render({"actions": {"enforce": True}})
    assert not grants(enforce, "nodes") and not grants(enforce, "poddisruptionbudgets")
    assert not grants(enforce, "pods/eviction") and not grants(enforce, "pods/eviction", "Role")
    assert grants(enforce, "jobs") >= {"delete"} and grants(enforce, "pods") >= {"patch"}


def test_the_operator_takes_only_the_actions_its_rbac_allows() -> None:
    def kinds(values: dict[str, Any]) -> list[str]:
        raw = yaml.safe_load(one(render(values), "ConfigMap", "gw-gpuwise-settings")["data"]["settings.yaml"])
        return [kind.value for kind in OperatorSettings.model_validate(raw).actions.kinds]

    restarts = ["AdjustConfig", "Reschedule", "Suspend"]  # what enforce grants (Job delete, TrainingJob patch)
    assert kinds({"actions": {"enforce": True}}) == restarts
    assert kinds({"actions": {"enforce": True, "pack": True}}) == [*restarts, "Pack"]
    everything = {"enforce": True, "migRepartition": True, "pack": True}
    assert kinds({"actions": everything}) == [*restarts, "MigRepartition", "Pack"]


def test_node_actions_evict_in_every_namespace_even_when_watching_a_few() -> None:
    """A node's GPU pods belong to anyone: idling it needs them all, whatever gpuwise watches."""
    docs = render({"operator": {"watchNamespaces": ["team-a"]}, "actions": {"pack": True}})
    assert grants(docs, "pods/eviction") == {"create"} and grants(docs, "pods") == {"get", "list"}
    assert grants(docs, "pods", "Role") == {"get", "list", "watch"} and not grants(docs, "pods/eviction", "Role")


def test_node_action_settings_reach_the_operator() -> None:
    def nodes_of(values: dict[str, Any]) -> Any:
        raw = yaml.safe_load(one(render(values), "ConfigMap", "gw-gpuwise-settings")["data"]["settings.yaml"])
        return OperatorSettings.model_validate(raw).actions.nodes

    default = nodes_of({})
    assert default.time_slicing.config is None and default.packing_policy == "gpuwise"
    assert default.drain_timeout == "10m" and default.mig.config_timeout == "15m"
    assert str(default.mig.config_map) == "gpu-operator/custom-mig-config"
    nodes = {
        "packingPolicy": "bestfit",
        "mig": {"configMap": {"namespace": "nvidia-gpu-operator", "name": "mig-parted-config"}},
        "timeSlicing": {"config": "shared-8", "replicas": 8},
    }
    chosen = nodes_of({"actions": {"pack": True, "nodes": nodes}})
    assert chosen.packing_policy == "bestfit" and str(chosen.mig.config_map) == "nvidia-gpu-operator/mig-parted-config"
    assert chosen.time_slicing.config == "shared-8" and chosen.time_slicing.replicas == 8
    with pytest.raises(helm.HelmValuesError, match="packingPolicy"):
        render({"actions": {"nodes": {"packingPolicy": "firstfit"}}})
    with pytest.raises(helm.HelmValuesError, match="configMap/name"):
        render({"actions": {"nodes": {"mig": {"configMap": {"name": "Custom_Config"}}}}})


def test_enforce_turns_actions_on_with_their_guardrails_and_permissions() -> None:
    def settings_of(docs: list[Manifest]) -> OperatorSettings:
        raw = yaml.safe_load(one(docs, "ConfigMap", "gw-gpuwise-settings")["data"]["settings.yaml"])
        return OperatorSettings.model_validate(raw)

    off = render()
    assert not settings_of(off).actions.enabled, "Enforce-mode jobs only get recommendations by default"
    assert "delete" not in grants(off, "jobs") and "patch" not in grants(off, "pods")
    budgets = [{"jobs": "2", "namespace": "team-a"}, {"jobs": "0", "schedule": "0 9 * * 1-5", "duration": "8h"}]
    on = render({"actions": {"enforce": True, "dryRun": True, "cooldown": "1h", "budgets": budgets}})
    actions = settings_of(on).actions
    assert actions.enabled and actions.dry_run and actions.cooldown == "1h"
    assert [b.to_k8s() for b in actions.budgets] == budgets
    assert {"delete", "create"} <= grants(on, "jobs"), "a restart replaces the Job"
    assert "patch" in grants(on, "pods"), "the checkpoint request is a pod annotation"
    with pytest.raises(helm.HelmValuesError, match="jobs"):
        render({"actions": {"budgets": [{"jobs": "ten"}]}})


def test_gang_schedulers_each_grant_their_own_podgroups_only() -> None:
    """spec.pod.gang: gpuwise makes each job's PodGroup (create, and get: kept when it exists)."""
    groups = {"volcano": "scheduling.volcano.sh", "coscheduling": "scheduling.x-k8s.io", "kai": "scheduling.run.ai"}
    assert not grants(render(), "podgroups")
    for value, group in groups.items():
        rules = [
            r
            for r in rules_of(render({"gangScheduling": {value: True}}), "ClusterRole")
            if "podgroups" in r["resources"]
        ]
        assert rules == [{"apiGroups": [group], "resources": ["podgroups"], "verbs": ["create", "get"]}], value
    # Watching named namespaces: granted there, in their Roles.
    named = rules_of(render(EVERYTHING), "Role")
    assert {g for r in named if "podgroups" in r["resources"] for g in r["apiGroups"]} == set(groups.values())


def test_named_namespaces_get_roles_not_cluster_wide_access() -> None:
    docs = render(EVERYTHING)
    cluster = rules_of(docs, "ClusterRole")
    # Node actions (MigRepartition, Pack) idle nodes: pods of every namespace, read and evicted.
    resources = {r for rule in cluster for r in rule["resources"]}
    assert resources == {"customresourcedefinitions", "nodes", "pods", "pods/eviction", "poddisruptionbudgets"}
    roles = find(docs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["nvidia-gpu-operator", "team-a", "team-b"]
    assert grants(docs, "trainingjobs/finalizers", "Role") == {"update"}
    bindings = find(docs, "RoleBinding")
    assert all(b["subjects"][0]["namespace"] == NAMESPACE for b in bindings)
    # Globs cannot be Roles: cluster-wide permissions, and kopf needs the namespace list.
    globbed = render({"operator": {"watchNamespaces": ["team-*"]}})
    assert not find(globbed, "Role") and grants(globbed, "namespaces") == {"list", "watch"}


def test_managed_webhook_needs_and_gets_its_permission() -> None:
    docs = render({"webhook": {"enabled": True, "managed": True}})
    assert grants(docs, "mutatingwebhookconfigurations") == {"get", "list", "watch", "create", "patch"}
    assert not find(docs, "MutatingWebhookConfiguration") and not find(docs, "Secret")
    assert "--webhook-managed" in operator_container(docs)["args"]


# --- the webhook -------------------------------------------------------------------------------


def test_webhook_points_at_the_operator_service_and_its_handler() -> None:
    docs = render(EVERYTHING)
    config = one(docs, "MutatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["objectSelector"] == {"matchLabels": {wiring.LABEL_INJECT: "true"}}
    assert hook["namespaceSelector"] == {"matchLabels": {"gpu": "yes"}}
    service = hook["clientConfig"]["service"]
    # kopf serves each admission handler at /<handler id>.
    registry = build_registry(OperatorSettings(), webhook=True)
    ids = {handler.id for handler in registry._webhooks.get_all_handlers()}
    assert service["path"].lstrip("/") in ids
    svc = one(docs, "Service", service["name"])
    port = next(p for p in svc["spec"]["ports"] if p["port"] == service["port"])
    container = operator_container(docs)
    assert port["targetPort"] in {p["name"] for p in container["ports"]}
    # The certificate: a Secret the API server trusts through caBundle, mounted and passed.
    secret = one(docs, "Secret")
    assert secret["type"] == "kubernetes.io/tls" and hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    args = parse_args(container["args"][1:])
    mount = next(m for m in container["volumeMounts"] if m["name"] == "webhook-cert")
    assert (
        str(args.webhook_cert) == f"{mount['mountPath']}/tls.crt"
        and str(args.webhook_key) == f"{mount['mountPath']}/tls.key"
    )
    assert args.webhook_port == 9443


def test_webhook_certificate_is_valid_for_the_service_name() -> None:
    import base64
    import ssl
    import tempfile

    docs = render({"webhook": {"enabled": True}})
    data = one(docs, "Secret")["data"]
    with (
        tempfile.NamedTemporaryFile("w", suffix=".pem") as cert,
        tempfile.NamedTemporaryFile("w", suffix=".pem") as key,
    ):
        cert.write(base64.b64decode(data["tls.crt"]).decode())
        key.write(base64.b64decode(data["tls.key"]).decode())
        cert.flush()
        key.flush()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert.name, key.name)  # the key matches the certificate
        decoded = ssl._ssl._test_decode_cert(cert.name)  # type: ignore[attr-defined]
    names = {value for kind, value in decoded["subjectAltName"] if kind == "DNS"}
    assert f"gw-gpuwise.{NAMESPACE}.svc" in names


def test_cert_manager_certificate_replaces_the_generated_one() -> None:
    docs = render(CLUSTERWIDE_HA)
    assert not find(docs, "Secret")
    certificate = one(docs, "Certificate")
    config = one(docs, "MutatingWebhookConfiguration")
    assert (
        config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        == f"{NAMESPACE}/{certificate['metadata']['name']}"
    )
    assert "caBundle" not in config["webhooks"][0]["clientConfig"]
    assert f"gw-gpuwise.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    assert one(docs, "Issuer")["spec"] == {"selfSigned": {}}
    own = copy.deepcopy(CLUSTERWIDE_HA)
    own["webhook"]["certificate"]["certManager"] = {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}}
    docs = render(own)
    assert not find(docs, "Issuer") and one(docs, "Certificate")["spec"]["issuerRef"]["name"] == "corp-ca"


# --- monitoring --------------------------------------------------------------------------------


def test_podmonitors_scrape_the_sidecar_port_of_trainingjob_and_injected_pods() -> None:
    docs = render(EVERYTHING)
    monitors = {m["metadata"]["name"]: m["spec"] for m in find(docs, "PodMonitor")}
    assert set(monitors) == {"gw-gpuwise-sidecars", "gw-gpuwise-injected"}
    for spec in monitors.values():
        (endpoint,) = spec["podMetricsEndpoints"]
        assert endpoint["port"] == wiring.METRICS_PORT_NAME
        assert {"action": "replace", "targetLabel": "job", "replacement": SIDECAR_JOB} in endpoint["relabelings"]
        assert spec["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    expressions = {
        name: {e["key"]: e["operator"] for e in s["selector"]["matchExpressions"]} for name, s in monitors.items()
    }
    assert expressions["gw-gpuwise-sidecars"] == {wiring.LABEL_TRAININGJOB: "Exists"}
    # Disjoint: a TrainingJob pod that also carries the inject label is scraped once.
    assert expressions["gw-gpuwise-injected"] == {wiring.LABEL_INJECT: "In", wiring.LABEL_TRAININGJOB: "DoesNotExist"}
    # Without the webhook there are no injected pods to scrape.
    only = find(render(CLUSTERWIDE_HA | {"webhook": {"enabled": False}}), "PodMonitor")
    assert [m["spec"]["namespaceSelector"] for m in only] == [{"any": True}]


# What the PodMonitors do to the sidecar's series after the scrape (honorLabels: false, the default).
GPU_CONTAINER_RELABELINGS = [
    {
        "action": "replace",
        "sourceLabels": ["exported_container"],
        "regex": "(.+)",
        "targetLabel": "container",
        "replacement": "$1",
    },
    {
        "action": "replace",
        "sourceLabels": ["__name__", "exported_container"],
        "regex": "DCGM_.+;",
        "targetLabel": "container",
        "replacement": "",
    },
    {"action": "labeldrop", "regex": "exported_(pod|namespace|container)"},
]


def test_podmonitors_put_the_gpu_s_container_on_dcgm_series(tmp_path: Path) -> None:
    """The exposition's `container` (the trainer) arrives as `exported_container`: move it back.

    A real Prometheus applies these in tests/chart/test_dashboards.py; here, their rendering.
    """
    docs = render(EVERYTHING)
    for monitor in find(docs, "PodMonitor"):
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        assert endpoint["honorLabels"] is False
        # In this order: the copy is read before it is dropped.
        assert endpoint["metricRelabelings"] == GPU_CONTAINER_RELABELINGS, monitor["metadata"]["name"]
    # Trusting the exposition's labels, nothing arrives renamed.
    honoured = sidecar_scrape_endpoint({"monitoring": {"podMonitor": {"honorLabels": True}}})
    assert honoured["honorLabels"] is True and "metricRelabelings" not in honoured
    if shutil.which("promtool") is None:
        pytest.skip("needs promtool (make system-deps) to check the scrape configuration")
    endpoint = sidecar_scrape_endpoint()
    job = {
        "job_name": SIDECAR_JOB,
        "static_configs": [{"targets": ["127.0.0.1:9400"]}],
        "relabel_configs": prometheus_relabel_configs(endpoint["relabelings"]),
        "metric_relabel_configs": prometheus_relabel_configs(endpoint["metricRelabelings"]),
    }
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": [job]}))
    check = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


def test_servicemonitor_scrapes_the_operator_metrics_port() -> None:
    docs = render(EVERYTHING)
    monitor = one(docs, "ServiceMonitor")["spec"]
    (endpoint,) = monitor["endpoints"]
    assert {"action": "replace", "targetLabel": "job", "replacement": OPERATOR_JOB} in endpoint["relabelings"]
    service = one(docs, "Service")
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()


def test_monitoring_labels_reach_every_object_the_prometheus_operator_selects() -> None:
    monitoring = {
        "labels": {"release": "kube-prometheus-stack", "team": "ml"},
        "podMonitor": {"enabled": True},
        "serviceMonitor": {"enabled": True, "labels": {"team": "platform"}},  # its own win
        "prometheusRule": {"enabled": True},
    }
    docs = render({"monitoring": monitoring, "webhook": {"enabled": True}})
    selected = {
        f"{doc['kind']} {doc['metadata']['name']}": doc["metadata"]["labels"]
        for doc in docs
        if doc["apiVersion"] == "monitoring.coreos.com/v1"
    }
    assert len(selected) == 4  # two PodMonitors, the ServiceMonitor, the PrometheusRule
    assert all(labels["release"] == "kube-prometheus-stack" for labels in selected.values())
    assert {name: labels["team"] for name, labels in selected.items()} == {
        "PodMonitor gw-gpuwise-sidecars": "ml",
        "PodMonitor gw-gpuwise-injected": "ml",
        "ServiceMonitor gw-gpuwise": "platform",
        "PrometheusRule gw-gpuwise": "ml",
    }
    assert all(labels["app.kubernetes.io/part-of"] == "gpuwise" for labels in selected.values())


def test_prometheusrule_ships_the_generated_rules_with_the_values_applied() -> None:
    generated = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    docs = render(EVERYTHING)
    groups = {g["name"]: g for g in one(docs, "PrometheusRule")["spec"]["groups"]}
    assert set(groups) == {g["name"] for g in generated["groups"]}
    shipped = {r["alert"]: r for g in groups.values() for r in g["rules"]}
    expected = {r["alert"]: r for g in generated["groups"] for r in g["rules"]}
    assert set(shipped) == set(expected) - {"GpuwiseStepEventsDropped"}
    for name, rule in shipped.items():
        assert rule["expr"] == expected[name]["expr"] and rule["annotations"] == expected[name]["annotations"]
        assert rule["labels"] == {**expected[name]["labels"], "team": "ml"}
    # The operator's own alert needs its ServiceMonitor.
    groups = one(render(CLUSTERWIDE_HA), "PrometheusRule")["spec"]["groups"]
    assert [g["name"] for g in groups] == ["gpuwise-exporter", "gpuwise-efficiency"]


def test_dashboards_are_configmaps_for_the_grafana_sidecar() -> None:
    docs = render(EVERYTHING)
    maps = [m for m in find(docs, "ConfigMap") if "dashboard" in m["metadata"]["name"]]
    files = {key: json.loads(value) for m in maps for key, value in m["data"].items()}
    assert set(files) == {"gpuwise-cluster.json", "gpuwise-job.json", "dcgm-exporter.json"}
    for m in maps:
        assert m["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert m["metadata"]["namespace"] == "monitoring"
        assert m["metadata"]["annotations"] == {"grafana_folder": "GPUs"}
    for key, model in files.items():
        assert model == json.loads((CHART / "files" / "dashboards" / key).read_text())
    without = render({"grafana": {"dashboards": {"dcgmExporter": False}}})
    assert len([m for m in find(without, "ConfigMap") if "dashboard" in m["metadata"]["name"]]) == 2
    assert not [
        m
        for m in find(render({"grafana": {"dashboards": {"enabled": False}}}), "ConfigMap")
        if "dashboard" in m["metadata"]["name"]
    ]


def test_network_policy_admits_the_operator_ports() -> None:
    docs = render(EVERYTHING)
    policy = one(docs, "NetworkPolicy")["spec"]
    ports = {p["port"] for rule in policy["ingress"] for p in rule["ports"]}
    container_ports = {p["containerPort"] for p in operator_container(docs)["ports"]}
    assert ports == container_ports


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_notes_tell_what_to_do_next(name: str) -> None:
    notes = next(text for path, text in render_files(VALUE_SETS[name]).items() if path.endswith("NOTES.txt"))
    assert "kubectl apply" in notes and "kubectl get tj" in notes
    assert "gpuwise / Cluster overview" in notes
    # No Prometheus to diagnose from, no findings: the notes say so and how to set it.
    assert "efficiency.prometheusUrl is empty" in notes and "--set efficiency.prometheusUrl=" in notes


def test_notes_name_the_prometheus_findings_come_from() -> None:
    values = {"efficiency": {"prometheusUrl": "http://prometheus.monitoring:9090"}}
    notes = next(text for path, text in render_files(values).items() if path.endswith("NOTES.txt"))
    assert "diagnoses every running job from http://prometheus.monitoring:9090 every 30 s" in notes
    assert "efficiency.prometheusUrl is empty" not in notes
