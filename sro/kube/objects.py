"""Get, list, apply, create, patch and delete API objects by kind name, as plain JSON dicts.

Why: the operator's cluster reads (`sro.operator.cluster`) and the commands above kube/ work on
dicts and kind names ("DaemonSet", "SpecialResource"); these two thin wrappers of a lightkube client
(`AsyncObjects` for the operator, `Objects` for commands) are all they need of the API, so lightkube
stays inside kube/. Errors are lightkube's and httpx's own: catch `sro.kube.errors.Errors` and read
the code with `status_code`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightkube import ALL_NS, AsyncClient, Client, codecs
from lightkube.types import PatchType

from sro.api.names import FIELD_MANAGER
from sro.kube.client import as_dict
from sro.kube.errors import Errors, status_code
from sro.kube.resources import resource

ALL_NAMESPACES = ALL_NS
Selector = Mapping[str, Any]


class AsyncObjects:
    """The operator's requests through one lightkube AsyncClient."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or None when there is none (any other refusal raises)."""
        try:
            return as_dict(await self.client.get(resource(kind), name, namespace=namespace))
        except Errors as e:
            if status_code(e) == 404:
                return None
            raise

    async def exists(self, kind: str, name: str) -> bool:
        return await self.get(kind, name) is not None

    async def list(
        self,
        kind: str,
        namespace: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
    ) -> list[dict[str, Any]]:
        """The objects (`namespace=ALL_NAMESPACES`: in every namespace)."""
        return [
            as_dict(o)
            async for o in self.client.list(
                resource(kind),
                namespace=namespace,
                labels=dict(labels) if labels is not None else None,
                fields=dict(fields) if fields is not None else None,
            )
        ]

    async def apply(self, obj: Mapping[str, Any]) -> None:
        """Server-side apply (field manager `sro`, force)."""
        await self.client.apply(codecs.from_dict(dict(obj)), field_manager=FIELD_MANAGER, force=True)

    async def create(self, obj: Mapping[str, Any]) -> None:
        await self.client.create(codecs.from_dict(dict(obj)))

    async def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        await self.client.delete(resource(kind), name, namespace=namespace)

    async def merge_patch(
        self,
        kind: str,
        name: str,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        status: bool = False,
    ) -> None:
        """A JSON merge patch of the object (`status=True`: of its status subresource)."""
        res = resource(kind)
        await self.client.patch(
            res.Status if status else res, name, dict(body), namespace=namespace, patch_type=PatchType.MERGE
        )

    async def log_tail(self, pod: str, namespace: str, lines: int) -> str:
        """The last `lines` lines of a pod's log ("" when it cannot be read)."""
        out: list[str] = []
        try:
            async for line in self.client.log(pod, namespace=namespace, tail_lines=lines):
                out.append(line)
        except Errors:
            return ""
        return "".join(out)


class Objects:
    """A command's requests through one lightkube Client."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        return as_dict(self.client.get(resource(kind), name, namespace=namespace))

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [as_dict(o) for o in self.client.list(resource(kind), namespace=namespace)]

    def merge_patch(
        self, kind: str, name: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> None:
        self.client.patch(resource(kind), name, dict(body), namespace=namespace, patch_type=PatchType.MERGE)
