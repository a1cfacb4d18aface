"""The fault campaign's short run (issue 25): 3 minutes of seeded faults on the local cluster, with
the observer checking every invariant throughout — 0 violations, and the SpecialResource converged
within the bound after the last fault.

Named `zx` to run near the end of the session, after the tests that need a calm cluster and before
the ones that take the API server down (`zy`, `zz`). The seed is fixed, so a failure replays
exactly with the command the report prints. The kinds leave out the two slowest (`sro-upgraded`
rolls every operand twice, `sr-reapplied` revalidates from nothing) so that set-up, faults,
convergence and tear-down fit CI's time; `make chaos` runs every kind.
"""

from __future__ import annotations

import sys
import time

import pytest

from benchmarks.chaos.report import render
from benchmarks.chaos.runner import BOUND_S, campaign
from benchmarks.chaos.schedule import KINDS
from sro.local.cluster import LocalCluster
from tests.e2e.helpers import figure

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

SEED = 25
MINUTES = 3.0
SHORT_KINDS = tuple(k for k in KINDS if k not in ("sro-upgraded", "sr-reapplied"))


def test_a_short_seeded_campaign_ends_with_no_violation(cluster: LocalCluster, sro_image: str) -> None:
    t0 = time.monotonic()

    def progress(message: str) -> None:
        print(f"[chaos {time.monotonic() - t0:6.1f}s] {message}", file=sys.__stderr__, flush=True)

    outcome = campaign(SEED, MINUTES, SHORT_KINDS, progress)
    text = render(outcome)
    print(text, file=sys.__stderr__, flush=True)
    conv = outcome.convergences
    figure(f"chaos short run: {len(outcome.faults)} faults, converged after the last in {outcome.final_converged_s} s, "
           f"max {max(conv) if conv else '-'} s, {time.monotonic() - t0:.0f} s in all")  # fmt: skip
    assert not outcome.errors, text
    assert len(outcome.faults) == len(outcome.schedule) >= len(SHORT_KINDS) // 2, text
    assert [v.kind for v in outcome.violations] == [], text
    assert outcome.final_converged_s is not None and outcome.final_converged_s <= BOUND_S, text
