"""The loop under every operator job (sro/operator/wakeloop.py): a failing pass is logged and
retried, a poke wakes the next pass early, and a burst of pokes makes one pass, not one each."""

from __future__ import annotations

import asyncio
import logging

import pytest

from sro.operator.wakeloop import WakeLoop
from tests.unit.operator.fakes import Flag

pytestmark = pytest.mark.timeout(10)
log = logging.getLogger("test.wakeloop")


def test_failure_is_logged_counted_and_retried(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[float] = []
    failures: list[int] = []

    async def main() -> None:
        stop = Flag()
        loop = asyncio.get_running_loop()

        async def one_pass() -> float:
            calls.append(loop.time())
            if len(calls) == 1:
                raise RuntimeError("boom")
            stop.event.set()
            return 60.0

        passes = WakeLoop(
            one_pass, what="x: pass", log=log, retry=0.05, spacing=0.0, on_failure=lambda: failures.append(1)
        )
        await passes.run(stop)

    asyncio.run(main())
    assert len(calls) == 2 and failures == [1]
    assert "x: pass failed: RuntimeError: boom" in caplog.text


def test_a_burst_of_pokes_makes_one_more_pass() -> None:
    calls: list[float] = []

    async def main() -> None:
        stop = Flag()

        async def one_pass() -> float:
            calls.append(0)
            return 60.0

        passes = WakeLoop(one_pass, what="pass", log=log, retry=1.0, spacing=1.0)
        task = asyncio.create_task(passes.run(stop))
        await asyncio.sleep(0.05)
        for _ in range(20):
            passes.poke()
            await asyncio.sleep(0.001)
        await asyncio.sleep(1.5)
        stop.event.set()
        passes.poke()
        await asyncio.wait_for(task, 2)

    asyncio.run(main())
    assert len(calls) == 2  # the first, then one for the whole burst (none once stopped)


def test_the_gap_follows_the_pass_length_within_its_bounds() -> None:
    passes = WakeLoop(lambda: asyncio.sleep(0, 1.0), what="p", log=log, retry=1, spacing=0.5, min_spacing=0.1)
    assert passes.gap(0.01) == 0.1  # a quick pass: the floor
    assert passes.gap(0.13) == pytest.approx(0.26)  # a one-node pass: as long again after it
    assert passes.gap(2.0) == 0.5  # a long pass (a big cluster): the fixed spacing, as before
    fixed = WakeLoop(lambda: asyncio.sleep(0, 1.0), what="p", log=log, retry=1, spacing=0.5)
    assert fixed.gap(0.01) == fixed.gap(2.0) == 0.5  # without min_spacing: the fixed spacing


def test_a_poke_after_a_quick_pass_is_acted_on_well_before_the_spacing() -> None:
    starts: list[float] = []

    async def main() -> None:
        stop = Flag()
        loop = asyncio.get_running_loop()

        async def one_pass() -> float:
            starts.append(loop.time())
            await asyncio.sleep(0.02)
            if len(starts) == 2:
                stop.event.set()
            return 60.0

        passes = WakeLoop(one_pass, what="pass", log=log, retry=1.0, spacing=1.0, min_spacing=0.05)
        task = asyncio.create_task(passes.run(stop))
        await asyncio.sleep(0.03)  # the first pass is over
        passes.poke()
        await asyncio.wait_for(task, 2)

    asyncio.run(main())
    assert len(starts) == 2 and starts[1] - starts[0] < 0.3  # not the 1 s spacing


def test_an_unreachable_api_server_is_one_warning_line_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Seed 105: the API server restarted mid-pass and the pass's failure was logged with an httpx
    traceback, which the campaign counts as a violation; an API error is expected and gets one line."""
    import httpx

    calls: list[int] = []

    async def main() -> None:
        stop = Flag()

        async def one_pass() -> float:
            calls.append(1)
            if len(calls) == 1:
                raise httpx.ConnectError("All connection attempts failed")
            if len(calls) == 2:
                raise RuntimeError("a bug")
            stop.event.set()
            return 60.0

        await WakeLoop(one_pass, what="x: pass", log=log, retry=0.01, spacing=0.0).run(stop)

    with caplog.at_level(logging.DEBUG, logger="test.wakeloop"):
        asyncio.run(main())
    api = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(api) == 1 and api[0].levelno == logging.WARNING and api[0].exc_info is None
    assert "retrying in 0.01 s" in api[0].getMessage()
    bug = [r for r in caplog.records if "a bug" in r.getMessage()]
    assert len(bug) == 1 and bug[0].levelno == logging.ERROR and bug[0].exc_info is not None
