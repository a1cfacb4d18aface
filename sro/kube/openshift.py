"""OpenShift's API through lightkube: is this OpenShift, keep objects applied, write the ClusterOperator.

Why CRDs for detection: every OpenShift 4 serves `config.openshift.io` (and `security.openshift.io`)
from CustomResourceDefinitions, so "is the group served" is one `get` of its CRD, which the operator
may already do (it reads CRDs for kopf) and the installer can do before it creates anything.
SecurityContextConstraints and ClusterOperator are registered with lightkube in `sro.kube.resources`,
so `sro.kube.applying` applies and deletes them like any other kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lightkube import ApiError, AsyncClient, Client
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.types import PatchType

from sro.api.names import FIELD_MANAGER
from sro.api.openshift import GROUP_CRDS, OPENSHIFT_CRD, REQUIRED_GROUPS
from sro.kube.client import as_dict
from sro.kube.errors import Errors, refusal, status_code
from sro.kube.resources import ClusterOperator, SpecialResource


def missing_groups(client: Client) -> list[str]:
    """The OpenShift API groups `--platform openshift` needs that this cluster does not serve."""
    missing = []
    for group in REQUIRED_GROUPS:
        try:
            client.get(CustomResourceDefinition, GROUP_CRDS[group])
        except ApiError as e:
            if status_code(e) != 404:
                raise
            missing.append(group)
    return missing


def _what(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata") or {}
    ns = md.get("namespace")
    return f"{obj.get('kind')} {ns + '/' if ns else ''}{md.get('name')}"


class OpenShiftIO:
    """What the operator's OpenShift loop reads and writes (async)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def is_openshift(self) -> bool:
        try:
            await self.client.get(CustomResourceDefinition, OPENSHIFT_CRD)
        except ApiError as e:
            if status_code(e) == 404:
                return False
            raise
        return True

    async def apply_all(self, objs: Iterable[Mapping[str, Any]]) -> list[str]:
        """Server-side apply each object (field manager `sro`, as `sro install` does); the problems."""
        from sro.kube.applying import resource_type

        problems = []
        for obj in objs:
            res = resource_type(obj)
            md = obj["metadata"]
            try:
                await self.client.patch(
                    res,
                    md["name"],
                    dict(obj),
                    namespace=md.get("namespace"),
                    patch_type=PatchType.APPLY,
                    field_manager=FIELD_MANAGER,
                    force=True,
                )
            except Errors as e:
                problems.append(f"apply {_what(obj)}: {refusal(e)}")
        return problems

    async def special_resources(self) -> list[dict[str, Any]]:
        return [as_dict(o) async for o in self.client.list(SpecialResource)]

    async def cluster_operator(self, name: str) -> dict[str, Any] | None:
        try:
            return as_dict(await self.client.get(ClusterOperator, name))
        except ApiError as e:
            if status_code(e) == 404:
                return None
            raise

    async def write_status(self, obj: Mapping[str, Any], status: Mapping[str, Any]) -> str | None:
        """Create the ClusterOperator if it is not there, then replace its status; a problem or None."""
        name = obj["metadata"]["name"]
        try:
            if await self.cluster_operator(name) is None:
                await self.client.patch(
                    ClusterOperator, name, dict(obj), patch_type=PatchType.APPLY, field_manager=FIELD_MANAGER
                )
            await self.client.patch(
                ClusterOperator.Status, name, {"status": dict(status)}, patch_type=PatchType.MERGE
            )
        except Errors as e:
            return f"write ClusterOperator {name}: {refusal(e)}"
        return None
