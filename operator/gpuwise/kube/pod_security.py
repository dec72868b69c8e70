"""Kubernetes' Pod Security Standards (v1.30), checked on a pod spec before it goes to the API server.

The API server's own Pod Security admission judges a namespace's pods by the same three levels,
but it refuses a Job's pods one by one, long after the Job was created, with nothing on the
TrainingJob. gpuwise judges the pod it renders instead, so a job that asks for more than the
operator allows is refused up front, with a message naming the field.

Each rule reports the fields that break it and the loosest level's name that still forbids them:
a violation of a baseline rule needs `privileged`, one of a restricted-only rule needs `baseline`.
`violations(pod, level)` keeps those the given level forbids. The rules and their allowed values
are those of https://kubernetes.io/docs/concepts/security/pod-security-standards/ for v1.30.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

JsonDict = dict[str, Any]


class Level(StrEnum):
    """The Pod Security levels, from the loosest; the values are the namespace labels' own."""

    PRIVILEGED = "privileged"
    BASELINE = "baseline"
    RESTRICTED = "restricted"

    def allows(self, needed: Level) -> bool:
        """Whether pods that need `needed` pass under this level."""
        return _LOOSENESS[self] >= _LOOSENESS[needed]


_LOOSENESS: Final = {Level.RESTRICTED: 0, Level.BASELINE: 1, Level.PRIVILEGED: 2}

# Baseline: capabilities a container may add, sysctls a pod may set, SELinux types it may use.
BASELINE_CAPABILITIES: Final = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
SAFE_SYSCTLS: Final = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES: Final = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
APPARMOR_ANNOTATION: Final = "container.apparmor.security.beta.kubernetes.io/"
# Restricted: the volume sources a pod may use, and what a container may add and must drop.
RESTRICTED_VOLUMES: Final = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
RESTRICTED_CAPABILITIES: Final = frozenset({"NET_BIND_SERVICE"})
RESTRICTED_SECCOMP: Final = frozenset({"RuntimeDefault", "Localhost"})


@dataclass(frozen=True)
class Violation:
    """One field of the pod that a level forbids.

    `container` is the container's name, or None for a pod-level field; `field` is the path below
    the container (or the pod spec), e.g. `securityContext.privileged` or `volumes[data].hostPath`.
    `needs` is the strictest level that allows it, `problem` says what is wrong and what passes.
    """

    container: str | None
    field: str
    problem: str
    needs: Level


def violations(pod_spec: JsonDict, level: Level, annotations: Mapping[str, str] | None = None) -> list[Violation]:
    """What in the pod (its spec, and its template's annotations for AppArmor) `level` forbids."""
    found = [*_baseline(pod_spec, annotations or {}), *_restricted(pod_spec)]
    return [v for v in found if not level.allows(v.needs)]


def needed(found: Iterable[Violation]) -> Level:
    """The strictest level that allows all of `found`."""
    return max((v.needs for v in found), key=_LOOSENESS.__getitem__, default=Level.RESTRICTED)


def _containers(pod_spec: JsonDict) -> Iterator[JsonDict]:
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        yield from pod_spec.get(kind) or []


def _context(obj: JsonDict) -> JsonDict:
    return obj.get("securityContext") or {}


def _pod_and_containers(pod_spec: JsonDict) -> Iterator[tuple[str | None, JsonDict]]:
    """The pod's securityContext, then each container's: the places most rules look at."""
    yield None, _context(pod_spec)
    for container in _containers(pod_spec):
        yield container.get("name", ""), _context(container)


