"""The Nodes and the operands' pods, as the operator's records, kept current by two reflectors.

One watch on Nodes and one on the pods of every SpecialResource (in the operator's namespace,
labelled `sro.dev/specialresource`) serve the whole operator: every SpecialResource's passes and the
NodeFeatureRule step read their records from here instead of listing the cluster each pass, and
their wake-ups come from the same events (`nodes.listeners`, `pods.listeners`: called with the event
type and the object, or with "RESYNC" and None after a fresh list).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import httpx

from sro.api.names import SPECIALRESOURCE_LABEL
from sro.kube.reflector import Reflector
from sro.operator.nodefeaturerules import NodeState, node_state
from sro.operator.observed import NodeInfo, PodInfo, node_from_json, pod_from_json

SYNC_TIMEOUT = 60.0  # a pass waits this long for the first lists, then fails with the reason (retried)


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def _pod_key(obj: Mapping[str, Any]) -> str:
    md = obj["metadata"]
    return f"{(md.get('labels') or {}).get(SPECIALRESOURCE_LABEL, '')}/{md['name']}"


def _node(obj: Mapping[str, Any]) -> tuple[NodeInfo, NodeState]:
    return node_from_json(obj), node_state(obj)


class ClusterCache:
    def __init__(self, http: httpx.AsyncClient, namespace: str) -> None:
        self.http = http
        self.nodes: Reflector[tuple[NodeInfo, NodeState]] = Reflector(http, "/api/v1/nodes", _name, _node)
        self.pods: Reflector[PodInfo] = Reflector(
            http,
            f"/api/v1/namespaces/{namespace}/pods",
            _pod_key,
            pod_from_json,
            params={"labelSelector": SPECIALRESOURCE_LABEL},
        )

    async def run(self) -> None:
        """Both reflectors, for ever (cancel the task to stop)."""
        await asyncio.gather(self.nodes.run(), self.pods.run())

    async def synced(self) -> None:
        """Return once both first lists are in; raise `ListWatchError` with the reason otherwise."""
        await self.nodes.wait_synced(SYNC_TIMEOUT)
        await self.pods.wait_synced(SYNC_TIMEOUT)

    def node_infos(self) -> tuple[NodeInfo, ...]:
        return tuple(info for info, _ in self.nodes.items.values())

    def node_states(self) -> list[NodeState]:
        return [state for _, state in self.nodes.items.values()]

    def pods_of(self, sr: str) -> list[PodInfo]:
        prefix = f"{sr}/"
        return [p for key, p in self.pods.items.items() if key.startswith(prefix)]

    async def get_node(self, name: str) -> dict[str, Any] | None:
        """The Node as the API server has it now (None: gone), for a change that must not be stale."""
        resp = await self.http.get(f"/api/v1/nodes/{name}")
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        doc: dict[str, Any] = resp.json()
        self.nodes.update(doc)
        return doc

    async def patch_node(self, name: str, body: Mapping[str, Any]) -> bool:
        """A merge patch of a Node; the answer goes into the cache (the next pass reads what this one
        wrote). False when the node is gone; an HTTP error for any other refusal (409: re-plan)."""
        resp = await self.http.patch(
            f"/api/v1/nodes/{name}",
            content=json.dumps(body),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        if resp.status_code == 404:
            return False
        resp.raise_for_status()
        self.nodes.update(resp.json())
        return True
