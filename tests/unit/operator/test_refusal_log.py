"""A refused SpecialResource is logged once per distinct refusal, not once per pass.

Why: the log line was tied to the status write succeeding (it compared the plan's conditions with
the stored ones). Where the API server refuses the status — Kubernetes 1.20 built with Go >= 1.16
refused "" (kubernetes#99804) — every pass, 3 s apart, logged the same refusal again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from sro.operator.handlers import Operator
from sro.operator.observed import Observed, SpecialResourceInfo
from sro.operator.reconcile import reconcile
from tests.unit.operator.fakes import FakeIO


def sr(spec: dict[str, Any], uid: str = "uid-1", status: dict[str, Any] | None = None) -> SpecialResourceInfo:
    return SpecialResourceInfo(
        name="bad", uid=uid, spec=spec, created="2026-11-22T10:00:00Z", status=status or {}
    )


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "not deployed" in r.getMessage()]


def passes(op: Operator, n: int) -> None:
    async def run() -> None:
        for _ in range(n):
            await op.run_pass("bad")

    asyncio.run(run())


def test_a_refusal_whose_status_is_not_written_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    io = FakeIO(sr({"recipe": "no-such-recipe"}), writes=False)
    op = Operator(io)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, "sro.operator"):
        passes(op, 3)
        said = refusals(caplog)
        assert len(said) == 1 and said[0].startswith("bad: not deployed: SpecInvalid: spec.recipe:"), said
        # another refusal is said once too
        io.sr = sr({"recipe": "simulated-gpu", "driver": {"imageTemplate": "x:{nope}"}})
        passes(op, 3)
        said = refusals(caplog)
        assert len(said) == 2 and "spec.driver.imageTemplate" in said[1], said
        # a SpecialResource re-created under the same name with the first refusal is said again
        io.sr = sr({"recipe": "no-such-recipe"}, uid="uid-2")
        passes(op, 2)
        assert len(refusals(caplog)) == 3


def test_a_refusal_already_in_the_stored_status_is_not_logged_again(caplog: pytest.LogCaptureFixture) -> None:
    """A new leader finds the refusal written by the old one: nothing new to say."""
    first = sr({"recipe": "no-such-recipe"})
    stored = reconcile(Observed(sr=first, nodes=()), "sro-system").status
    io = FakeIO(sr({"recipe": "no-such-recipe"}, status=stored), writes=True)
    with caplog.at_level(logging.WARNING, "sro.operator"):
        passes(Operator(io), 2)  # type: ignore[arg-type]
    assert refusals(caplog) == []


def test_a_written_refusal_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    io = FakeIO(sr({"recipe": "no-such-recipe"}), writes=True)
    with caplog.at_level(logging.WARNING, "sro.operator"):
        passes(Operator(io), 3)  # type: ignore[arg-type]
    assert len(refusals(caplog)) == 1