def _baseline(pod_spec: JsonDict, annotations: Mapping[str, str]) -> Iterator[Violation]:
    def forbid(container: str | None, field: str, problem: str) -> Violation:
        return Violation(container, field, problem, Level.PRIVILEGED)

    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(host):
            yield forbid(None, host, "shares the node's namespace; must be false or unset")
    for volume in pod_spec.get("volumes") or []:
        if "hostPath" in volume:
            yield forbid(
                None, f"volumes[{volume.get('name')}].hostPath", "mounts the node's filesystem; use another volume type"
            )
    for sysctl in _context(pod_spec).get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            yield forbid(None, "securityContext.sysctls", f"{sysctl.get('name')!r} is not one of the safe sysctls")
    for key, value in annotations.items():
        if key.startswith(APPARMOR_ANNOTATION) and value != "runtime/default" and not value.startswith("localhost/"):
            yield forbid(
                None, f"metadata.annotations[{key}]", f"{value!r}: must be runtime/default or localhost/<profile>"
            )
    for spec in _containers(pod_spec):
        name = spec.get("name", "")
        for port in spec.get("ports") or []:
            if port.get("hostPort"):
                yield forbid(name, "ports.hostPort", f"{port['hostPort']} opens a port on the node; must be 0 or unset")
        context = _context(spec)
        if context.get("privileged"):
            yield forbid(name, "securityContext.privileged", "true; must be false or unset")
        added = set((context.get("capabilities") or {}).get("add") or [])
        if beyond := sorted(added - BASELINE_CAPABILITIES):
            yield forbid(name, "securityContext.capabilities.add", f"{', '.join(beyond)} beyond the baseline set")
        if context.get("procMount") not in (None, "Default"):
            yield forbid(name, "securityContext.procMount", f"{context['procMount']!r}; must be Default or unset")
    for container, context in _pod_and_containers(pod_spec):
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            yield forbid(container, "securityContext.windowsOptions.hostProcess", "true; must be false or unset")
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            yield forbid(
                container, "securityContext.seccompProfile.type", "Unconfined; use RuntimeDefault or Localhost"
            )
        if (context.get("appArmorProfile") or {}).get("type") == "Unconfined":
            yield forbid(
                container, "securityContext.appArmorProfile.type", "Unconfined; use RuntimeDefault or Localhost"
            )
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES:
            yield forbid(
                container, "securityContext.seLinuxOptions.type", f"{selinux['type']!r} is not a container type"
            )
        for part in ("user", "role"):
            if selinux.get(part):
                yield forbid(container, f"securityContext.seLinuxOptions.{part}", "must be unset")


def _restricted(pod_spec: JsonDict) -> Iterator[Violation]:
    def forbid(container: str | None, field: str, problem: str) -> Violation:
        return Violation(container, field, problem, Level.BASELINE)

    pod = _context(pod_spec)
    for volume in pod_spec.get("volumes") or []:
        kinds = sorted(set(volume) - {"name"})
        if "hostPath" not in kinds and not set(kinds) <= RESTRICTED_VOLUMES:  # hostPath: a baseline violation
            allowed = ", ".join(sorted(RESTRICTED_VOLUMES))
            yield forbid(None, f"volumes[{volume.get('name')}]", f"a {'/'.join(kinds)} volume; allowed: {allowed}")
    if pod.get("runAsNonRoot") is False:
        yield forbid(None, "securityContext.runAsNonRoot", "false; must be true or unset")
    for container, context in _pod_and_containers(pod_spec):
        if context.get("runAsUser") == 0:
            yield forbid(container, "securityContext.runAsUser", "0 (root); must be a non-zero UID or unset")
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type")
    for spec in _containers(pod_spec):
        name, context = spec.get("name", ""), _context(spec)
        if context.get("allowPrivilegeEscalation") is not False:
            yield forbid(name, "securityContext.allowPrivilegeEscalation", "must be false")
        non_root = context.get("runAsNonRoot")
        if non_root is False or (non_root is None and pod.get("runAsNonRoot") is not True):
            yield forbid(name, "securityContext.runAsNonRoot", "must be true, here or for the pod")
        seccomp = (context.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in RESTRICTED_SECCOMP and seccomp != "Unconfined":  # Unconfined: a baseline violation
            yield forbid(
                name, "securityContext.seccompProfile.type", "must be RuntimeDefault or Localhost, here or for the pod"
            )
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            yield forbid(name, "securityContext.capabilities.drop", "must include ALL")
        added = set(capabilities.get("add") or [])
        if beyond := sorted((added & BASELINE_CAPABILITIES) - RESTRICTED_CAPABILITIES):
            yield forbid(name, "securityContext.capabilities.add", f"{', '.join(beyond)}: only NET_BIND_SERVICE")
