"""Pod Security: the checker against the standard, the pods gpuwise renders, and what a spec may loosen.

The checker (gpuwise.kube.pod_security) is first held to the Pod Security Standards (v1.30) on
hand-written pods, one rule at a time; then it judges the pods rendered from generated specs.
checkov judges a set of rendered Jobs too, as a second opinion from a tool that is not ours: its
Kubernetes checks cover the container rules (privileged, host namespaces and ports, privilege
escalation, root, seccomp, capabilities) but not volume types, procMount, sysctls, SELinux or
AppArmor, which only the first tests cover.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.api.trainingjob import TrainingJobSpec
from gpuwise.kube.pod_security import Level, violations
from gpuwise.operator import workload
from gpuwise.operator.config import OperatorSettings, SidecarSettings
from tests.chart.test_security import checkov

OWNER = {
    "apiVersion": "gpuwise.io/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "llama", "namespace": "research", "uid": "u-1"},
}
JsonDict = dict[str, Any]

# --- the checker, held to the standard ---------------------------------------------------------

RESTRICTED_POD: JsonDict = {
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "initContainers": [
        {
            "name": "init",
            "image": "i",
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }
    ],
    "containers": [
        {
            "name": "c",
            "image": "i",
            "ports": [{"containerPort": 80}],
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }
    ],
    "volumes": [{"name": "scratch", "emptyDir": {}}],
}


def with_(path: str, value: Any, pod: JsonDict | None = None) -> JsonDict:
    """A copy of the restricted pod with the dotted `path` set (`c`/`init`: that container)."""
    out = copy.deepcopy(pod or RESTRICTED_POD)
    names = {"c": ("containers", 0), "init": ("initContainers", 0)}
    *parents, last = path.split(".")
    target: Any = out
    for part in parents:
        target = target[names[part][0]][names[part][1]] if part in names else target.setdefault(part, {})
    target[last] = value
    return out


P, B = Level.PRIVILEGED, Level.BASELINE
# A pod that breaks one rule, and (container, field, the strictest level that allows it).
BREAKS: list[tuple[str, JsonDict, tuple[str | None, str, Level]]] = [
    ("hostNetwork", with_("hostNetwork", True), (None, "hostNetwork", P)),
    ("hostPID", with_("hostPID", True), (None, "hostPID", P)),
    ("hostIPC", with_("hostIPC", True), (None, "hostIPC", P)),
    (
        "hostPath volume",
        with_("volumes", [{"name": "root", "hostPath": {"path": "/"}}]),
        (None, "volumes[root].hostPath", P),
    ),
    ("privileged", with_("c.securityContext.privileged", True), ("c", "securityContext.privileged", P)),
    (
        "SYS_ADMIN",
        with_("c.securityContext.capabilities.add", ["SYS_ADMIN"]),
        ("c", "securityContext.capabilities.add", P),
    ),
    ("hostPort", with_("c.ports", [{"containerPort": 80, "hostPort": 80}]), ("c", "ports.hostPort", P)),
    ("procMount", with_("c.securityContext.procMount", "Unmasked"), ("c", "securityContext.procMount", P)),
    (
        "pod seccomp Unconfined",
        with_("securityContext.seccompProfile", {"type": "Unconfined"}),
        (None, "securityContext.seccompProfile.type", P),
    ),
    (
        "init seccomp Unconfined",
        with_("init.securityContext.seccompProfile", {"type": "Unconfined"}),
        ("init", "securityContext.seccompProfile.type", P),
    ),
    (
        "unsafe sysctl",
        with_("securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}]),
        (None, "securityContext.sysctls", P),
    ),
    (
        "SELinux type",
        with_("c.securityContext.seLinuxOptions", {"type": "spc_t"}),
        ("c", "securityContext.seLinuxOptions.type", P),
    ),
    (
        "SELinux user",
        with_("securityContext.seLinuxOptions", {"user": "root"}),
        (None, "securityContext.seLinuxOptions.user", P),
    ),
    (
        "AppArmor Unconfined",
        with_("c.securityContext.appArmorProfile", {"type": "Unconfined"}),
        ("c", "securityContext.appArmorProfile.type", P),
    ),
    (
        "Windows host process",
        with_("c.securityContext.windowsOptions", {"hostProcess": True}),
        ("c", "securityContext.windowsOptions.hostProcess", P),
    ),
    (
        "nfs volume",
        with_("volumes", [{"name": "data", "nfs": {"server": "s", "path": "/"}}]),
        (None, "volumes[data]", B),
    ),
    ("pod runAsNonRoot false", with_("securityContext.runAsNonRoot", False), (None, "securityContext.runAsNonRoot", B)),
    (
        "container runAsNonRoot false",
        with_("c.securityContext.runAsNonRoot", False),
        ("c", "securityContext.runAsNonRoot", B),
    ),
    ("root UID", with_("c.securityContext.runAsUser", 0), ("c", "securityContext.runAsUser", B)),
    ("pod root UID", with_("securityContext.runAsUser", 0), (None, "securityContext.runAsUser", B)),
    (
        "escalation unset",
        with_("init.securityContext", {"capabilities": {"drop": ["ALL"]}}),
        ("init", "securityContext.allowPrivilegeEscalation", B),
    ),
    (
        "escalation true",
        with_("c.securityContext.allowPrivilegeEscalation", True),
        ("c", "securityContext.allowPrivilegeEscalation", B),
    ),
    (
        "ALL not dropped",
        with_("c.securityContext.capabilities", {"drop": ["NET_RAW"]}),
        ("c", "securityContext.capabilities.drop", B),
    ),
    (
        "CHOWN added",
        with_("c.securityContext.capabilities.add", ["CHOWN"]),
        ("c", "securityContext.capabilities.add", B),
    ),
    (
        "no seccomp at all",
        with_("securityContext", {"runAsNonRoot": True}),
        ("c", "securityContext.seccompProfile.type", B),
    ),
    (
        "no runAsNonRoot at all",
        with_("securityContext", {"seccompProfile": {"type": "RuntimeDefault"}}),
        ("c", "securityContext.runAsNonRoot", B),
    ),
]
CONTAINER_LEVEL_ONLY = with_("securityContext", {})  # runAsNonRoot and seccomp set on each container instead
for name, profile in (("c", {"type": "Localhost", "localhostProfile": "p.json"}), ("init", {"type": "RuntimeDefault"})):
    CONTAINER_LEVEL_ONLY = with_(f"{name}.securityContext.runAsNonRoot", True, CONTAINER_LEVEL_ONLY)
    CONTAINER_LEVEL_ONLY = with_(f"{name}.securityContext.seccompProfile", profile, CONTAINER_LEVEL_ONLY)
HARMLESS = with_("securityContext.sysctls", [{"name": "net.ipv4.tcp_syncookies", "value": "1"}])
HARMLESS = with_("c.ports", [{"containerPort": 80, "hostPort": 0}], HARMLESS)
HARMLESS = with_("c.securityContext.seLinuxOptions", {"type": "container_t"}, HARMLESS)
RESTRICTED_VOLUME_KINDS = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
# Pods that look loose but pass restricted.
PASSES: list[tuple[str, JsonDict]] = [
    ("the restricted pod", RESTRICTED_POD),
    ("NET_BIND_SERVICE", with_("c.securityContext.capabilities.add", ["NET_BIND_SERVICE"])),
    ("runAsNonRoot and seccomp on the containers only", CONTAINER_LEVEL_ONLY),
    ("safe sysctl, hostPort 0, SELinux container_t", HARMLESS),
    ("AppArmor RuntimeDefault", with_("c.securityContext.appArmorProfile", {"type": "RuntimeDefault"})),
    ("every restricted volume type", with_("volumes", [{"name": k.lower(), k: {}} for k in RESTRICTED_VOLUME_KINDS])),
]


@pytest.mark.parametrize(("pod", "expected"), [case[1:] for case in BREAKS], ids=[case[0] for case in BREAKS])
def test_each_rule_names_the_field_and_the_level_that_allows_it(
    pod: JsonDict, expected: tuple[str | None, str, Level]
) -> None:
    container, field, needs = expected
    found = violations(pod, Level.RESTRICTED)
    assert any((v.container, v.field, v.needs) == (container, field, needs) for v in found), found
    assert violations(pod, needs) == [], "the level a violation names allows it"
    if needs is Level.PRIVILEGED:
        assert [v.field for v in violations(pod, Level.BASELINE)] == [field]


@pytest.mark.parametrize("pod", [case[1] for case in PASSES], ids=[case[0] for case in PASSES])
def test_pods_within_the_rules_pass_restricted(pod: JsonDict) -> None:
    assert violations(pod, Level.RESTRICTED) == []


@pytest.mark.parametrize(
    ("value", "passes"), [("runtime/default", True), ("localhost/training", True), ("unconfined", False)]
)
def test_apparmor_annotations_are_judged(value: str, passes: bool) -> None:
    annotations = {"container.apparmor.security.beta.kubernetes.io/c": value}
    assert (violations(RESTRICTED_POD, Level.BASELINE, annotations) == []) is passes


# --- the pods gpuwise renders ------------------------------------------------------------------


def render(raw: JsonDict) -> JsonDict:
    return workload.render_job(OWNER, TrainingJobSpec.model_validate(raw), SidecarSettings())


def pod_of(job: JsonDict) -> JsonDict:
    spec: JsonDict = job["spec"]["template"]["spec"]
    return spec


def test_a_spec_that_says_nothing_renders_restricted_pods() -> None:
    job = render({"trainer": {"image": "img", "shmSize": "1Gi"}})
    assert violations(pod_of(job), Level.RESTRICTED) == []
    assert workload.pod_security_refusal(job, Level.RESTRICTED) is None
    assert pod_of(job)["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod_of(job)["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


ALLOWED_VOLUMES: list[JsonDict] = [
    {"configMap": {"name": "cfg"}},
    {"secret": {"secretName": "creds"}},
    {"persistentVolumeClaim": {"claimName": "imagenet"}},
    {"emptyDir": {"medium": "Memory"}},
    {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
    {"projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
    {"csi": {"driver": "s3.csi.aws.com"}},
    {"ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}},
]
# Restricted-safe choices a user may make: UIDs, groups, read-only root, NET_BIND_SERVICE, seccomp.
safe_trainer_context = st.fixed_dictionaries(
    {},
    optional={
        "runAsUser": st.integers(1, 2**31 - 1),
        "runAsGroup": st.integers(0, 2**31 - 1),
        "runAsNonRoot": st.just(True),
        "allowPrivilegeEscalation": st.just(False),
        "readOnlyRootFilesystem": st.booleans(),
        "privileged": st.just(False),
        "capabilities": st.fixed_dictionaries(
            {}, optional={"add": st.just(["NET_BIND_SERVICE"]), "drop": st.just(["ALL", "NET_RAW"])}
        ),
        "seccompProfile": st.sampled_from(
            [{"type": "RuntimeDefault"}, {"type": "Localhost", "localhostProfile": "profiles/train.json"}]
        ),
    },
)
safe_pod_context = st.fixed_dictionaries(
    {},
    optional={
        "runAsUser": st.integers(1, 2**31 - 1),
        "runAsGroup": st.integers(0, 2**31 - 1),
        "runAsNonRoot": st.just(True),
        "fsGroup": st.integers(0, 2**31 - 1),
        "fsGroupChangePolicy": st.sampled_from(["OnRootMismatch", "Always"]),
        "supplementalGroups": st.lists(st.integers(0, 65535), max_size=3),
        "seccompProfile": st.just({"type": "RuntimeDefault"}),
    },
)
allowed_volumes = st.lists(st.sampled_from(ALLOWED_VOLUMES), max_size=4).map(
    lambda sources: [{"name": f"v{n}", **source} for n, source in enumerate(sources)]
)


def spec_with(trainer_context: JsonDict, pod_context: JsonDict, volumes: list[JsonDict]) -> JsonDict:
    return {
        "trainer": {"image": "img", "securityContext": trainer_context},
        "pod": {"securityContext": pod_context, "volumes": volumes},
    }


@settings(max_examples=60, deadline=None)
@given(safe_trainer_context, safe_pod_context, allowed_volumes)
def test_pods_of_specs_within_restricted_pass_it(trainer: JsonDict, pod: JsonDict, volumes: list[JsonDict]) -> None:
    job = render(spec_with(trainer, pod, volumes))
    assert violations(pod_of(job), Level.RESTRICTED) == []
    assert workload.pod_security_refusal(job, Level.RESTRICTED) is None


# One loosening each: where it goes in the spec, the field the refusal names, the level it needs.
LOOSENINGS: list[tuple[str, Any, str, Level]] = [
    ("trainer.privileged", True, "spec.trainer.securityContext.privileged", P),
    ("trainer.capabilities", {"add": ["SYS_ADMIN"]}, "spec.trainer.securityContext.capabilities.add", P),
    ("trainer.seccompProfile", {"type": "Unconfined"}, "spec.trainer.securityContext.seccompProfile.type", P),
    ("pod.seccompProfile", {"type": "Unconfined"}, "spec.pod.securityContext.seccompProfile.type", P),
    ("volume", {"name": "root", "hostPath": {"path": "/"}}, "spec.pod.volumes[root].hostPath", P),
    ("annotation", "unconfined", "spec.pod.annotations[container.apparmor.security.beta.kubernetes.io/trainer]", P),
    ("trainer.runAsNonRoot", False, "spec.trainer.securityContext.runAsNonRoot", B),
    ("trainer.runAsUser", 0, "spec.trainer.securityContext.runAsUser", B),
    ("pod.runAsNonRoot", False, "spec.pod.securityContext.runAsNonRoot", B),
    ("trainer.allowPrivilegeEscalation", True, "spec.trainer.securityContext.allowPrivilegeEscalation", B),
    ("trainer.capabilities", {"add": ["CHOWN"]}, "spec.trainer.securityContext.capabilities.add", B),
    ("trainer.capabilities", {"drop": []}, "spec.trainer.securityContext.capabilities.drop", B),
    ("volume", {"name": "data", "nfs": {"server": "nfs", "path": "/data"}}, "spec.pod.volumes[data]", B),
]


def loosened(raw: JsonDict, where: str, value: Any) -> JsonDict:
    out = copy.deepcopy(raw)
    section, _, key = where.partition(".")
    if section == "volume":
        out["pod"]["volumes"].append(value)
    elif section == "annotation":
        out["pod"]["annotations"] = {"container.apparmor.security.beta.kubernetes.io/trainer": value}
    else:
        out[section]["securityContext"][key] = value
    return out


@settings(max_examples=60, deadline=None)
@given(safe_trainer_context, safe_pod_context, allowed_volumes, st.sampled_from(LOOSENINGS))
def test_a_spec_that_loosens_one_thing_is_refused_naming_it_until_the_level_allows_it(
    trainer: JsonDict, pod: JsonDict, volumes: list[JsonDict], loosening: tuple[str, Any, str, Level]
) -> None:
    where, value, field, needs = loosening
    if where == "trainer.capabilities":
        trainer.pop("capabilities", None)  # the loosening is the whole of it
    if where == "trainer.privileged":
        trainer.pop("allowPrivilegeEscalation", None)  # the API refuses false beside privileged
    job = render(loosened(spec_with(trainer, pod, volumes), where, value))
    refusal = workload.pod_security_refusal(job, Level.RESTRICTED)
    assert refusal is not None and f"{field}: " in refusal, refusal
    assert f"set the operator's podSecurity to {needs.value} first" in refusal
    assert workload.pod_security_refusal(job, needs) is None
    assert workload.pod_security_refusal(job, Level.PRIVILEGED) is None


def test_a_too_loose_spec_is_refused_by_default_and_accepted_under_privileged() -> None:
    job = render(
        {
            "trainer": {"image": "img", "securityContext": {"runAsUser": 0, "privileged": True}},
            "pod": {"volumes": [{"name": "host", "hostPath": {"path": "/"}}]},
        }
    )
    refusal = workload.pod_security_refusal(job, OperatorSettings().pod_security)
    assert refusal == (
        "the operator's podSecurity level is restricted, and the pods would break it: "
        "spec.pod.volumes[host].hostPath: mounts the node's filesystem; use another volume type "
        "(podSecurity privileged allows it); "
        "spec.trainer.securityContext.privileged: true; must be false or unset (podSecurity privileged allows it); "
        "spec.trainer.securityContext.runAsUser: 0 (root); must be a non-zero UID or unset "
        "(podSecurity baseline allows it); "
        "spec.trainer.securityContext.allowPrivilegeEscalation: must be false (podSecurity baseline allows it). "
        "Change the spec, or have the platform team set the operator's podSecurity to privileged first"
    )
    privileged = OperatorSettings.model_validate({"podSecurity": "privileged"}).pod_security
    assert workload.pod_security_refusal(job, privileged) is None


def test_adding_a_capability_keeps_drop_all_and_privileged_leaves_escalation_to_the_api_server() -> None:
    added = render({"trainer": {"image": "img", "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}}}})
    context = pod_of(added)["containers"][0]["securityContext"]
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    for loose in ({"privileged": True}, {"capabilities": {"add": ["SYS_ADMIN"]}}):
        job = render({"trainer": {"image": "img", "securityContext": loose}})
        # The API server refuses allowPrivilegeEscalation: false beside either.
        assert "allowPrivilegeEscalation" not in pod_of(job)["containers"][0]["securityContext"]


def test_the_sidecar_keeps_its_own_restricted_context_whatever_the_pod_says() -> None:
    job = render({"trainer": {"image": "img"}, "pod": {"securityContext": {"runAsNonRoot": False}}})
    sidecar = pod_of(job)["initContainers"][0]
    assert [v.container for v in violations(pod_of(job), Level.RESTRICTED)] == [None, workload.TRAINER_CONTAINER]
    assert sidecar["securityContext"]["runAsNonRoot"] is True


# --- a second opinion: checkov ------------------------------------------------------------------

# checkov's checks that are rules of the restricted level (or stricter forms of them).
CHECKOV_RESTRICTED = {
    "CKV_K8S_16": "privileged",
    "CKV_K8S_17": "hostPID",
    "CKV_K8S_18": "hostIPC",
    "CKV_K8S_19": "hostNetwork",
    "CKV_K8S_20": "allowPrivilegeEscalation",
    "CKV_K8S_23": "root containers",
    "CKV_K8S_26": "hostPort",
    "CKV_K8S_28": "NET_RAW not dropped",
    "CKV_K8S_31": "seccomp",
    "CKV_K8S_37": "capabilities: drop ALL",
}
# Specs whose pods pass, and specs whose pods checkov must fail, with the checks it must fail.
CHECKOV_PASSES: dict[str, JsonDict] = {
    "default": {"trainer": {"image": "img"}},
    "user": spec_with({"runAsUser": 1000, "readOnlyRootFilesystem": True}, {"fsGroup": 1000}, []),
    "volumes": spec_with({}, {}, [{"name": f"v{n}", **source} for n, source in enumerate(ALLOWED_VOLUMES)]),
    "localhost": spec_with({"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}, {}, []),
}
CHECKOV_FAILS: dict[str, tuple[JsonDict, set[str]]] = {
    "privileged": (spec_with({"privileged": True}, {}, []), {"CKV_K8S_16", "CKV_K8S_20"}),
    "root": (spec_with({"runAsNonRoot": False, "runAsUser": 0}, {"runAsNonRoot": False}, []), {"CKV_K8S_23"}),
    "escalation": (spec_with({"allowPrivilegeEscalation": True}, {}, []), {"CKV_K8S_20"}),
    "no-drop": (spec_with({"capabilities": {"drop": []}}, {}, []), {"CKV_K8S_28", "CKV_K8S_37"}),
}


@pytest.mark.skipif(checkov() is None, reason="needs checkov (make checkov installs it in .venv/tools)")
def test_checkov_agrees(tmp_path: Path) -> None:
    jobs = {name: render(raw) for name, raw in CHECKOV_PASSES.items()}
    jobs.update({name: render(raw) for name, (raw, _) in CHECKOV_FAILS.items()})
    for name, job in jobs.items():
        job["metadata"]["name"] = name
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(job))
    command = [checkov() or "checkov", "-d", str(tmp_path), "--framework", "kubernetes", "--skip-download"]
    checks = ",".join(CHECKOV_RESTRICTED)
    result = subprocess.run(
        [*command, "--check", checks, "-o", "json"], capture_output=True, text=True, timeout=240, check=False
    )
    report = json.loads(result.stdout)
    assert report["summary"]["parsing_errors"] == 0
    failed: dict[str, set[str]] = {name: set() for name in jobs}
    for check in report["results"]["failed_checks"]:
        failed[check["resource"].split(".")[-1]].add(check["check_id"])
    assert {name: failed[name] for name in CHECKOV_PASSES} == {name: set() for name in CHECKOV_PASSES}
    assert {name: failed[name] for name in CHECKOV_FAILS} == {name: bad for name, (_, bad) in CHECKOV_FAILS.items()}
    for name, (raw, _) in CHECKOV_FAILS.items():  # and gpuwise refuses them too
        assert workload.pod_security_refusal(render(raw), Level.RESTRICTED) is not None, name
