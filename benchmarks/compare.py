"""`python -m benchmarks compare A.json B.json`: how each figure's ratio moved between two runs.

Absolute numbers from different runs are not comparable on a shared machine, but ratios against a
baseline measured in the same run are; a change is only worth flagging when it is larger than the
run-to-run noise, i.e. when B's per-pair spread lies wholly above (worse) or below (better) A's.
Lower ratios are better: every ratio here is the cost of sro against a floor or a by-hand baseline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Side:
    ratio: float | None
    low: float | None  # the spread, or the ratio itself for a single measurement
    high: float | None


@dataclass(frozen=True)
class Change:
    name: str
    a: Side | None
    b: Side | None

    @property
    def change(self) -> float | None:
        """B's ratio over A's: above 1 is slower, below 1 faster."""
        if self.a is None or self.b is None or not self.a.ratio or self.b.ratio is None:
            return None
        return self.b.ratio / self.a.ratio

    @property
    def flag(self) -> str:
        if self.a is None:
            return "only in B"
        if self.b is None:
            return "only in A"
        a, b = self.a, self.b
        if a.low is None or a.high is None or b.low is None or b.high is None:
            return ""
        if b.low > a.high:
            return "WORSE"
        if b.high < a.low:
            return "better"
        return ""


def side(rec: Mapping[str, Any]) -> Side:
    """One figure's ratio and spread from a report record (a missing spread is the ratio itself)."""
    ratio = rec.get("ratio")
    spread = rec.get("spread")
    if isinstance(spread, list) and len(spread) == 2:
        return Side(ratio, spread[0], spread[1])
    return Side(ratio, ratio, ratio)


def figures(doc: Mapping[str, Any]) -> dict[str, Side]:
    """Name → Side of every figure in a report document; refuses a document that is not one."""
    recs = doc.get("figures") if isinstance(doc, Mapping) else None
    if not isinstance(recs, list):
        raise ValueError("not a benchmark report (no 'figures' list)")
    out: dict[str, Side] = {}
    for rec in recs:
        if not isinstance(rec, Mapping) or not isinstance(rec.get("name"), str):
            raise ValueError("not a benchmark report (a figure without a name)")
        out[rec["name"]] = side(rec)
    return out


def compare(a: Mapping[str, Side], b: Mapping[str, Side]) -> list[Change]:
    """One Change per figure present in either report, in A's order then B's new ones."""
    names = list(a) + [n for n in b if n not in a]
    return [Change(n, a.get(n), b.get(n)) for n in names]


def load(path: Path) -> dict[str, Side]:
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not JSON: {e.msg} at line {e.lineno}") from None
    try:
        return figures(doc)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _side_text(s: Side | None) -> str:
    if s is None:
        return "-"
    if s.low is None or s.high is None or s.low == s.high:
        return _r(s.ratio)
    return f"{_r(s.ratio)} ({_r(s.low)}–{_r(s.high)})"


def rows(changes: Sequence[Change]) -> list[tuple[str, str, str, str, str]]:
    """Table rows: figure, ratio in A (spread), ratio in B (spread), change B/A, flag."""
    return [
        (c.name, _side_text(c.a), _side_text(c.b), "-" if c.change is None else f"{c.change:.2f}", c.flag)
        for c in changes
    ]


def main(argv: Sequence[str]) -> int:
    from rich.console import Console
    from rich.table import Table

    if len(argv) != 2:
        print("usage: python -m benchmarks compare A.json B.json")
        return 2
    try:
        a, b = load(Path(argv[0])), load(Path(argv[1]))
    except ValueError as e:
        print(f"compare: {e}")
        return 2
    changes = compare(a, b)
    table = Table(
        title=f"ratio in A ({argv[0]}) vs B ({argv[1]}); WORSE/better only where the spreads do not overlap"
    )
    for col in ("benchmark", "A", "B", "change (B/A)", "flag"):
        table.add_column(col, justify="left" if col in ("benchmark", "flag") else "right")
    for r in rows(changes):
        table.add_row(*r)
    console = Console() if Console().is_terminal else Console(width=200)
    console.print(table)
    worse = sum(c.flag == "WORSE" for c in changes)
    better = sum(c.flag == "better" for c in changes)
    print(f"{len(changes)} figures: {worse} worse, {better} better beyond the spread")
    return 0
