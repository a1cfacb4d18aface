"""What a campaign prints: the table (faults per kind, violations per kind, convergence p50/p99,
operator restarts, RSS peak), the fault log with times, and — when anything failed — the seed, the
schedule and the exact command that replays it.

Pure: it formats an `Outcome` into text, so the layout is unit-tested without a cluster.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from benchmarks.chaos.schedule import KINDS, Planned


class ViolationLike(Protocol):
    """The observer's Violation (benchmarks/chaos/invariants.py): what the report reads of it."""

    @property
    def kind(self) -> str: ...
    @property
    def at(self) -> float: ...
    @property
    def detail(self) -> str: ...


@dataclass(frozen=True)
class FaultRecord:
    """One injected fault: seconds from the campaign's start, its log line, and how long after its
    end the SpecialResource was converged again (None: the next fault came first)."""

    planned: Planned
    started_s: float
    ended_s: float
    line: str
    converged_s: float | None = None


@dataclass
class Outcome:
    seed: int
    minutes: float
    kinds: tuple[str, ...]
    schedule: list[Planned]
    faults: list[FaultRecord] = field(default_factory=list)
    violations: list[ViolationLike] = field(default_factory=list)
    final_converged_s: float | None = None  # after the last fault; None: not within the bound
    bound_s: float = 0.0
    operator_restarts: int = 0
    rss_peak_mib: float = 0.0
    started_at: float = 0.0  # time.time() at the campaign's start (violations' `at` is epoch)
    errors: list[str] = field(default_factory=list)  # an injector that raised, a set-up step
    notes: list[str] = field(default_factory=list)  # what the observer could not look at (not failures)

    @property
    def convergences(self) -> list[float]:
        got = [f.converged_s for f in self.faults if f.converged_s is not None]
        return got + ([self.final_converged_s] if self.final_converged_s is not None else [])

    @property
    def failed(self) -> bool:
        return bool(self.violations) or self.final_converged_s is None or bool(self.errors)


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation; one value is its own quantile."""
    if not values:
        raise ValueError("no values")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def replay_command(seed: int, minutes: float, kinds: tuple[str, ...]) -> str:
    cmd = f"python -m benchmarks chaos --seed {seed} --minutes {minutes:g}"
    return cmd if set(kinds) == set(KINDS) else f"{cmd} --faults {','.join(kinds)}"


def table(o: Outcome) -> list[str]:
    injected = Counter(f.planned.kind for f in o.faults)
    violated = Counter(v.kind for v in o.violations)
    width = max(len(k) for k in (*KINDS, *violated, "invariant violations"))
    lines = [f"chaos campaign: seed {o.seed}, {o.minutes:g} min, {len(o.faults)} faults", ""]
    lines.append(f"{'fault':<{width}}  injected")
    lines += [f"{k:<{width}}  {injected[k]:>8}" for k in o.kinds]
    lines += ["", f"{'invariant violations':<{width}}  count"]
    lines += [f"{k:<{width}}  {n:>5}" for k, n in sorted(violated.items())] or [
        f"{'(none)':<{width}}  {0:>5}"
    ]
    conv = o.convergences
    lines.append("")
    if conv:
        lines.append(
            f"convergence after a fault: p50 {quantile(conv, 0.5):.1f} s, p99 {quantile(conv, 0.99):.1f} s "
            f"(max {max(conv):.1f} s over {len(conv)}; bound {o.bound_s:g} s)"
        )
    else:
        lines.append("convergence after a fault: none measured")
    last = (
        f"{o.final_converged_s:.1f} s" if o.final_converged_s is not None else f"NOT within {o.bound_s:g} s"
    )
    lines.append(f"converged after the last fault: {last}")
    lines.append(f"operator restarts: {o.operator_restarts}; operator RSS peak: {o.rss_peak_mib:.1f} MiB")
    return lines


def fault_log(o: Outcome) -> list[str]:
    lines = ["fault log (seconds from the start):"]
    for i, f in enumerate(o.faults):
        if i == len(o.faults) - 1:  # the last one: the campaign's final wait measured it
            final, bound = o.final_converged_s, o.bound_s
            conv = f"converged +{final:.1f} s" if final is not None else f"not converged within {bound:g} s"
        elif f.converged_s is not None:
            conv = f"converged +{f.converged_s:.1f} s"
        else:
            conv = "not converged before the next"
        lines.append(f"  {f.started_s:7.1f}-{f.ended_s:7.1f}  {f.planned.kind:<22} {f.line}  [{conv}]")
    for v in o.violations:
        lines.append(f"  {v.at - o.started_at:7.1f}          VIOLATION {v.kind}: {v.detail}")
    lines += [f"  ERROR {e}" for e in o.errors]
    lines += [f"  note: {n}" for n in o.notes]
    return lines


def render(o: Outcome) -> str:
    lines = [*table(o), "", *fault_log(o)]
    if o.failed:
        lines += ["", f"FAILED — seed {o.seed}; the schedule:"]
        lines += [f"  {p.at_s:7.1f}  {p.describe()}" for p in o.schedule]
        lines.append(f"replay: {replay_command(o.seed, o.minutes, o.kinds)}")
    else:
        lines += ["", f"OK — 0 violations (replay: {replay_command(o.seed, o.minutes, o.kinds)})"]
    return "\n".join(lines)
