"""Cluster partitioning for a SpecialResource: the hard taint, owned PriorityClasses, per-namespace
quotas (pure: spec and observed objects in, objects, taints and status rows out).

Why the taint is keyed by the extended resource's name: the API server's ExtendedResourceToleration
admission plugin adds a toleration `<resource>:Exists:NoSchedule` to every pod that *requests*
that resource, so GPU pods land on the tainted nodes with nothing written by hand and everything
else stays off. It only adds tolerations for the names a pod requests, though: when the device
plugin announces several names on a node (time-slicing's `.shared` or an explicit `rename`, MIG
`mixed`), pods requesting the other names would be kept off by a single taint. sro refuses the
taint in that case (Degraded, naming the field) rather than taint per name, which would need every
name's pods to request every name. The taint's value is the SpecialResource's name, so removal
only ever takes away the taint this SpecialResource put there, never one an admin set by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from sro.api.names import (
    API_VERSION,
    KIND,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    SPECIALRESOURCE_LABEL,
)
from sro.api.recipes import Recipe
from sro.api.specialresource import SpecError, SpecialResourceSpec
from sro.operator.observed import QuotaInfo

TAINT_EFFECT = "NoSchedule"


def announced_names(resource: str, plugin_config: str) -> tuple[list[str], bool]:
    """The extra resource names the device plugin's config announces besides `resource`, and
    whether it uses MIG `mixed` (one name per MIG profile)."""
    try:
        doc = yaml.safe_load(plugin_config or "") or {}  # what the plugin itself reads, aliases too
    except Exception:  # a YAMLError, or RecursionError when nested past the stack
        return [], False  # the plugin reports its own config errors; no extra names then
    if not isinstance(doc, Mapping):
        return [], False
    flags = doc.get("flags") or {}
    mixed = isinstance(flags, Mapping) and flags.get("migStrategy") == "mixed"
    extra: list[str] = []
    ts = (doc.get("sharing") or {}).get("timeSlicing") or {}
    if isinstance(ts, Mapping):
        rename_default = bool(ts.get("renameByDefault"))
        for entry in ts.get("resources") or []:
            if not isinstance(entry, Mapping):
                continue
            name = entry.get("rename") or (f"{entry.get('name')}.shared" if rename_default else None)
            if name and name != resource and name not in extra:
                extra.append(str(name))
    return extra, mixed


def check(spec: SpecialResourceSpec, recipe: Recipe) -> None:
    """Refuse partitioning that cannot work, naming the field."""
    extra, mixed = announced_names(recipe.resource, spec.device_plugin_config)
    if spec.partitioning.taint and (extra or mixed):
        names = ", ".join([recipe.resource, *extra]) + (", and one per MIG profile" if mixed else "")
        raise SpecError(
            "spec.partitioning.taint: the device plugin announces several resource names "
            f"({names}); ExtendedResourceToleration only tolerates the names a pod requests, so one taint "
            f"named {recipe.resource} would keep pods requesting the others off these nodes. Turn off "
            "the rename (sharing.timeSlicing.renameByDefault / rename) or MIG mixed, or taint by hand"
        )
    announced = {recipe.resource, *extra}
    for i, q in enumerate(spec.partitioning.quotas):
        if q.resource and q.resource not in announced:
            raise SpecError(
                f"spec.partitioning.quotas[{i}].resource: {q.resource!r} is not announced by recipe "
                f"{recipe.name!r} (it announces {', '.join(sorted(announced))})"
            )


def taint(sr: str, resource: str) -> dict[str, str]:
    return {"key": resource, "value": sr, "effect": TAINT_EFFECT}


def _meta(sr: str, uid: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {
        "name": name,
        "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, SPECIALRESOURCE_LABEL: sr},
        "ownerReferences": [
            {"apiVersion": API_VERSION, "kind": KIND, "name": sr, "uid": uid, "blockOwnerDeletion": False}
        ],
    }
    if namespace:
        md["namespace"] = namespace
    return md


def quota_name(sr: str) -> str:
    return f"sro-{sr}"


def objects(
    sr: str, uid: str, spec: SpecialResourceSpec, recipe: Recipe, namespaces: Sequence[str]
) -> list[dict[str, Any]]:
    """PriorityClasses, and per namespace that exists a ResourceQuota (and a LimitRange `max` if
    asked — never a `default`, which would hand every container a device)."""
    out: list[dict[str, Any]] = []
    for pc in spec.partitioning.priorities:
        doc: dict[str, Any] = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": _meta(sr, uid, pc.name),
            "value": pc.value,
            "preemptionPolicy": pc.preemption_policy,
            "globalDefault": False,
        }
        if pc.description:
            doc["description"] = pc.description
        out.append(doc)
    by_ns: dict[str, dict[str, str]] = {}
    maxes: dict[str, dict[str, str]] = {}
    for q in spec.partitioning.quotas:
        if q.namespace not in namespaces:
            continue
        res = q.resource or recipe.resource
        by_ns.setdefault(q.namespace, {})[f"requests.{res}"] = str(q.limit)
        if q.max_per_container is not None:
            maxes.setdefault(q.namespace, {})[res] = str(q.max_per_container)
    for ns, hard in sorted(by_ns.items()):
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": _meta(sr, uid, quota_name(sr), ns),
                "spec": {"hard": hard},
            }
        )
        if ns in maxes:
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "LimitRange",
                    "metadata": _meta(sr, uid, quota_name(sr), ns),
                    "spec": {"limits": [{"type": "Container", "max": maxes[ns]}]},
                }
            )
    return out


def quota_rows(
    spec: SpecialResourceSpec, recipe: Recipe, quotas: Sequence[QuotaInfo], namespaces: Sequence[str]
) -> list[dict[str, str]]:
    """`status.quotas`: each namespace's used / hard for the resource, or why it has no quota yet."""
    rows = []
    found = {q.namespace: q for q in quotas}
    for q in spec.partitioning.quotas:
        res = q.resource or recipe.resource
        row = {"namespace": q.namespace, "resource": res, "hard": str(q.limit)}
        if q.namespace not in namespaces:
            row["problem"] = "namespace not found: the quota is created once it exists"
        elif q.namespace in found:
            info = found[q.namespace]
            row["used"] = info.used.get(f"requests.{res}", "0")
            row["hard"] = info.hard.get(f"requests.{res}", row["hard"])
        rows.append(row)
    return rows
