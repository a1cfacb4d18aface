"""What `sro remediation status` prints: one row per node under remediation, and the breaker (pure).

Why from the nodes' records and not only from the SpecialResource's status: the record on the Node
is what the machine goes on from, written in the same patch as the cordon, so the table is right
while the operator restarts or before its next status write (as `sro upgrade status` reads the
upgrade records). The row shows what the status row's `remediation` entry shows
(`NodeRemediation.to_status`); the breaker line is the machine's summary (`status.remediation`),
which only the operator can compute (it counts every node out of service).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from sro.api.timestamps import parse_stamp
from sro.operator.observed import NodeInfo, SpecialResourceInfo
from sro.operator.remediation.machine import NodeRemediation
from sro.operator.remediation.record import HELD, read

COLUMNS: Final = ("node", "class", "devices", "action", "step", "since", "attempts", "reason")


def age(stamp: str, now: datetime) -> str:
    """`2m10s ago` for an RFC 3339 stamp; the text as it is when it does not parse."""
    t = parse_stamp(stamp)
    if t is None:
        return stamp or "-"
    s = max(int((now - t).total_seconds()), 0)
    if s < 60:
        return f"{s}s ago"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s ago"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m ago"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h ago"


def remediation_rows(
    sr: SpecialResourceInfo, nodes: Sequence[NodeInfo], now: datetime
) -> list[tuple[str, ...]]:
    """One row per node with a remediation to show (a finished one that left nothing cordoned is
    not shown, as on the status row), in node order."""
    rows: list[tuple[str, ...]] = []
    for node in sorted(nodes, key=lambda n: n.name):
        rec = read(node, sr.name)
        entry = NodeRemediation(record=rec).to_status() if rec is not None else None
        if entry is None:
            continue
        rows.append(
            (
                node.name,
                str(entry["class"] or "-"),
                ",".join(entry["devices"]) or "-",
                str(entry["action"] or "-"),
                str(entry["step"]),
                age(str(entry["since"]), now),
                str(entry["attempts"]),
                str(entry.get("reason", "")),
            )
        )
    return rows


def held(rows: Sequence[tuple[str, ...]]) -> bool:
    """A node is left cordoned for a person (limit or failed): `status` exits 3."""
    return any(r[4] in HELD for r in rows)


def _yes(value: Any) -> str:
    return "yes" if value is True else "no"


def breaker_line(sr: SpecialResourceInfo) -> str:
    """The breaker and the switches, from the machine's summary; the spec's switches when the
    operator has written none yet."""
    spec = sr.spec.get("remediation")
    if spec is None:  # opt-in: absent means none of it runs
        return (
            "remediation off: the spec has no `remediation` (`remediation: {}` turns it on with the defaults)"
        )
    summary: Mapping[str, Any] = sr.status.get("remediation") or {}
    switches = spec if isinstance(spec, Mapping) else {}
    paused = summary.get("paused", switches.get("paused", False))
    dry = summary.get("dryRun", switches.get("dryRun", False))
    breaker = summary.get("breaker")
    if not isinstance(breaker, Mapping):
        head = "breaker: not computed yet (the operator writes it on its next pass over the nodes)"
    else:
        head = (
            f"breaker: {breaker.get('unavailable', '?')} of at most {breaker.get('limit', '?')} node(s) "
            f"out of service (spec.remediation.maxUnavailable), tripped: {_yes(breaker.get('tripped'))}"
        )
    return f"{head}; paused: {_yes(paused)}; dry run: {_yes(dry)}"


def counts_line(sr: SpecialResourceInfo) -> str:
    """`gpus: evicting 1, waiting 3` from the machine's summary ("no node under remediation")."""
    summary: Mapping[str, Any] = sr.status.get("remediation") or {}
    nodes = summary.get("nodes") if isinstance(summary.get("nodes"), Mapping) else {}
    counts = ", ".join(f"{k} {v}" for k, v in sorted(nodes.items()) if v) if nodes else ""
    return f"{sr.name}: {counts or 'no node under remediation'}"
