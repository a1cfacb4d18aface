"""Reading one Node's labels and resources (read-only): what the exporter reports about its node.

Why a `get` of the Node: kubelet 1.20's pod-resources API has only `List` (`GetAllocatableResources`
arrived in 1.21), so allocatable devices come from the Node's status, and the stack's state from the
`sro.dev/<sr>.<state>=ready` labels the operator writes there. One `get` per collection needs only
`get` on `nodes` (the exporter's ClusterRole), never list or watch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Node


@dataclass(frozen=True)
class NodeStatus:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)  # resource -> quantity, as the API has it
    capacity: Mapping[str, str] = field(default_factory=dict)


class NodeReadError(RuntimeError):
    """The Node could not be read; the message says why (status code, or unreachable)."""


def read_node_status(client: Client, name: str) -> NodeStatus:
    try:
        node = client.get(Node, name=name)
    except ApiError as e:
        code = e.status.code or 0
        raise NodeReadError(
            f"get node {name}: {code} {e.status.reason or ''} {e.status.message or ''}".strip()
        ) from e
    except (httpx.HTTPError, OSError) as e:
        raise NodeReadError(f"get node {name}: API server unreachable ({type(e).__name__}: {e})") from e
    status = node.status
    return NodeStatus(
        name=name,
        labels=dict(node.metadata.labels or {}) if node.metadata else {},
        allocatable=dict(status.allocatable or {}) if status else {},
        capacity=dict(status.capacity or {}) if status else {},
    )
