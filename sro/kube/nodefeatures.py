"""NFD's API objects on the API server: the agent's NodeFeature, and the operator's NodeFeatureRule step.

Why here: only kube/ talks to the API. Two users, two clients:
- `NodeFeatureClient` (sync, the discovery agent): get, create and replace its node's NodeFeature;
  a 404 on the kind itself (no CRD) is reported as such, so the agent warns once and keeps labelling.
- `NodeFeatureRuleIO` (async, the operator): the Nodes from the operator's cache, every NodeFeature
  (all namespaces) and every NodeFeatureRule; then per node a metadata merge patch (labels,
  annotations with the ownership record, and the whole taint list when it changes) guarded by the resourceVersion it was
  planned from, and after it a status merge patch of the capacity (extended resources; the kubelet
  copies them to allocatable). `CrdMissing` when the NFD kinds are not served.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from lightkube import ALL_NS, ApiError, AsyncClient, Client
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from sro.api.nfd_crds import (
    NFD_GROUP,
    NFD_VERSION,
    NODE_FEATURE,
    NODE_FEATURE_RULE,
    NODE_FEATURE_RULES,
    NODE_FEATURES,
)

if TYPE_CHECKING:  # the discovery agent imports this module: keep the operator's modules out of it
    from sro.operator.cluster.cache import ClusterCache
    from sro.operator.nodefeaturerules import NodeState

log = logging.getLogger(__name__)

NodeFeature = create_namespaced_resource(NFD_GROUP, NFD_VERSION, NODE_FEATURE, NODE_FEATURES)
NodeFeatureRule = create_global_resource(NFD_GROUP, NFD_VERSION, NODE_FEATURE_RULE, NODE_FEATURE_RULES)
Errors = (ApiError, httpx.HTTPError, OSError)


def _code(e: Exception) -> int:
    if isinstance(e, httpx.HTTPStatusError):
        return e.response.status_code
    return int(getattr(getattr(e, "status", None), "code", 0) or 0)


def _dict(obj: Any) -> dict[str, Any]:
    return dict(obj.to_dict() if hasattr(obj, "to_dict") else obj)


def _kind_missing(e: Exception) -> bool:
    """A 404 whose body is not about one object: the resource type itself is not served."""
    if _code(e) != 404:
        return False
    if isinstance(e, ApiError):
        return not (e.status.details and e.status.details.name)
    return True


class NodeFeatureApiError(RuntimeError):
    """The API server refused or was away; `missing_crd`: the NodeFeature kind is not served."""

    def __init__(self, message: str, *, missing_crd: bool = False, conflict: bool = False) -> None:
        super().__init__(message)
        self.missing_crd = missing_crd
        self.conflict = conflict


class NodeFeatureClient:
    """The discovery agent's NodeFeature I/O through one lightkube client."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def _error(self, action: str, what: str, e: Exception) -> NodeFeatureApiError:
        if _kind_missing(e):
            return NodeFeatureApiError(
                f"{action} {what}: the NodeFeature kind is not served (the {NODE_FEATURES}.{NFD_GROUP} CRD "
                "is not installed; `sro install` installs it)",
                missing_crd=True,
            )
        if isinstance(e, ApiError):
            return NodeFeatureApiError(
                f"{action} {what}: {e.status.code} {e.status.reason or ''} {e.status.message or ''}".strip(),
                conflict=_code(e) == 409,
            )
        return NodeFeatureApiError(f"{action} {what}: API server unreachable ({type(e).__name__}: {e})")

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return _dict(self.client.get(NodeFeature, name, namespace=namespace))
        except Errors as e:
            if _code(e) == 404 and not _kind_missing(e):
                return None
            raise self._error("read", f"NodeFeature {namespace}/{name}", e) from e

    def create(self, doc: Mapping[str, Any]) -> None:
        md = doc["metadata"]
        try:
            self.client.create(NodeFeature.from_dict(dict(doc)), namespace=md["namespace"])
        except Errors as e:
            raise self._error("create", f"NodeFeature {md['namespace']}/{md['name']}", e) from e

    def replace(self, doc: Mapping[str, Any]) -> None:
        md = doc["metadata"]
        try:
            self.client.replace(NodeFeature.from_dict(dict(doc)))
        except Errors as e:
            raise self._error("update", f"NodeFeature {md['namespace']}/{md['name']}", e) from e


class CrdMissing(RuntimeError):
    """NodeFeature or NodeFeatureRule is not served (their CRDs are not installed)."""


@dataclass(frozen=True)
class Snapshot:
    nodes: list[NodeState]
    node_features: list[dict[str, Any]]
    rules: list[dict[str, Any]]


class NodeFeatureRuleIO:
    """The operator's reads and node patches for the NodeFeatureRule step."""

    def __init__(self, client: AsyncClient, cache: ClusterCache) -> None:
        self.client = client
        self.cache = cache

    async def _list(self, res: Any, **kwargs: Any) -> list[dict[str, Any]]:
        try:
            return [_dict(o) async for o in self.client.list(res, **kwargs)]
        except Errors as e:
            if _code(e) == 404:
                raise CrdMissing(
                    f"{res.__name__}: not served (is its CRD installed? `sro install` does)"
                ) from e
            raise

    async def observe(self) -> Snapshot:
        rules = await self._list(NodeFeatureRule)
        features = await self._list(NodeFeature, namespace=ALL_NS)
        await self.cache.synced()
        return Snapshot(self.cache.node_states(), features, rules)

    async def patch_node(
        self,
        name: str,
        labels: Mapping[str, str | None],
        annotations: Mapping[str, str | None],
        taints: list[dict[str, Any]] | None,
        resource_version: str,
    ) -> str:
        """Metadata (and taints): "ok", "conflict" (re-plan), "gone" or an error message."""
        body: dict[str, Any] = {"metadata": {"resourceVersion": resource_version}}
        if labels:
            body["metadata"]["labels"] = dict(labels)
        if annotations:
            body["metadata"]["annotations"] = dict(annotations)
        if taints is not None:
            body["spec"] = {"taints": taints}
        try:
            await self.client.patch(Node, name, body, patch_type=PatchType.MERGE)
        except Errors as e:
            return {409: "conflict", 404: "gone"}.get(_code(e), f"{type(e).__name__}: {e}")
        return "ok"

    async def patch_capacity(self, name: str, capacity: Mapping[str, str | None]) -> str:
        """The node's status capacity (extended resources): "ok", "gone" or an error message."""
        try:
            await self.client.patch(
                Node.Status, name, {"status": {"capacity": dict(capacity)}}, patch_type=PatchType.MERGE
            )
        except Errors as e:
            return "gone" if _code(e) == 404 else f"{type(e).__name__}: {e}"
        return "ok"


def rule_names(client: Client) -> list[str]:
    """The NodeFeatureRules on the cluster (sync, for `sro uninstall`); [] when the kind is not served."""
    try:
        return sorted(_dict(o)["metadata"]["name"] for o in client.list(NodeFeatureRule))
    except Errors as e:
        if _code(e) == 404:
            return []
        raise
