"""Fakes shared by the tests of the operator's loop (wakeloop, handlers): a stop flag as the loop
reads one, and the cluster I/O of one SpecialResource, recording the plans it is asked to carry out."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from sro.operator.observed import Observed, SpecialResourceInfo
from sro.operator.plan import Plan


class Flag:
    """A stop flag: true once set, and awaitable."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    def wait(self) -> asyncio.Future[bool]:
        return asyncio.ensure_future(self.event.wait())


class FakeIO:
    """The SpecialResource as stored; a pass observes no nodes; its status write succeeds unless
    `writes` is false (as when an API server refuses the status)."""

    namespace = "sro-system"

    def __init__(self, sr: SpecialResourceInfo, writes: bool = True) -> None:
        self.sr = sr
        self.writes = writes
        self.plans: list[Plan] = []
        self.refused_patches: dict[str, dict[str, str]] = {}
        nodes: Any = type("W", (), {"listeners": []})()
        pods: Any = type("W", (), {"listeners": []})()
        self.cache = type("Cache", (), {"nodes": nodes, "pods": pods, "health_listeners": []})()

    async def get_sr(self, name: str) -> SpecialResourceInfo | None:
        return self.sr

    async def observe(self, sr: SpecialResourceInfo) -> Observed:
        return Observed(sr=sr, nodes=(), image="localhost/sro:test")

    def held(self) -> bool:
        return True

    async def carry_out(
        self,
        sr: SpecialResourceInfo,
        plan: Plan,
        owned: Iterable[tuple[str, str]],
        write_status: Callable[[SpecialResourceInfo, Mapping[str, Any]], None] | None = None,
    ) -> list[str]:
        self.plans.append(plan)
        if write_status is not None:
            write_status(sr, plan.status)
            return []
        if not await self.patch_status(sr, plan.status):
            return ["status not updated"]
        return []

    async def patch_status(self, sr: SpecialResourceInfo, status: Mapping[str, Any]) -> bool:
        if not self.writes:
            return False
        self.sr = replace(self.sr, status=dict(status))
        return True
