"""The node's raw features as NFD's NodeFeature object (`--enable-nodefeature-api`).

Why an object besides the labels: NodeFeatureRules are evaluated cluster-side (by the operator)
against the raw features, not the labels, exactly as NFD's master does with its worker's
NodeFeature. The object is named after the node, lives in the agent's namespace, carries NFD's
`nfd.node.kubernetes.io/node-name` label and an owner reference to the Node: it outlives discovery
pod roll-outs and is garbage-collected when the node goes. With `core.noNodeLabels` the labels go
in `spec.labels` too and the operator applies them (NFD master's model); otherwise `spec.labels`
stays empty and the agent labels the Node itself. Written only when it changed (one GET a pass).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from sro.api.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from sro.api.nfd_crds import NFD_API_VERSION, NODE_FEATURE, NODE_NAME_LABEL
from sro.nfd.matching import FeatureSet
from sro.nfd.nodefeatures import to_spec

log = logging.getLogger(__name__)


class NodeFeatureApi(Protocol):
    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def create(self, doc: Mapping[str, Any]) -> None: ...

    def replace(self, doc: Mapping[str, Any]) -> None: ...


def node_feature(
    node: str,
    namespace: str,
    features: Mapping[str, FeatureSet],
    labels: Mapping[str, str] | None = None,
    node_uid: str = "",
) -> dict[str, Any]:
    """The NodeFeature document for `node` (pure): its features, and its labels when asked."""
    metadata: dict[str, Any] = {
        "name": node,
        "namespace": namespace,
        "labels": {NODE_NAME_LABEL: node, MANAGED_BY_LABEL: MANAGED_BY_VALUE},
    }
    if node_uid:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]
    spec: dict[str, Any] = {"features": to_spec(features)}
    if labels:
        spec["labels"] = dict(sorted(labels.items()))
    return {"apiVersion": NFD_API_VERSION, "kind": NODE_FEATURE, "metadata": metadata, "spec": spec}


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True)


def differs(want: Mapping[str, Any], have: Mapping[str, Any]) -> bool:
    """Whether the object on the server lacks something of `want` (spec, our labels, the owner)."""
    if _canonical(want.get("spec") or {}) != _canonical(have.get("spec") or {}):
        return True
    wmd, hmd = want["metadata"], have.get("metadata") or {}
    if any((hmd.get("labels") or {}).get(k) != v for k, v in wmd["labels"].items()):
        return True
    owners = {o.get("uid") for o in hmd.get("ownerReferences") or []}
    return any(o["uid"] not in owners for o in wmd.get("ownerReferences") or [])


class NodeFeatureWriter:
    """Keeps one NodeFeature object as discovery last found the node."""

    def __init__(self, api: NodeFeatureApi) -> None:
        self.api = api

    def publish(self, doc: Mapping[str, Any]) -> str:
        """created, updated or unchanged; NodeFeatureApiError when the API refuses."""
        md = doc["metadata"]
        have = self.api.get(md["namespace"], md["name"])
        if have is None:
            self.api.create(doc)
            return "created"
        if not differs(doc, have):
            return "unchanged"
        hmd = have.get("metadata") or {}
        merged_labels = {**(hmd.get("labels") or {}), **md["labels"]}
        body = {
            **doc,
            "metadata": {**md, "labels": merged_labels, "resourceVersion": hmd.get("resourceVersion", "")},
        }
        self.api.replace(body)
        return "updated"
