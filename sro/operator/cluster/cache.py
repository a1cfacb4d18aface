"""The Nodes and the operands' pods, as the operator's records, kept current by two reflectors.

One watch on Nodes and one on the pods of every SpecialResource (in the operator's namespace,
labelled `sro.dev/specialresource`) serve the whole operator: every SpecialResource's passes and the
NodeFeatureRule step read their records from here instead of listing the cluster each pass, and
their wake-ups come from the same events (`nodes.listeners`, `pods.listeners`: called with the event
type and the object, or with "RESYNC" and None after a fresh list). Node writes go through the cache
too, so the next pass reads what this one wrote (an older watch event never undoes it).

The device plugins' health reports ride on the NodeFeatures (`sro.devices.healthreport`), which the
NodeFeatureRule step lists anyway on every NodeFeature event: it hands them here (`set_node_features`)
and a SpecialResource's remediation reads them from `health` without a list of its own; a change
wakes the passes (`health_listeners`) within the NodeFeatureRule step's debounce of the event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sro.api.names import SPECIALRESOURCE_LABEL
from sro.devices.healthreport import HealthReport, reports_from_nodefeature
from sro.kube.client import HttpClient
from sro.kube.nodes import get_node_json, patch_node_conditions, patch_node_json
from sro.kube.reflector import Reflector
from sro.operator.observed import NodeInfo, PodInfo, node_from_json, pod_from_json

SYNC_TIMEOUT = 60.0  # a pass waits this long for the first lists, then fails with the reason (retried)


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def _pod_key(obj: Mapping[str, Any]) -> str:
    md = obj["metadata"]
    return f"{(md.get('labels') or {}).get(SPECIALRESOURCE_LABEL, '')}/{md['name']}"


class ClusterCache:
    def __init__(self, http: HttpClient, namespace: str, writes: HttpClient | None = None) -> None:
        self.http = http  # the watches stream over it
        self.writes = writes or http  # node reads and patches (the operator's: sro.kube.http11)
        self.nodes: Reflector[NodeInfo] = Reflector(http, "/api/v1/nodes", _name, node_from_json)
        self.pods: Reflector[PodInfo] = Reflector(
            http,
            f"/api/v1/namespaces/{namespace}/pods",
            _pod_key,
            pod_from_json,
            params={"labelSelector": SPECIALRESOURCE_LABEL},
        )
        self.health: dict[str, dict[str, HealthReport]] = {}  # node -> recipe -> report
        self.health_listeners: list[Callable[[], None]] = []

    async def run(self) -> None:
        """Both reflectors, for ever (cancel the task to stop)."""
        await asyncio.gather(self.nodes.run(), self.pods.run())

    async def synced(self) -> None:
        """Return once both first lists are in; raise `ListWatchError` with the reason otherwise."""
        await self.nodes.wait_synced(SYNC_TIMEOUT)
        await self.pods.wait_synced(SYNC_TIMEOUT)

    def node_infos(self) -> tuple[NodeInfo, ...]:
        return tuple(self.nodes.items.values())

    def pods_of(self, sr: str) -> list[PodInfo]:
        prefix = f"{sr}/"
        return [p for key, p in self.pods.items.items() if key.startswith(prefix)]

    def set_node_features(self, docs: Iterable[Mapping[str, Any]]) -> None:
        """The health reports of every NodeFeature just listed; listeners hear of a change."""
        health: dict[str, dict[str, HealthReport]] = {}
        for doc in docs:
            for recipe, report in reports_from_nodefeature(doc).items():
                if report.node:
                    health.setdefault(report.node, {})[recipe] = report
        if health != self.health:
            self.health = health
            for tell in self.health_listeners:
                tell()

    async def get_node(self, name: str) -> dict[str, Any] | None:
        """The Node as the API server has it now (None: gone), for a change that must not be stale."""
        doc = await get_node_json(self.writes, name)
        if doc is not None:
            self.nodes.update(doc)
        return doc

    async def patch_node(self, name: str, body: Mapping[str, Any]) -> bool:
        """A merge patch of a Node; the answer goes into the cache (the next pass reads what this one
        wrote). False when the node is gone; an HTTP error for any other refusal (409: re-plan)."""
        doc = await patch_node_json(self.writes, name, body)
        if doc is None:
            return False
        self.nodes.update(doc)
        return True

    async def patch_node_condition(self, name: str, condition: Mapping[str, Any]) -> bool:
        """One condition of a Node's status, merged by type; the answer goes into the cache. False
        when the node is gone; an HTTP error for any other refusal."""
        doc = await patch_node_conditions(self.writes, name, [condition])
        if doc is None:
            return False
        self.nodes.update(doc)
        return True
