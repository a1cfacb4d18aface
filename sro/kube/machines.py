"""The machine APIs `sro nodepool` reads and writes: OpenShift MachineSets and autoscalers, Cluster
API MachineDeployments and their templates.

Why a dry run of every object before the first real apply: a pool is several objects, and the API
server is the judge of each (schema, admission webhooks); asking it about all of them first means a
refusal leaves nothing behind. Should a real apply still fail half-way, the objects this run created
are deleted again. An existing object of the pool's name that sro did not create is never taken
over (only the cluster's one ClusterAutoscaler is shared: sro applies its GPU limits alone).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from lightkube import Client
from lightkube.core.resource_registry import resource_registry
from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from sro.api.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from sro.kube.applying import apply, delete, get
from sro.kube.errors import KubeError

CLUSTER_SCOPED: Final = frozenset({"ClusterAutoscaler"})
SHARED: Final = frozenset({"ClusterAutoscaler"})


def register(api_version: str, kind: str) -> None:
    """Make lightkube know a machine API kind (plural: the kind in lower case plus `s`, as all of
    these CRDs name theirs)."""
    if resource_registry.get(api_version, kind) is not None:
        return
    group, _, version = api_version.rpartition("/")
    make = create_global_resource if kind in CLUSTER_SCOPED else create_namespaced_resource
    make(group, version, kind, f"{kind.lower()}s")


def _get(client: Client, api_version: str, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
    register(api_version, kind)
    meta: dict[str, Any] = {"name": name}
    if kind not in CLUSTER_SCOPED:
        meta["namespace"] = namespace
    return get(client, {"apiVersion": api_version, "kind": kind, "metadata": meta})


def read_source(
    client: Client, api_version: str, kind: str, name: str, namespace: str
) -> list[dict[str, Any]]:
    """The source pool: a MachineSet; or a MachineDeployment and the templates it references."""
    source = _get(client, api_version, kind, name, namespace)
    if source is None:
        raise KubeError(f"{kind} {namespace}/{name} not found (the pool to copy; --namespace?)")
    out = [source]
    template = (source.get("spec") or {}).get("template", {}).get("spec") or {}
    for ref in (template.get("infrastructureRef"), (template.get("bootstrap") or {}).get("configRef")):
        if isinstance(ref, Mapping) and ref.get("apiVersion") and ref.get("kind") and ref.get("name"):
            found = _get(
                client, ref["apiVersion"], ref["kind"], ref["name"], ref.get("namespace") or namespace
            )
            if found is not None:
                out.append(found)
    return out


def read(client: Client, obj: Mapping[str, Any]) -> dict[str, Any] | None:
    register(obj["apiVersion"], obj["kind"])
    return get(client, obj)


def _what(obj: Mapping[str, Any]) -> str:
    md = obj["metadata"]
    return f"{obj['kind']} {md['namespace'] + '/' if md.get('namespace') else ''}{md['name']}"


def apply_all(
    client: Client, objects: Sequence[Mapping[str, Any]], progress: Callable[[str], None] = lambda _: None
) -> list[dict[str, Any]]:
    """Server-side apply every object (field manager `sro`), all or none; the server's copies."""
    existed: dict[int, bool] = {}
    for i, obj in enumerate(objects):
        live = read(client, obj)
        existed[i] = live is not None
        if live is not None and obj["kind"] not in SHARED:
            owner = ((live.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY_LABEL)
            if owner != MANAGED_BY_VALUE:
                raise KubeError(
                    f"{_what(obj)} exists and was not created by sro ({MANAGED_BY_LABEL} is "
                    f"{owner!r}): choose another --name"
                )
    for obj in objects:
        apply(client, obj, dry_run=True)
    done: list[dict[str, Any]] = []
    try:
        for i, obj in enumerate(objects):
            done.append(apply(client, obj))
            progress(f"{_what(obj)} {'configured' if existed[i] else 'created'}")
    except KubeError:
        for i in reversed(range(len(done))):
            if not existed[i]:
                delete(client, objects[i])
                progress(f"{_what(objects[i])} deleted again")
        raise
    return done
