"""The NodeFeatureRule step's cluster I/O: what one pass reads, and its per-node patches.

Why here and not in kube/: the pass reads the operator's cache for its Nodes (the records the
SpecialResources' passes read too); kube/ only lends the requests. A pass reads every NodeFeature
(all namespaces) and every NodeFeatureRule, then per node writes a metadata merge patch (labels,
annotations with the ownership record, and the whole taint list when it changes) guarded by the
resourceVersion it was planned from, and after it a status merge patch of the capacity (extended
resources; the kubelet copies them to allocatable). `CrdMissing` when the NFD kinds are not served.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sro.kube.errors import Errors, status_code
from sro.kube.objects import ALL_NAMESPACES, AsyncObjects
from sro.operator.cluster.cache import ClusterCache
from sro.operator.observed import NodeInfo


class CrdMissing(RuntimeError):
    """NodeFeature or NodeFeatureRule is not served (their CRDs are not installed)."""


@dataclass(frozen=True)
class Snapshot:
    nodes: list[NodeInfo]
    node_features: list[dict[str, Any]]
    rules: list[dict[str, Any]]


class NodeFeatureRuleIO:
    """The operator's reads and node patches for the NodeFeatureRule step."""

    def __init__(self, objects: AsyncObjects, cache: ClusterCache) -> None:
        self.objects = objects
        self.cache = cache

    async def _list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        try:
            return await self.objects.list(kind, namespace=namespace)
        except Errors as e:
            if status_code(e) == 404:
                raise CrdMissing(f"{kind}: not served (is its CRD installed? `sro install` does)") from e
            raise

    async def observe(self) -> Snapshot:
        rules = await self._list("NodeFeatureRule")
        features = await self._list("NodeFeature", namespace=ALL_NAMESPACES)
        self.cache.set_node_features(features)  # the health reports remediation reads (no second list)
        await self.cache.synced()
        return Snapshot(list(self.cache.node_infos()), features, rules)

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
            await self.objects.merge_patch("Node", name, body)
        except Errors as e:
            return {409: "conflict", 404: "gone"}.get(status_code(e), f"{type(e).__name__}: {e}")
        return "ok"

    async def patch_capacity(self, name: str, capacity: Mapping[str, str | None]) -> str:
        """The node's status capacity (extended resources): "ok", "gone" or an error message."""
        try:
            await self.objects.merge_patch(
                "Node", name, {"status": {"capacity": dict(capacity)}}, status=True
            )
        except Errors as e:
            return "gone" if status_code(e) == 404 else f"{type(e).__name__}: {e}"
        return "ok"
