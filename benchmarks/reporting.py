"""Turns figures into the report's rows, its summary line and its JSON document — pure, no I/O.

The table a person reads and the JSON two runs are compared by must say the same thing, so both
are built here from one Figure and nothing else; `__main__` only gathers the figures and the
machine facts and writes the results out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.harness import Figure

COLUMNS = ("benchmark", "value", "baseline", "ratio", "spread", "target", "met")


def status(f: Figure) -> str:
    """yes / NO / explained (not met, with the floor that prevents it given) / - (informational)."""
    if f.met is None:
        return "-"
    if f.met:
        return "yes"
    return "explained" if f.why else "NO"


def _num(x: float) -> str:
    return f"{x:.3f}" if math.isfinite(x) else "inf"


def _ratio(x: float) -> str:
    return f"{x:.2f}x" if math.isfinite(x) else "inf"


def spread_text(spread: tuple[float, float] | None) -> str:
    if spread is None:
        return "-"
    return f"{_ratio(spread[0])}–{_ratio(spread[1])}"


def row(f: Figure) -> tuple[str, ...]:
    """One table row, in COLUMNS order."""
    return (
        f.name,
        f"{_num(f.value)} {f.unit}",
        f"{_num(f.baseline)} {f.unit} ({f.baseline_name})",
        _ratio(f.ratio),
        spread_text(f.spread),
        f.target,
        status(f),
    )


def explanations(figures: Sequence[Figure]) -> list[str]:
    """The `why` of every goal not met, one line each, to print under the table."""
    return [f"{f.name}: {f.why}" for f in figures if status(f) == "explained"]


def summary(figures: Sequence[Figure]) -> str:
    """'N of M goals met, K explained, J not met' over the figures that carry a goal or a limit."""
    states = [status(f) for f in figures if f.met is not None]
    met, explained, missed = states.count("yes"), states.count("explained"), states.count("NO")
    return f"{met} of {len(states)} goals met, {explained} explained, {missed} not met"


def _finite(x: float) -> float | None:
    # JSON has no Infinity/NaN; a zero baseline is written as null rather than as invalid JSON
    return x if math.isfinite(x) else None


def record(f: Figure) -> dict[str, Any]:
    """Every field of a figure plus what the table derives from it (ratio, spread, met, status)."""
    spread = f.spread
    return {
        "name": f.name,
        "value": _finite(f.value),
        "baseline": _finite(f.baseline),
        "unit": f.unit,
        "baseline_name": f.baseline_name,
        "target": f.target,
        "goal": f.goal,
        "limit": f.limit,
        "why": f.why,
        "ratio": _finite(f.ratio),
        "ratios": [_finite(r) for r in f.ratios],
        "spread": None if spread is None else [_finite(spread[0]), _finite(spread[1])],
        "met": f.met,
        "status": status(f),
        "measured_runs": list(f.measured_runs),
        "baseline_runs": list(f.baseline_runs),
    }


def document(
    figures: Sequence[Figure], facts: Mapping[str, Any], errors: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The JSON report: machine facts, the summary line, every figure, and modules that failed."""
    return {
        "machine": dict(facts),
        "summary": summary(figures),
        "figures": [record(f) for f in figures],
        "errors": dict(errors or {}),
    }


def _num_or_inf(x: Any) -> float:
    return float("inf") if x is None else float(x)


def figure_from(rec: Mapping[str, Any]) -> Figure:
    """A figure back from its JSON record (null numbers were infinite)."""
    return Figure(
        rec["name"],
        _num_or_inf(rec["value"]),
        _num_or_inf(rec["baseline"]),
        rec["unit"],
        rec["baseline_name"],
        rec.get("target", ""),
        ratios=tuple(_num_or_inf(r) for r in rec.get("ratios", ())),
        goal=rec.get("goal"),
        why=rec.get("why", ""),
        measured_runs=tuple(rec.get("measured_runs", ())),
        baseline_runs=tuple(rec.get("baseline_runs", ())),
        limit=rec.get("limit"),
    )


def merge(docs: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """One report from several (benchmarks run apart, e.g. the cluster ones one at a time): a figure
    of a later report replaces the same-named one of an earlier; each report's machine facts kept."""
    figures: dict[str, Figure] = {}
    errors: dict[str, str] = {}
    for _, doc in docs:
        for rec in doc["figures"]:
            figures.pop(rec["name"], None)  # the later one goes where it ran, at the end
            figures[rec["name"]] = figure_from(rec)
        errors.update(doc.get("errors", {}))
    facts = {"merged_from": [{"file": path, **doc.get("machine", {})} for path, doc in docs]}
    return document(list(figures.values()), facts, errors)
