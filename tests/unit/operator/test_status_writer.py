"""The status is written behind the pass (statuswriter): in order, each write a merge patch against
what the server holds, the next pass reading the status being written, and a pass that no longer
waits for a slow status write (at 1,000 nodes it held the next node change back)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from sro.operator.handlers import Operator
from sro.operator.observed import SpecialResourceInfo
from sro.operator.statuswriter import StatusWriter
from tests.unit.operator.fakes import FakeIO


def _sr(status: dict[str, Any] | None = None, uid: str = "uid-1") -> SpecialResourceInfo:
    return SpecialResourceInfo(
        name="gpus",
        uid=uid,
        spec={"recipe": "simulated-gpu"},
        created="2026-11-22T10:00:00Z",
        status=status or {},
    )


class Server:
    """The stored status, patched as the API server merges a patch; a write can be held or refused."""

    def __init__(self) -> None:
        self.status: dict[str, Any] = {}
        self.bases: list[dict[str, Any]] = []  # the status each patch was made against
        self.gate = asyncio.Event()
        self.gate.set()
        self.refuse = False
        self.failures: list[str] = []

    async def patch(self, sr: SpecialResourceInfo, status: Mapping[str, Any]) -> bool:
        self.bases.append(dict(sr.status))
        await self.gate.wait()
        if self.refuse:
            return False
        self.status = dict(status)
        return True

    async def get(self, name: str) -> SpecialResourceInfo:
        return _sr(self.status)


def test_writes_go_in_order_and_the_next_pass_reads_the_one_being_written() -> None:
    async def go() -> None:
        server = Server()
        w = StatusWriter(server.patch, server.get, server.failures.append)
        server.gate.clear()
        w.write(_sr(), {"n": 1})
        view = w.view(_sr())  # the stored status is still {} while the write waits
        assert view.status == {"n": 1}
        w.write(view, {"n": 2})
        w.write(w.view(_sr()), {"n": 2})  # the same again: nothing more to write
        server.gate.set()
        await w.settled("gpus")
        assert server.status == {"n": 2}
        assert server.bases == [{}, {"n": 1}]  # the second patch was made against the first's status
        assert w.view(_sr(uid="uid-2")).status == {}  # a SpecialResource made again starts afresh
        assert server.failures == []

    asyncio.run(go())


def test_after_a_failed_write_the_next_is_made_against_the_stored_status() -> None:
    async def go() -> None:
        server = Server()
        server.status = {"n": 0}
        w = StatusWriter(server.patch, server.get, server.failures.append)
        server.gate.clear()
        server.refuse = True
        w.write(_sr({"n": 0}), {"n": 1})
        w.write(w.view(_sr({"n": 0})), {"n": 2})  # made while the first one waits
        await asyncio.sleep(0)
        server.gate.set()
        await asyncio.sleep(0.01)
        assert server.failures == ["gpus", "gpus"]
        assert w.view(_sr({"n": 0})).status == {"n": 0}  # the next pass reads the stored one again
        server.refuse = False
        w.write(w.view(_sr({"n": 0})), {"n": 3})
        await w.settled("gpus")
        assert server.status == {"n": 3} and server.bases[-1] == {"n": 0}

    asyncio.run(go())


def test_a_pass_does_not_wait_for_its_status_write() -> None:
    async def go() -> None:
        io = FakeIO(_sr())
        op = Operator(io)  # type: ignore[arg-type]
        gate = asyncio.Event()
        real = io.patch_status

        async def slow(sr: SpecialResourceInfo, status: Mapping[str, Any]) -> bool:
            await gate.wait()
            return await real(sr, status)

        io.patch_status = slow  # type: ignore[method-assign]
        await asyncio.wait_for(op.run_pass("gpus"), 5)  # returns while the write waits
        assert io.sr.status == {} and len(io.plans) == 1
        first = io.plans[0].status
        await asyncio.wait_for(op.run_pass("gpus"), 5)
        # the second pass built on the status being written: the same conditions, the same times
        assert io.plans[1].status["conditions"] == first["conditions"]
        gate.set()
        await op.status.settled("gpus")
        assert io.sr.status == first

    asyncio.run(go())
