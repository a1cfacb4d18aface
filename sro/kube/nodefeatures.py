"""NFD's API objects on the API server: the discovery agent's NodeFeature, and the rules' names.

Why here: only kube/ talks to the API. `NodeFeatureClient` (sync, the discovery agent) gets, creates
and replaces its node's NodeFeature; a 404 on the kind itself (no CRD) is reported as such, so the
agent warns once and keeps labelling. `rule_names` lists the NodeFeatureRules for `sro uninstall`.
The operator's NodeFeatureRule step has its own reads (`sro.operator.cluster.nfdrules`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightkube import ApiError, Client

from sro.api.nfd_crds import NFD_GROUP, NODE_FEATURES
from sro.kube.client import as_dict
from sro.kube.errors import Errors, kind_missing, status_code
from sro.kube.resources import NodeFeature, NodeFeatureRule


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
        if kind_missing(e):
            return NodeFeatureApiError(
                f"{action} {what}: the NodeFeature kind is not served (the {NODE_FEATURES}.{NFD_GROUP} CRD "
                "is not installed; `sro install` installs it)",
                missing_crd=True,
            )
        if isinstance(e, ApiError):
            return NodeFeatureApiError(
                f"{action} {what}: {e.status.code} {e.status.reason or ''} {e.status.message or ''}".strip(),
                conflict=status_code(e) == 409,
            )
        return NodeFeatureApiError(f"{action} {what}: API server unreachable ({type(e).__name__}: {e})")

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return as_dict(self.client.get(NodeFeature, name, namespace=namespace))
        except Errors as e:
            if status_code(e) == 404 and not kind_missing(e):
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


def rule_names(client: Client) -> list[str]:
    """The NodeFeatureRules on the cluster (sync, for `sro uninstall`); [] when the kind is not served."""
    try:
        return sorted(as_dict(o)["metadata"]["name"] for o in client.list(NodeFeatureRule))
    except Errors as e:
        if status_code(e) == 404:
            return []
        raise
