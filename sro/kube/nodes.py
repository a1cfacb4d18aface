"""Reading and patching one Node: its labels and annotations (the node agents, `NodeLabels`), and any
merge patch of it as raw JSON (the operator's watch-fed cache, `get_node_json`/`patch_node_json`).

Why a JSON merge patch carrying the resourceVersion: a node agent changes only the keys it owns,
and the resourceVersion makes the API server refuse the patch (409) if anyone changed the Node
since we read it, so a label someone else added a moment ago is never clobbered by a stale plan;
the caller re-reads and re-plans. `None` as a value removes the key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from sro.kube.errors import Errors


@dataclass(frozen=True)
class NodeMeta:
    """The parts of a Node a labeller needs."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    resource_version: str = ""
    uid: str = ""  # for owner references to the Node (the NodeFeature the agent writes)


class NodeApiError(RuntimeError):
    """The API server refused or could not be reached; `conflict` means re-read and retry."""

    def __init__(self, message: str, *, conflict: bool = False, not_found: bool = False) -> None:
        super().__init__(message)
        self.conflict = conflict
        self.not_found = not_found


def _meta(node: Any) -> NodeMeta:
    md = node.metadata
    return NodeMeta(
        name=md.name,
        labels=dict(md.labels or {}),
        annotations=dict(md.annotations or {}),
        resource_version=md.resourceVersion or "",
        uid=md.uid or "",
    )


def _wrap(action: str, name: str, e: Exception) -> NodeApiError:
    if isinstance(e, ApiError):
        code = e.status.code or 0
        return NodeApiError(
            f"{action} node {name}: {code} {e.status.reason or ''} {e.status.message or ''}".strip(),
            conflict=code == 409,
            not_found=code == 404,
        )
    return NodeApiError(f"{action} node {name}: API server unreachable ({type(e).__name__}: {e})")


class NodeLabels:
    """Get and merge-patch a Node's metadata through one lightkube client."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def read(self, name: str) -> NodeMeta:
        try:
            return _meta(self.client.get(Node, name=name))
        except Errors as e:
            raise _wrap("read", name, e) from e

    def patch(
        self,
        name: str,
        labels: Mapping[str, str | None],
        annotations: Mapping[str, str | None],
        resource_version: str = "",
    ) -> NodeMeta:
        metadata: dict[str, Any] = {}
        if labels:
            metadata["labels"] = dict(labels)
        if annotations:
            metadata["annotations"] = dict(annotations)
        if resource_version:
            metadata["resourceVersion"] = resource_version
        try:
            node = self.client.patch(Node, name, {"metadata": metadata}, patch_type=PatchType.MERGE)
        except Errors as e:
            raise _wrap("patch", name, e) from e
        return _meta(node)


async def get_node_json(http: httpx.AsyncClient, name: str) -> dict[str, Any] | None:
    """The Node as the API server has it now (None: gone); any other refusal raises."""
    resp = await http.get(f"/api/v1/nodes/{name}")
    if resp.status_code == 404:
        return None
    resp.raise_for_status()
    doc: dict[str, Any] = resp.json()
    return doc


async def patch_node_json(
    http: httpx.AsyncClient, name: str, body: Mapping[str, Any]
) -> dict[str, Any] | None:
    """A merge patch of a Node; the Node as the answer has it (None: the node is gone). Any other
    refusal raises (`409`: it changed since the resourceVersion in `body`; re-plan)."""
    resp = await http.patch(
        f"/api/v1/nodes/{name}",
        content=json.dumps(body),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    if resp.status_code == 404:
        return None
    resp.raise_for_status()
    doc: dict[str, Any] = resp.json()
    return doc


async def patch_node_conditions(
    http: httpx.AsyncClient, name: str, conditions: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """A strategic merge patch of a Node's status conditions: merged by `type` (the kubelet's own
    conditions stay as they are, which a merge patch's whole-list replace would wipe). The Node as
    the answer has it (None: the node is gone); any other refusal raises."""
    resp = await http.patch(
        f"/api/v1/nodes/{name}/status",
        content=json.dumps({"status": {"conditions": [dict(c) for c in conditions]}}),
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    if resp.status_code == 404:
        return None
    resp.raise_for_status()
    doc: dict[str, Any] = resp.json()
    return doc
