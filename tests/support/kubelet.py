"""What the Job controller and the kubelet make of a rendered Job, for tests that run its containers.

No cluster runs in the tests, so a test that runs a rendered container as a local process needs
the pod the Job controller would create for one completion index, and the container's environment
and command line as the kubelet would resolve them: downward-API `fieldRef`s, `$(VAR)` references,
and the files of downward-API volumes. Only what gpuwise renders is resolved; anything else fails
loudly, so a new kind of reference is noticed instead of silently passed through unresolved.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from gpuwise import wiring

JsonDict = dict[str, Any]

# The Job controller gives every container of an Indexed Job's pod this variable (Kubernetes ≥ 1.22).
COMPLETION_INDEX_ENV: Final = "JOB_COMPLETION_INDEX"
_FIELD_PATH: Final = re.compile(r"^metadata\.(?P<map>labels|annotations)\['(?P<key>[^']+)'\]$")
# The kubelet's expansion: $(VAR) is replaced when VAR is defined, $$ is a literal $, the rest stays.
_REFERENCE: Final = re.compile(r"\$\$|\$\((?P<name>[A-Za-z_][A-Za-z0-9_.-]*)\)")


def indexed_pod(job: JsonDict, index: int, node: str, suffix: str = "abcde") -> JsonDict:
    """The pod the Job controller creates for completion `index` of an Indexed Job, bound to `node`.

    Its name is `<job>-<index>-<random>`; its hostname `<job>-<index>` (so with the template's
    `subdomain` it has the DNS name `<job>-<index>.<subdomain>.<namespace>.svc`); the completion
    index is on it as an annotation and a label, and in every container as `JOB_COMPLETION_INDEX`.
    """
    name, namespace = job["metadata"]["name"], job["metadata"].get("namespace", "default")
    template = job["spec"]["template"]
    spec: JsonDict = {**template["spec"], "nodeName": node, "hostname": f"{name}-{index}"}
    index_ref = {"fieldRef": {"fieldPath": f"metadata.annotations['{wiring.JOB_COMPLETION_INDEX_ANNOTATION}']"}}
    for kind in ("initContainers", "containers"):
        spec[kind] = [
            {**c, "env": [*c.get("env", []), {"name": COMPLETION_INDEX_ENV, "valueFrom": index_ref}]}
            for c in spec.get(kind, [])
        ]
    index_mark = {wiring.JOB_COMPLETION_INDEX_ANNOTATION: str(index)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-{index}-{suffix}",
            "namespace": namespace,
            "labels": {**template["metadata"].get("labels", {}), **index_mark},
            "annotations": {**template["metadata"].get("annotations", {}), **index_mark},
        },
        "spec": spec,
    }


def dns_name(pod: JsonDict) -> str:
    """The pod's stable DNS name under its headless Service (`hostname.subdomain.namespace.svc`)."""
    spec = pod["spec"]
    return f"{spec['hostname']}.{spec['subdomain']}.{pod['metadata']['namespace']}.svc"


def field(pod: JsonDict, path: str) -> str:
    """A downward-API `fieldPath` of `pod`: a missing label or annotation is "", as the kubelet has it."""
    simple = {
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"]["namespace"],
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
    }
    if path in simple:
        return str(simple[path])
    match = _FIELD_PATH.match(path)
    if match is None:
        raise NotImplementedError(f"fieldPath {path!r} is not resolved here")
    return str(pod["metadata"].get(match["map"], {}).get(match["key"], ""))


def expand(text: str, env: Mapping[str, str]) -> str:
    """`text` with the kubelet's `$(VAR)` expansion against `env`."""

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name is None:
            return "$"
        return env.get(name, match[0])

    return _REFERENCE.sub(replace, text)


def container_env(pod: JsonDict, container: JsonDict) -> dict[str, str]:
    """The container's environment as the kubelet sets it: in order, each value expanded against
    the variables before it, `fieldRef`s resolved against the pod (nothing of the image's own)."""
    if container.get("envFrom"):
        raise NotImplementedError("envFrom is not resolved here")
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = expand(var["value"], env)
        elif set(var.get("valueFrom", {})) == {"fieldRef"}:
            env[var["name"]] = field(pod, var["valueFrom"]["fieldRef"]["fieldPath"])
        else:
            raise NotImplementedError(f"env {var['name']}: {var.get('valueFrom')} is not resolved here")
    return env


def container_argv(container: JsonDict, env: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The container's `command` and `args`, each expanded against its environment (an empty list
    where the spec leaves it to the image's entrypoint or command)."""
    return (
        [expand(word, env) for word in container.get("command", [])],
        [expand(word, env) for word in container.get("args", [])],
    )


def materialize_volumes(pod: JsonDict, root: Path) -> dict[str, Path]:
    """A directory under `root` for each of the pod's volumes, as the kubelet sets them up.

    An `emptyDir` is an empty directory; a `downwardAPI` volume holds one file per item with the
    field's value. Every container mounting a volume sees the same directory: that is how the
    containers of a pod share one.
    """
    directories: dict[str, Path] = {}
    for volume in pod["spec"].get("volumes", []):
        directory = directories[volume["name"]] = root / volume["name"]
        directory.mkdir(parents=True)
        if "downwardAPI" in volume:
            for item in volume["downwardAPI"]["items"]:
                (directory / item["path"]).write_text(field(pod, item["fieldRef"]["fieldPath"]))
        elif "emptyDir" not in volume:
            raise NotImplementedError(f"volume {volume['name']} is not set up here")
    return directories
