"""The generated pool, and what both generators (OpenShift MachineSets, Cluster API) share.

Why copy the source and change a few fields rather than build the object from scratch: the source
worker pool carries everything the cloud needs that sro cannot know (image, subnets, security groups,
IAM profile, credentials secret) — the seed's walkthrough does exactly this by hand: copy the worker
MachineSet, change its name, selector and instance type, drop the status. Fields the API server owns
(uid, resourceVersion, managedFields, status, ...) are dropped so the copy can be created.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from sro.api.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from sro.nodepools.instancetypes import InstanceType, Provider, known, lookup
from sro.nodepools.request import ACCELERATOR_LABEL, POOL_LABEL, NodepoolError, PoolRequest

Obj = dict[str, Any]

# Annotations that describe the source pool, never the copy: its size bounds (set by its own
# MachineAutoscaler or by hand), its capacity for scaling from zero, the last kubectl apply.
_SOURCE_ANNOTATION_PREFIXES: Final = ("capacity.cluster-autoscaler.kubernetes.io/",)
_SOURCE_ANNOTATIONS: Final = frozenset(
    {
        "kubectl.kubernetes.io/last-applied-configuration",
        "machine.openshift.io/cluster-api-autoscaler-node-group-min-size",
        "machine.openshift.io/cluster-api-autoscaler-node-group-max-size",
        "machine.openshift.io/GPU",
        "machine.openshift.io/vCPU",
        "machine.openshift.io/memoryMb",
        "machine.openshift.io/maxPods",
        "autoscaling.openshift.io/machineautoscaler",  # the MachineAutoscaler that targets the source
        "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size",
        "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size",
        "machinedeployment.clusters.x-k8s.io/revision",
    }
)


@dataclass(frozen=True)
class Pool:
    """The pool's objects in apply order, and what the admin has to know about them."""

    name: str
    provider: Provider
    instance: InstanceType
    gpu_type: str  # the `cluster-api/accelerator` value the autoscaler counts GPUs under
    objects: tuple[Obj, ...]
    notes: tuple[str, ...] = ()


def instance_type(provider: Provider, req: PoolRequest) -> InstanceType:
    it = lookup(provider, req.instance_type)
    if it is None:
        raise NodepoolError(
            "--instance-type",
            f"{req.instance_type!r} is not a {provider} GPU instance type sro knows; "
            f"known for {provider}: {', '.join(known(provider))}",
        )
    return it


def pool_name(source: str, req: PoolRequest) -> str:
    """--name, else the source's name with its `worker` part turned into `gpu` (the seed's
    `cluster-aus-9195-jg5lt-worker-us-east-2a` -> `...-gpu-us-east-2a`), else `<source>-gpu`."""
    if req.name:
        name = req.name
    else:
        parts = source.split("-")
        if "worker" in parts:
            i = len(parts) - 1 - parts[::-1].index("worker")
            parts[i] = "gpu"
            name = "-".join(parts)
        else:
            name = f"{source}-gpu"
        if len(name) > 63:
            raise NodepoolError("--name", f"the derived name {name!r} is longer than 63: give --name")
    if name == source:
        raise NodepoolError("--name", f"{name!r} is the source's own name: the pool needs a new one")
    return name


def node_labels(name: str, it: InstanceType, req: PoolRequest) -> dict[str, str]:
    """The pool's node labels: its GPU type for the autoscaler, the pool's name, then --label (which
    may override the GPU type, e.g. to share one type between pools)."""
    return {ACCELERATOR_LABEL: it.accelerator, POOL_LABEL: name, **dict(req.labels)}


def new_metadata(source: Mapping[str, Any], name: str) -> Obj:
    """Name, namespace, the source's labels and annotations (less those about the source pool), and
    sro's managed-by label, so `--apply` knows the object is sro's to update."""
    md = source.get("metadata") or {}
    out: Obj = {"name": name}
    if md.get("namespace"):
        out["namespace"] = md["namespace"]
    out["labels"] = {**(md.get("labels") or {}), MANAGED_BY_LABEL: MANAGED_BY_VALUE}
    annotations = {
        k: v
        for k, v in (md.get("annotations") or {}).items()
        if k not in _SOURCE_ANNOTATIONS and not k.startswith(_SOURCE_ANNOTATION_PREFIXES)
    }
    if annotations:
        out["annotations"] = annotations
    return out


def spec_copy(source: Mapping[str, Any]) -> Obj:
    return copy.deepcopy(dict(source.get("spec") or {}))


def unique_selector(
    spec: Obj, template_labels_path: tuple[str, ...], keep: Iterable[str], own_key: str, name: str
) -> None:
    """Select only the pool's own machines: the selector keeps the cluster's label and gets the pool's
    name under `own_key`; the source selector's other keys leave the template's labels too, so neither
    pool's selector matches the other's machines."""
    source_match = dict((spec.get("selector") or {}).get("matchLabels") or {})
    selector = {k: v for k, v in source_match.items() if k in set(keep)}
    selector[own_key] = name
    spec["selector"] = {"matchLabels": selector}
    node: Obj = spec
    for step in template_labels_path[:-1]:
        node = node.setdefault(step, {})
    labels = {k: v for k, v in (node.get(template_labels_path[-1]) or {}).items() if k not in source_match}
    node[template_labels_path[-1]] = {**labels, **selector}


def merged_taints(existing: Iterable[Mapping[str, Any]], ours: Iterable[Mapping[str, str]]) -> list[Obj]:
    """The source's taints, then ours; ours win for the same key and effect."""
    ours = list(ours)
    mine = {(t["key"], t["effect"]) for t in ours}
    return [dict(t) for t in existing if (t.get("key"), t.get("effect")) not in mine] + [
        dict(t) for t in ours
    ]


def dig(obj: Mapping[str, Any], path: str) -> Any:
    """obj at a dotted path, None where any step is missing."""
    node: Any = obj
    for step in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(step)
    return node
