"""One kind of API object kept current in memory from a paged list and a watch (client-go's reflector, small).

Why: a reconcile pass that lists every Node and every operand pod re-reads and re-decodes megabytes of
JSON at a thousand nodes (21 s a pass on this machine, most of it decoding), and each full list leaves
the process's heap as large as the biggest response. A reflector lists once, then applies the watch's
changes; a pass reads its records in microseconds. Only the operator's own small records are kept
(`parse` turns an object into one), never the API objects.

Why not kopf's watches: kopf keeps its own per-object memory for every object it sees and does not say
when its first listing is complete, and a pass must never act on half a cluster (it would take nodes
away that it has not read yet). `synced` is set once the first list is in.

The contract is the API server's: a watch starts at the list's resourceVersion; ADDED/MODIFIED/DELETED
change one record; BOOKMARK moves the resourceVersion on; an ERROR with code 410 (the version is older
than the server keeps) or a watch that keeps failing means list again. Each change is told to the
`listeners` (the event type and the object); after a fresh list they hear "RESYNC" and no object,
since anything may have changed meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import httpx

log = logging.getLogger(__name__)

T = TypeVar("T")
PAGE = 500
WATCH_SECONDS = 240  # the server ends each watch after this; the reflector goes on from where it was
RESYNC = "RESYNC"
Listener = Callable[[str, Mapping[str, Any] | None], None]


class ListWatchError(Exception):
    """The API server answered something a reflector cannot go on from (a refusal, not JSON)."""


class Reflector(Generic[T]):
    """`items[key(obj)] = parse(obj)` for every object at `path` (a list URL with optional selectors)."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        path: str,
        key: Callable[[Mapping[str, Any]], str],
        parse: Callable[[Mapping[str, Any]], T],
        params: Mapping[str, str] | None = None,
    ) -> None:
        self.http = http
        self.path = path
        self.key = key
        self.parse = parse
        self.listeners: list[Listener] = []
        self.params = dict(params or {})
        self.items: dict[str, T] = {}
        self.versions: dict[str, str] = {}  # key -> resourceVersion of the record held
        self.synced = asyncio.Event()
        self.error = ""  # the last reason a list or watch failed, for a pass that cannot wait longer
        self.resource_version = ""
        self.lists = 0  # how many full lists were made (1 in a healthy run)

    async def run(self) -> None:
        """List, then watch for ever; errors are logged and retried with a growing pause."""
        pause = 1.0
        while True:
            try:
                await self._list()
                pause = 1.0
                while await self._watch():
                    pause = 1.0
            except Exception as e:  # a refusal, a dropped connection, an object it cannot read: never the end
                self.error = f"{self.path}: {' '.join(str(e).split()) or type(e).__name__}"
                log.warning("%s; trying again in %.0f s", self.error, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 30.0)

    async def _list(self) -> None:
        items: dict[str, T] = {}
        versions: dict[str, str] = {}
        params = {**self.params, "limit": str(PAGE)}
        while True:
            doc = await self._get(params)
            for obj in doc.get("items") or ():
                key = self.key(obj)
                items[key] = self.parse(obj)
                versions[key] = str((obj.get("metadata") or {}).get("resourceVersion", ""))
            meta = doc.get("metadata") or {}
            if not meta.get("continue"):
                break
            params["continue"] = meta["continue"]
        self.items, self.versions = items, versions
        self.resource_version = str(meta.get("resourceVersion", ""))
        self.lists += 1
        self.error = ""
        self.synced.set()
        self._tell(RESYNC, None)

    async def _get(self, params: Mapping[str, str]) -> dict[str, Any]:
        resp = await self.http.get(self.path, params=params)
        if resp.status_code != 200:
            raise ListWatchError(f"{resp.status_code} {_message(resp.content)}")
        doc = json.loads(resp.content)
        if not isinstance(doc, dict):
            raise ListWatchError("the answer is not a JSON object")
        return doc

    async def _watch(self) -> bool:
        """One watch request; False when only a new list can go on (410 Gone)."""
        params = {
            **self.params,
            "watch": "1",
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        timeout = httpx.Timeout(10.0, read=WATCH_SECONDS + 30.0)
        async with self.http.stream("GET", self.path, params=params, timeout=timeout) as resp:
            if resp.status_code == 410:
                return False
            if resp.status_code != 200:
                raise ListWatchError(f"watch: {resp.status_code} {_message(await resp.aread())}")
            async for line in resp.aiter_lines():
                if line.strip() and not self.apply(json.loads(line)):
                    return False
        return True

    def apply(self, event: Mapping[str, Any]) -> bool:
        """One watch event into `items`; False for the event that says the watch cannot go on."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                log.info("%s: resourceVersion too old; listing again", self.path)
                return False
            raise ListWatchError(f"watch: {obj.get('code')} {obj.get('message', '')}")
        meta = obj.get("metadata") or {}
        self.resource_version = str(meta.get("resourceVersion") or self.resource_version)
        if kind == "BOOKMARK":
            return True
        key = self.key(obj)
        if kind == "DELETED":
            self.items.pop(key, None)
            self.versions.pop(key, None)
        elif kind in ("ADDED", "MODIFIED"):
            if not self.update(obj):
                return True
        else:
            return True
        self._tell(str(kind), obj)
        return True

    def _tell(self, kind: str, obj: Mapping[str, Any] | None) -> None:
        for listener in self.listeners:
            listener(kind, obj)

    def update(self, obj: Mapping[str, Any]) -> bool:
        """Hold `obj` unless the record held is newer; False when it was not taken.

        Besides the watch, the answer to the operator's own write comes here, so that its next pass
        reads what it wrote (the watch event follows later and changes nothing). resourceVersions are
        etcd revisions, compared as numbers; one that is not a number is always taken.
        """
        key = self.key(obj)
        version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        held = self.versions.get(key, "")
        if version.isdigit() and held.isdigit() and int(held) > int(version):
            return False
        self.items[key] = self.parse(obj)
        self.versions[key] = version
        return True

    async def wait_synced(self, timeout: float) -> None:
        """Return once the first list is in; raise with the last error after `timeout` seconds."""
        try:
            await asyncio.wait_for(self.synced.wait(), timeout)
        except TimeoutError:
            raise ListWatchError(f"not read yet: {self.error or 'no answer'}") from None


def _message(content: bytes) -> str:
    try:
        return str(json.loads(content).get("message", ""))[:300]
    except (ValueError, AttributeError):
        return content[:300].decode(errors="replace")
