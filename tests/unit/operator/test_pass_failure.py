"""A pass that raises never turns into a traceback loop (issue 21 §2): the SpecialResource shows
Degraded with the error in one line, the error is logged once per distinct error, not once per
pass, and the retries back off (doubling, bounded), reset by a good pass."""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest

from sro.operator import handlers
from sro.operator.handlers import Operator
from sro.operator.observed import Observed, SpecialResourceInfo
from sro.operator.plan import Plan
from sro.operator.wakeloop import WakeLoop, one_line
from tests.unit.operator.fakes import FakeIO, Flag

pytestmark = pytest.mark.timeout(20)
log = logging.getLogger("test.passfailure")


def _sr() -> SpecialResourceInfo:
    return SpecialResourceInfo(
        name="gpus", uid="uid-1", spec={"recipe": "simulated-gpu"}, created="2026-11-22T10:00:00Z"
    )


def _broken_reconcile(obs: Observed, namespace: str, **_: object) -> Plan:
    raise RuntimeError("cannot fill 'os_id'\n  and a second line that is not shown")


def test_a_raising_reconcile_gets_the_special_resource_degraded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handlers, "reconcile", _broken_reconcile)
    io = FakeIO(_sr())
    op = Operator(io)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        asyncio.run(op.run_pass("gpus"))
    assert len(io.plans) == 1 and not io.plans[0].deployable and not io.plans[0].apply
    conds = {c["type"]: c for c in io.sr.status["conditions"]}
    assert conds["Degraded"]["status"] == "True" and conds["Degraded"]["reason"] == "PassFailed"
    assert conds["Ready"]["status"] != "True"
    message = conds["Degraded"]["message"]
    assert message == "the reconcile pass failed: RuntimeError: cannot fill 'os_id'"


def test_the_daemon_logs_a_raising_pass_once_and_backs_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The daemon's own loop (Operator.run_pass in a WakeLoop) over a reconcile that keeps raising."""
    monkeypatch.setattr(handlers, "reconcile", _broken_reconcile)
    io = FakeIO(_sr())
    op = Operator(io)  # type: ignore[arg-type]
    starts: list[float] = []

    async def main() -> None:
        stop = Flag()
        loop = asyncio.get_running_loop()

        async def one_pass() -> float:
            starts.append(loop.time())
            if len(starts) == 6:
                stop.event.set()
            return await op.run_pass("gpus")

        passes = WakeLoop(
            one_pass, what="gpus: reconcile pass", log=log, retry=0.02, spacing=0.0, max_retry=0.1
        )
        await passes.run(stop)

    with caplog.at_level(logging.DEBUG, "test.passfailure"):
        asyncio.run(main())
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None, [r.getMessage() for r in errors]
    assert errors[0].getMessage() == "gpus: reconcile pass failed: RuntimeError: cannot fill 'os_id'"
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # 0.02, 0.04, 0.08, then the bound 0.1
    for gap, want in zip(gaps, (0.02, 0.04, 0.08, 0.1, 0.1), strict=True):
        assert want * 0.9 <= gap < want + 0.05, gaps
    assert all(p.status["conditions"][-1]["reason"] == "PassFailed" for p in io.plans)


def test_backoff_resets_after_a_good_pass_and_a_new_error_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    outcomes: list[BaseException | None] = [
        RuntimeError("a"), RuntimeError("a"), RuntimeError("a"), None, RuntimeError("a"), ValueError("b"), None,
    ]  # fmt: skip
    starts: list[float] = []

    async def main() -> None:
        stop = Flag()
        loop = asyncio.get_running_loop()

        async def one_pass() -> float:
            starts.append(loop.time())
            outcome = outcomes[len(starts) - 1]
            if len(starts) == len(outcomes):
                stop.event.set()
            if outcome is not None:
                raise outcome
            return 0.0

        await WakeLoop(one_pass, what="p", log=log, retry=0.05, spacing=0.0, max_retry=2.0).run(stop)

    with caplog.at_level(logging.DEBUG, "test.passfailure"):
        asyncio.run(main())
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    # once for the first run of "a", again after the good pass, once for "b"
    assert said == ["p failed: RuntimeError: a", "p failed: RuntimeError: a", "p failed: ValueError: b"]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # 0.05, 0.1, 0.2; the good pass; 0.05 again (0.4 without the reset), then 0.1 (0.8 without)
    for i, want in ((0, 0.05), (1, 0.1), (2, 0.2), (4, 0.05), (5, 0.1)):
        assert want * 0.9 <= gaps[i] < want * 1.5 + 0.03, (i, gaps)


def test_pokes_do_not_undo_the_backoff() -> None:
    starts: list[float] = []

    async def main() -> None:
        stop = Flag()
        loop = asyncio.get_running_loop()

        async def one_pass() -> float:
            starts.append(loop.time())
            if len(starts) == 3:
                stop.event.set()
            raise RuntimeError("always")

        passes = WakeLoop(one_pass, what="p", log=log, retry=0.2, spacing=0.0, max_retry=10.0)
        task = asyncio.create_task(passes.run(stop))
        while not stop:
            passes.poke()
            await asyncio.sleep(0.005)
        await asyncio.wait_for(task, 5)

    asyncio.run(main())
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # a poke cuts a backoff short only after its first `retry` seconds: never a busy loop
    assert all(gap >= 0.2 * 0.9 for gap in gaps), gaps


def test_one_line() -> None:
    assert one_line(KeyError("x")) == "KeyError: 'x'"
    assert one_line(RuntimeError("first\nsecond")) == "RuntimeError: first"
    assert one_line(RuntimeError()) == "RuntimeError"
    assert len(one_line(RuntimeError("y" * 1000))) == 300
