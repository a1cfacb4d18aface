"""Evicting pods through the Eviction API, and posting events on Nodes and SpecialResources.

Why the Eviction API and not a delete: an eviction is refused (429) while it would break a pod's
PodDisruptionBudget, so a driver upgrade never takes down more of an application than its owner
allows. The Eviction kind moved from policy/v1beta1 (Kubernetes 1.20, 1.21) to policy/v1 (1.22);
which one the API server serves is read from its discovery document (the `pods/eviction`
subresource names its group and version), once per process.

lightkube has no discovery call and its Eviction class is policy/v1 only, so these two requests go
through the HTTP client lightkube already configured for the cluster (its credentials, its CA).
Events are core/v1 Events in `default` (where the kubelet puts a Node's), so `kubectl describe
node` and `kubectl describe specialresource` show each upgrade step.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from lightkube import AsyncClient, codecs

from sro.kube.client import lightkube_http
from sro.kube.errors import Errors

log = logging.getLogger(__name__)

DEFAULT_VERSION = "policy/v1beta1"
EVENTS_NAMESPACE = "default"  # where events about cluster-scoped objects go, as the kubelet's do
COMPONENT = "sro-operator"


@dataclass(frozen=True)
class EvictionResult:
    done: bool  # the pod is being evicted (or is gone already)
    message: str = ""  # why not: the API server's words (a PodDisruptionBudget, for one)


def version_from_discovery(doc: dict[str, Any]) -> str:
    """`policy/v1` or `policy/v1beta1`, from the core API's resource list (`GET /api/v1`)."""
    for res in doc.get("resources") or ():
        if isinstance(res, dict) and res.get("name") == "pods/eviction":
            group, version = res.get("group") or "policy", res.get("version") or "v1beta1"
            return f"{group}/{version}"
    return DEFAULT_VERSION


class Evictor:
    """Asks the API server to evict pods; remembers the Eviction version it serves."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.version = ""

    async def api_version(self) -> str:
        if not self.version:
            resp = await lightkube_http(self.client).get("/api/v1")
            resp.raise_for_status()
            doc = resp.json()  # ValueError when the answer is not JSON
            if not isinstance(doc, dict):
                raise ValueError(f"discovery answered {type(doc).__name__}, not a resource list")
            self.version = version_from_discovery(doc)
            log.info("evicting pods with %s Eviction", self.version)
        return self.version

    async def evict(self, namespace: str, name: str) -> EvictionResult:
        try:
            body = {
                "apiVersion": await self.api_version(),
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
            }
            resp = await lightkube_http(self.client).post(
                f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", json=body
            )
        except (httpx.HTTPError, ValueError) as e:  # discovery too: asked again on the next eviction
            return EvictionResult(False, f"eviction of {namespace}/{name} failed: {e}")
        if resp.status_code in (200, 201, 404):  # 404: gone already
            return EvictionResult(True)
        try:
            message = str(resp.json().get("message", ""))
        except ValueError:
            message = resp.text[:200]
        return EvictionResult(
            False, f"eviction of {namespace}/{name} refused ({resp.status_code}): {message}"
        )


async def post_event(
    client: AsyncClient,
    kind: str,
    api_version: str,
    name: str,
    uid: str,
    type_: str,
    reason: str,
    message: str,
) -> None:
    """A core/v1 Event about a cluster-scoped object (`kubectl describe` shows it); failures are logged."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": EVENTS_NAMESPACE},
        "involvedObject": {"kind": kind, "apiVersion": api_version, "name": name, "uid": uid},
        "reason": reason,
        "message": message[:1024],
        "type": type_,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        await client.create(codecs.from_dict(body))
    except Errors as e:
        log.warning("could not post event %s on %s %s: %s", reason, kind, name, e)
