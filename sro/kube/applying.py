"""Server-side apply and deletion of rendered manifests, and the waits around them (`sro install`).

Why plain dicts as the apply body: the manifests are rendered YAML, and the CRD is a deep schema full
of `x-kubernetes-*` keys and defaults; sending the document itself (lightkube only picks the resource
type from apiVersion and kind) means the API server receives exactly what `deploy/` holds, with no
model round trip in between. Every apply is server-side with field manager `sro` and force: the
installer owns these objects, and a second `sro install` is one request per object that changes
nothing when nothing changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from lightkube import ApiError, Client
from lightkube.core.resource import NamespacedResource
from lightkube.core.resource_registry import resource_registry
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from sro.api.names import FIELD_MANAGER
from sro.kube.client import as_dict
from sro.kube.errors import Errors, KubeError, describe_error, status_code
from sro.kube.resources import SpecialResource


def _what(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata") or {}
    ns = md.get("namespace")
    return f"{obj.get('kind')} {ns + '/' if ns else ''}{md.get('name')}"


def _error(action: str, what: str, e: Exception) -> KubeError:
    if isinstance(e, ApiError):
        return KubeError(
            f"{action} {what}: {e.status.code} {e.status.reason or ''}: {e.status.message or ''}"
        )
    if isinstance(e, httpx.HTTPStatusError):
        return KubeError(f"{action} {what}: {e.response.status_code} {e.response.reason_phrase}")
    return KubeError(f"{action} {what}: {describe_error(e) or f'{type(e).__name__}: {e}'}")


def resource_type(obj: Mapping[str, Any]) -> Any:
    """lightkube's resource class for the object's apiVersion and kind."""
    try:
        return resource_registry.load(obj["apiVersion"], obj["kind"])
    except Exception as e:
        raise KubeError(f"{_what(obj)}: unknown kind {obj.get('apiVersion')}/{obj.get('kind')}: {e}") from e


def _namespace(obj: Mapping[str, Any], res: Any) -> str | None:
    return (obj.get("metadata") or {}).get("namespace") if issubclass(res, NamespacedResource) else None


def apply(client: Client, obj: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    """Server-side apply `obj` (field manager `sro`, force); the object as the server now has it."""
    res = resource_type(obj)
    name = obj["metadata"]["name"]
    try:
        out = client.patch(
            res,
            name,
            dict(obj),
            namespace=_namespace(obj, res),
            patch_type=PatchType.APPLY,
            field_manager=FIELD_MANAGER,
            force=True,
            dry_run=dry_run,
        )
    except Errors as e:
        raise _error("apply", _what(obj), e) from e
    return as_dict(out)


def get(client: Client, obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The object as the server has it, or None when there is none."""
    res = resource_type(obj)
    try:
        return as_dict(client.get(res, obj["metadata"]["name"], namespace=_namespace(obj, res)))
    except Errors as e:
        if status_code(e) == 404:
            return None
        raise _error("read", _what(obj), e) from e


def delete(client: Client, obj: Mapping[str, Any]) -> bool:
    """Ask the server to delete `obj` (dependents in the background); False when it was already gone."""
    res = resource_type(obj)
    try:
        client.delete(res, obj["metadata"]["name"], namespace=_namespace(obj, res))
    except Errors as e:
        if status_code(e) == 404:
            return False
        raise _error("delete", _what(obj), e) from e
    return True


def crd_established(client: Client, name: str) -> bool:
    """True once the API server serves the CRD's resource (condition Established=True)."""
    try:
        crd = as_dict(client.get(CustomResourceDefinition, name))
    except Errors as e:
        if status_code(e) == 404:
            return False
        raise _error("read", f"CustomResourceDefinition {name}", e) from e
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


@dataclass(frozen=True)
class Rollout:
    """Whether a Deployment or DaemonSet runs its current spec everywhere it should, and if not why."""

    done: bool
    message: str


def rollout(client: Client, obj: Mapping[str, Any]) -> Rollout:
    """The rollout of a Deployment or DaemonSet, with the waiting reasons of its pods when not done."""
    live = get(client, obj)
    if live is None:
        return Rollout(False, f"{_what(obj)} does not exist")
    md, spec, st = live["metadata"], live.get("spec") or {}, live.get("status") or {}
    observed = (st.get("observedGeneration") or 0) >= (md.get("generation") or 0)
    if obj["kind"] == "DaemonSet":
        want = st.get("desiredNumberScheduled") or 0
        updated, available = st.get("updatedNumberScheduled") or 0, st.get("numberAvailable") or 0
    else:
        want = spec.get("replicas", 1)
        updated, available = st.get("updatedReplicas") or 0, st.get("availableReplicas") or 0
    if observed and updated >= want and available >= want:
        return Rollout(True, f"{_what(obj)}: {available}/{want} available")
    why = _pod_problems(
        client, md.get("namespace", ""), (spec.get("selector") or {}).get("matchLabels") or {}
    )
    return Rollout(
        False, f"{_what(obj)}: {available}/{want} available, {updated} updated" + (f" ({why})" if why else "")
    )


def _pod_problems(client: Client, namespace: str, match: Mapping[str, str]) -> str:
    """Why the selected pods are not running, e.g. `sro-operator-abc: CrashLoopBackOff`."""
    if not match:
        return ""
    selector = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
    try:
        pods = [as_dict(p) for p in client.list(Pod, namespace=namespace, labels=dict(match))]
    except Errors as e:
        return f"pods {selector}: {_error('list', 'pods', e)}"
    problems = []
    for pod in pods:
        st = pod.get("status") or {}
        for cs in st.get("containerStatuses") or []:
            state = cs.get("state") or {}
            waiting = state.get("waiting") or (state.get("terminated") if not cs.get("ready") else None)
            if waiting:
                reason = waiting.get("reason") or "not ready"
                message = (waiting.get("message") or "").strip().splitlines()
                problems.append(
                    f"{pod['metadata']['name']}: {reason}" + (f": {message[0][:200]}" if message else "")
                )
        if not st.get("containerStatuses"):
            problems.append(f"{pod['metadata']['name']}: {st.get('phase', 'Pending')}")
    return "; ".join(problems[:4])


# ---- SpecialResources (uninstall deletes them first, so the operator's finalizer cleans up) ----
def special_resources(client: Client) -> list[dict[str, Any]]:
    """Every SpecialResource; [] when the CRD is not installed."""
    try:
        return [as_dict(o) for o in client.list(SpecialResource)]
    except Errors as e:
        if status_code(e) == 404:
            return []
        raise _error("list", "specialresources", e) from e


def delete_special_resource(client: Client, name: str) -> None:
    try:
        client.delete(SpecialResource, name)
    except Errors as e:
        if status_code(e) != 404:
            raise _error("delete", f"SpecialResource {name}", e) from e


def drop_finalizers(client: Client, name: str) -> None:
    """Remove every finalizer of a SpecialResource (when no operator is left to run them)."""
    try:
        client.patch(SpecialResource, name, {"metadata": {"finalizers": None}}, patch_type=PatchType.MERGE)
    except Errors as e:
        if status_code(e) != 404:
            raise _error("patch", f"SpecialResource {name}", e) from e
