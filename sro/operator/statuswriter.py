"""A SpecialResource's status, written behind the pass that made it, one write at a time.

Why: at 1,000 nodes the status is ~75 KiB and the API server takes 0.07-0.2 s to patch it, up to
0.9 s while it is busy (its audit log, in the scale benchmark); written at the end of the pass, it
held back the next pass, the one that acts on the next node change. What nodes wait for (labels,
pods, taints) is done in the pass; the status reports it and may follow a moment later.

What keeps that safe: writes of one SpecialResource go in order (each waits for the one before);
each is a merge patch against what the server holds (the status of the write before it, or, after a
write that failed, the stored one read again); and the next pass reads the status being written as
the stored one (`view`), so a condition keeps its transition time and an unchanged status is not
written twice. A failed write is logged by the patch, and `on_failure` says so (the operator counts
it and runs a pass again 3 s later, as it did when the write was part of the pass).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from sro.operator.observed import SpecialResourceInfo

log = logging.getLogger("sro.operator")

Patch = Callable[[SpecialResourceInfo, Mapping[str, Any]], Awaitable[bool]]
Get = Callable[[str], Awaitable[SpecialResourceInfo | None]]


class StatusWriter:
    def __init__(self, patch: Patch, get: Get, on_failure: Callable[[str], None]) -> None:
        self._patch = patch  # merge-patches the status of the given SpecialResource to the mapping
        self._get = get  # reads the stored SpecialResource again
        self._on_failure = on_failure
        self._writes: dict[str, asyncio.Task[bool]] = {}  # per SpecialResource: its last write
        self._latest: dict[str, tuple[str, dict[str, Any]]] = {}  # per name: (uid, status written last)

    def view(self, sr: SpecialResourceInfo) -> SpecialResourceInfo:
        """`sr` as read, with the status written last (or being written) in place of the stored one."""
        latest = self._latest.get(sr.name)
        return replace(sr, status=latest[1]) if latest is not None and latest[0] == sr.uid else sr

    def write(self, sr: SpecialResourceInfo, status: Mapping[str, Any]) -> None:
        """Write `status` after the writes before it; `sr` is the pass's `view` (nothing when equal)."""
        if dict(status) == dict(sr.status):
            return
        target = dict(status)
        self._latest[sr.name] = (sr.uid, target)
        before = self._writes.get(sr.name)
        self._writes[sr.name] = asyncio.ensure_future(self._write(before, sr, target))

    async def _write(
        self, before: asyncio.Task[bool] | None, sr: SpecialResourceInfo, target: dict[str, Any]
    ) -> bool:
        try:
            base: SpecialResourceInfo | None = sr
            if before is not None and not await before:  # the server does not hold what `sr` says
                base = await self._get(sr.name)
            ok = base is not None and base.uid == sr.uid and await self._patch(base, target)
        except Exception as e:  # the API client's own errors are handled by the patch; anything else
            log.warning("%s: could not update the status: %s", sr.name, e)
            ok = False
        if not ok:
            if self._latest.get(sr.name) == (sr.uid, target):
                del self._latest[sr.name]  # the next pass reads the stored status again
            self._on_failure(sr.name)
        return ok

    async def settled(self, name: str) -> None:
        """Until the writes queued for `name` are done (a teardown, a test)."""
        while (task := self._writes.get(name)) is not None and not task.done():
            await asyncio.wait([task])

    def forget(self, name: str) -> None:
        """A deleted SpecialResource: nothing of it is kept."""
        self._writes.pop(name, None)
        self._latest.pop(name, None)
