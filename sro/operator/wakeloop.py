"""One pass, then sleep until something worth a pass happens: the loop under every operator job.

Why one piece: the SpecialResource daemons, the NodeFeatureRule step and the OpenShift loop all run
passes that say how long they may sleep at most, are woken early by watch events (`poke`), must
never die of a failing pass (logged, retried after `retry` seconds), and must not run a pass per
event of a burst. The wake-up is cleared before a pass, so what changes during it wakes the next
one; passes start at least `spacing` seconds apart, so a burst makes one more pass, not one each,
while a single change after a quiet spell is acted on at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import kopf


class StopFlag(Protocol):
    """kopf's `stopped` of a daemon: true once it must end; `wait()` returns then."""

    def __bool__(self) -> bool: ...

    def wait(self) -> Awaitable[Any]: ...


class WakeLoop:
    def __init__(
        self,
        run_pass: Callable[[], Awaitable[float]],
        *,
        what: str,
        log: logging.Logger,
        retry: float,
        spacing: float,
        on_failure: Callable[[], None] | None = None,
        wake: asyncio.Event | None = None,
    ) -> None:
        self.run_pass = run_pass  # one pass; returns seconds until the next one at the latest
        self.what = what  # names a failed pass in the log
        self.log = log
        self.retry = retry
        self.spacing = spacing
        self.on_failure = on_failure
        self.wake = wake or asyncio.Event()

    def poke(self) -> None:
        self.wake.set()

    async def run(self, stopped: StopFlag | None = None) -> None:
        """Passes until `stopped` (for ever without one: cancel the task to end it)."""
        loop = asyncio.get_running_loop()
        while not stopped:
            self.wake.clear()  # before the pass: what changes during it wakes the next one
            started = loop.time()
            try:
                wait = await self.run_pass()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a pass must never end the loop: log, count, retry
                self.log.exception("%s failed: %s", self.what, e)
                if self.on_failure is not None:
                    self.on_failure()
                wait = self.retry
            await self._sleep(wait, stopped)
            await asyncio.sleep(max(0.0, self.spacing - (loop.time() - started)))

    async def _sleep(self, wait: float, stopped: StopFlag | None) -> None:
        """Until woken, stopped or `wait` seconds passed."""
        waiters: set[asyncio.Future[Any]] = {asyncio.ensure_future(self.wake.wait())}
        if stopped is not None:
            waiters.add(asyncio.ensure_future(stopped.wait()))
        try:
            await asyncio.wait(waiters, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()


def run_alongside(registry: kopf.OperatorRegistry, loop: WakeLoop, name: str) -> None:
    """Run `loop` for as long as the operator runs: started by kopf's startup, cancelled at cleanup
    (handler ids `start_NAME`, `stop_NAME`)."""
    task: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry, id=f"start_{name}")
    async def start(**_: Any) -> None:
        task.append(asyncio.create_task(loop.run()))

    @kopf.on.cleanup(registry=registry, id=f"stop_{name}")
    async def stop(**_: Any) -> None:
        while task:
            running = task.pop()
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
