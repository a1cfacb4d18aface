"""From the source objects (read from the cluster or a file) and a request, the pool.

Why one entry point for both APIs: the command, the tests and the golden files see one function —
`generate(documents, request)` — and the API is told by the source's own apiVersion, so a file saved
with `oc get machineset -o yaml` or `kubectl get machinedeployment,awsmachinetemplate,... -o yaml`
works as it is (a `List` is unwrapped).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

import yaml

from sro.nodepools import clusterapi, machinesets
from sro.nodepools.pool import Obj, Pool, dig
from sro.nodepools.request import NodepoolError, PoolRequest, check

Kind = Literal["machineset", "machinedeployment"]
SOURCE_KINDS: Final[Mapping[Kind, tuple[str, str]]] = {
    "machineset": ("MachineSet", machinesets.API_VERSION),
    "machinedeployment": ("MachineDeployment", clusterapi.API_VERSION),
}


def documents(loaded: Iterable[Any]) -> list[Mapping[str, Any]]:
    """YAML documents as objects, `kind: List` unwrapped, empty documents skipped."""
    out: list[Mapping[str, Any]] = []
    for doc in loaded:
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            raise NodepoolError("--from-file", f"a document is not an object: {str(doc)[:60]!r}")
        if doc.get("kind") == "List" or str(doc.get("kind", "")).endswith("List"):
            out.extend(documents(doc.get("items") or ()))
        else:
            out.append(doc)
    return out


def find_source(
    docs: Sequence[Mapping[str, Any]], name: str = "", kind: Kind | None = None
) -> Mapping[str, Any]:
    """The one MachineSet or MachineDeployment among `docs` (the one called `name`, if given)."""
    kinds = [SOURCE_KINDS[kind][0]] if kind else [k for k, _ in SOURCE_KINDS.values()]
    candidates = [d for d in docs if d.get("kind") in kinds]
    if name:
        candidates = [d for d in candidates if dig(d, "metadata.name") == name]
    what = " or ".join(kinds)
    if not candidates:
        raise NodepoolError("--from", f"no {what}{' named ' + repr(name) if name else ''} in the source")
    if len(candidates) > 1:
        names = ", ".join(f"{d.get('kind')} {dig(d, 'metadata.name')}" for d in candidates)
        raise NodepoolError("--from", f"several objects could be the source ({names}): name one with --from")
    return candidates[0]


def find_ref(docs: Sequence[Mapping[str, Any]], ref: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if not ref:
        return None
    for d in docs:
        if d.get("kind") == ref.get("kind") and dig(d, "metadata.name") == ref.get("name"):
            return d
    return None


def generate(
    docs: Sequence[Mapping[str, Any]], req: PoolRequest, name: str = "", kind: Kind | None = None
) -> Pool:
    """The pool for the source among `docs`; a MachineDeployment's templates must be among them too."""
    check(req)
    source = find_source(docs, name, kind)
    if source["kind"] == "MachineSet":
        return machinesets.generate(source, req)
    infra_ref, bootstrap_ref = clusterapi.refs(source)
    return clusterapi.generate(source, find_ref(docs, infra_ref), find_ref(docs, bootstrap_ref), req)


def merge_cluster_autoscaler(ours: Mapping[str, Any], existing: Mapping[str, Any] | None) -> tuple[Obj, str]:
    """Our GPU limit merged into the cluster's ClusterAutoscaler, and a note when one was there.

    Server-side apply replaces the `gpus` list as a whole, so the body carries every GPU type the
    cluster already limits. For the pool's own type, the wider of the two ranges is kept (the lower
    min, the higher max): re-running is a no-op, and sro never narrows a limit an admin set; when
    several pools share a GPU type, raise its max by hand to their sum.
    """
    entry = ours["spec"]["resourceLimits"]["gpus"][0]
    if existing is None:
        return dict(ours), f"ClusterAutoscaler {ours['metadata']['name']} is new: it turns the autoscaler on"
    current = [dict(g) for g in (dig(existing, "spec.resourceLimits.gpus") or ())]
    same = next((g for g in current if g.get("type") == entry["type"]), None)
    if same is None:
        gpus = [*current, dict(entry)]
        note = f"ClusterAutoscaler: GPU type {entry['type']} added to its limits"
    else:
        merged = {
            "type": entry["type"],
            "min": min(int(same.get("min", 0)), entry["min"]),
            "max": max(int(same.get("max", 0)), entry["max"]),
        }
        gpus = [merged if g is same else g for g in current]
        was = f"{same.get('min')}..{same.get('max')}"
        now = "unchanged" if merged == same else f"now {merged['min']}..{merged['max']}"
        note = (
            f"ClusterAutoscaler already limited {entry['type']} to {was}; {now} "
            f"(raise max by hand if several pools share this GPU type)"
        )
    out = {**ours, "spec": {"resourceLimits": {"gpus": gpus}}}
    return out, note


def to_yaml(objects: Iterable[Mapping[str, Any]]) -> str:
    """Multi-document YAML in the objects' own key order (what `kubectl apply -f -` reads)."""
    return "---\n".join(yaml.safe_dump(dict(o), sort_keys=False) for o in objects)
