"""One pass, then sleep until something worth a pass happens: the loop under every operator job.

Why one piece: the SpecialResource daemons, the NodeFeatureRule step and the OpenShift loop all run
passes that say how long they may sleep at most, are woken early by watch events (`poke`), must
never die of a failing pass, and must not run a pass per event of a burst. A failing pass is
retried after `retry` seconds, doubling on each further failure up to `max_retry` (reset by a good
pass; a wake-up after the first `retry` seconds retries at once: new input may fix it), and logged with its traceback once per distinct error (`one_line`), not once per pass: a
broken input must not turn into a traceback every few seconds. The wake-up is cleared before a pass, so what changes during it wakes the next
one; passes start at least `spacing` seconds apart, so a burst makes one more pass, not one each,
while a single change after a quiet spell is acted on at once. With `min_spacing`, the gap follows
the passes' own length instead: a pass waits as long as the last one took (so at most half the time
goes to passes), between `min_spacing` and `spacing`. Why: on a small cluster a pass takes ~0.1 s,
and a fixed 0.5 s gap held back the one pod event that mattered (a state's pod turning Ready comes
right after its Running) by up to half a second per state; on a large one passes take longer than
`spacing`, and nothing changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import kopf

from sro.kube.errors import describe_error


class StopFlag(Protocol):
    """kopf's `stopped` of a daemon: true once it must end; `wait()` returns then."""

    def __bool__(self) -> bool: ...

    def wait(self) -> Awaitable[Any]: ...


def one_line(error: BaseException, limit: int = 300) -> str:
    """`Type: message`, the message's first line, at most `limit` characters: a status reason."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
        max_retry: float = 60.0,
        min_spacing: float | None = None,
    ) -> None:
        self.run_pass = run_pass  # one pass; returns seconds until the next one at the latest
        self.what = what  # names a failed pass in the log
        self.log = log
        self.retry = retry  # the first retry's delay; doubled on each further failure
        self.max_retry = max(max_retry, retry)
        self.failures = 0  # failed passes in a row
        self.last_error: str | None = None  # the one-line error last logged
        self.spacing = spacing
        self.min_spacing = spacing if min_spacing is None else min(min_spacing, spacing)
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
                took = loop.time() - started
                # a wake-up (new input) cuts the backoff short, but not its first `retry` seconds:
                # a burst of events must not turn a failing pass into a busy loop
                delay = self.failed(e)
                await self._sleep(min(self.retry, delay), stopped, woken=False)
                await self._sleep(delay - min(self.retry, delay), stopped)
            else:
                took = loop.time() - started
                self.failures, self.last_error = 0, None
                await self._sleep(wait, stopped)
            await asyncio.sleep(max(0.0, self.gap(took) - (loop.time() - started)))

    def gap(self, took: float) -> float:
        """Seconds from a pass's start to the next one's, at the least, after a pass that took `took`."""
        return min(self.spacing, max(self.min_spacing, 2 * took))

    def failed(self, error: Exception) -> float:
        """Count and log (once per distinct error) a failed pass; the delay before the next one."""
        self.failures += 1
        said = one_line(error)
        delay = float(min(self.retry * 2 ** min(self.failures - 1, 30), self.max_retry))
        api = describe_error(error)
        if said == self.last_error:
            self.log.debug("%s failed again: %s", self.what, said)
        elif api is not None:
            # the API server unreachable or refusing (a restart, a network blip): expected, and a
            # traceback would only say where the request was made; one line, and when it is retried
            self.log.warning("%s failed: %s; retrying in %g s", self.what, api, delay)
        else:
            self.log.error("%s failed: %s", self.what, said, exc_info=error)
        self.last_error = said
        if self.on_failure is not None:
            self.on_failure()
        return delay

    async def _sleep(self, wait: float, stopped: StopFlag | None, woken: bool = True) -> None:
        """Until woken (unless `woken` is false), stopped or `wait` seconds passed."""
        waiters: set[asyncio.Future[Any]] = set()
        if woken:
            waiters.add(asyncio.ensure_future(self.wake.wait()))
        if stopped is not None:
            waiters.add(asyncio.ensure_future(stopped.wait()))
        if not waiters:
            await asyncio.sleep(wait)
            return
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
