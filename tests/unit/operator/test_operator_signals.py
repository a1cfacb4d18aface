"""The operator stops on SIGTERM while it stands by for the lease: in its pod it is PID 1, and a
signal PID 1 has no handler for is ignored, so an unhandled standby waited for SIGKILL at the end of
its grace period (30 s of every uninstall and rollout)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from sro.operator.commands import _stop_on_signals, _until_stopped


async def _forever() -> None:
    await asyncio.sleep(3600)


def test_sigterm_while_standing_by_stops_the_wait() -> None:
    cancelled = []

    async def standing_by() -> None:
        try:
            await _forever()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> tuple[bool, bool]:
        stop = asyncio.Event()
        _stop_on_signals(stop)
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)
        finished = await asyncio.wait_for(_until_stopped(standing_by(), stop), 10)
        return finished, stop.is_set()

    assert asyncio.run(main()) == (False, True)
    assert cancelled == [True], "the wait for the lease was not cancelled"


def test_work_that_finishes_first_is_reported_and_its_error_raised() -> None:
    async def acquired() -> None:
        await asyncio.sleep(0)

    async def refused() -> None:
        raise RuntimeError("the API said no")

    async def main(work: object) -> bool:
        stop = asyncio.Event()
        return await _until_stopped(work, stop)  # type: ignore[arg-type]

    assert asyncio.run(main(acquired())) is True
    with pytest.raises(RuntimeError, match="the API said no"):
        asyncio.run(main(refused()))


def test_a_stop_already_set_cancels_at_once() -> None:
    async def main() -> bool:
        stop = asyncio.Event()
        stop.set()
        return await asyncio.wait_for(_until_stopped(_forever(), stop), 5)

    assert asyncio.run(main()) is False
