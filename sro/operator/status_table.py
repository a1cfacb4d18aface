"""The tables `sro status` and `sro upgrade status` print, as rows of strings.

Why apart from the commands: the rows are what a user reads, built from the SpecialResource's status
and the node labels and annotations the operator writes; pure, so unit tests build them from records
while the commands only read the cluster and print. The node table is read from the node labels
(`sro.dev/<sr>.<state>=ready`), the same source the DaemonSets gate on, so it shows what the
scheduler sees; the failing state's reason and log come from the SpecialResource's status rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sro.api.names import READY, STATE_NAMES, state_label, upgrade_annotation, validated_label
from sro.operator.observed import NodeInfo, SpecialResourceInfo
from sro.operator.upgrade.record import UPGRADE_STATES, Record, version_of

SHORT = {
    "driver": "driver",
    "driver-validation": "drv-valid",
    "runtime": "runtime",
    "device-plugin": "plugin",
    "device-plugin-validation": "plugin-valid",
    "monitoring": "monitoring",
    "feature-discovery": "discovery",
}


def _condition(sr: SpecialResourceInfo, ctype: str) -> Mapping[str, Any]:
    return next((c for c in sr.status.get("conditions") or () if c.get("type") == ctype), {})


def summary_rows(srs: Sequence[SpecialResourceInfo]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for sr in srs:
        degraded = _condition(sr, "Degraded")
        problem = degraded.get("message", "") if degraded.get("status") == "True" else ""
        rows.append(
            (
                sr.name,
                sr.recipe,
                ", ".join(sr.status.get("resources") or ()) or str(sr.status.get("resource", "")),
                str(sr.status.get("ready", "Unknown")),
                str(sr.status.get("nodeCount", 0)),
                str(sr.status.get("validatedCount", 0)),
                problem or str(_condition(sr, "Progressing").get("message", "")),
            )
        )
    return rows


def node_rows(sr: SpecialResourceInfo, nodes: Sequence[NodeInfo]) -> list[tuple[str, ...]]:
    """One row per node the SpecialResource's status lists: a cell per state, then the detail."""
    modes: Mapping[str, str] = sr.status.get("states") or {}
    details = {r.get("name"): r for r in sr.status.get("nodes") or ()}
    by_name = {n.name: n for n in nodes}
    rows: list[tuple[str, ...]] = []
    for name in sorted(details):
        node = by_name.get(name)
        labels = node.labels if node else {}
        cells = []
        for state in STATE_NAMES:
            if modes.get(state, "enabled") != "enabled":
                cells.append("-")
            else:
                cells.append("ready" if labels.get(state_label(sr.name, state)) == READY else "")
        row = details[name]
        if labels.get(validated_label(sr.name)) == "true":
            detail = f"validated since {row.get('since', '')}"
            # what the passed validations skipped (no CUDA on a simulated driver): worth knowing
            detail += f"; skipped {row['note']}" if row.get("note") else ""
        else:
            detail = f"{row.get('failing', '')}: {row.get('reason', '')} {row.get('message', '')}".strip(": ")
        upgrade = row.get("upgrade") or {}
        if upgrade:
            detail += f"; driver upgrade {upgrade.get('from')} -> {upgrade.get('to')}: {upgrade.get('state')}"
            detail += f" ({upgrade['reason']})" if upgrade.get("reason") else ""
        remedy = row.get("remediation") or {}
        if remedy:  # a node under remediation (or held for a person): what, where, which step
            devices = ",".join(str(d) for d in remedy.get("devices") or ())
            detail += f"; remediation {remedy.get('class')} on device(s) {devices}: {remedy.get('step')}"
            detail += f" ({remedy['reason']})" if remedy.get("reason") else ""
        rows.append((name, *cells, detail))
    return rows


def quota_rows(quotas: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    return [
        (
            str(r.get("namespace", "")),
            str(r.get("resource", "")),
            f"{r.get('used', '-')} / {r.get('hard', '?')}",
            str(r.get("problem", "")),
        )
        for r in quotas
    ]


def _time(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def step_durations(rec: Record) -> str:
    """`cordoned +0s, waiting-for-jobs +1s, ...`: each step entered, seconds after the first."""
    times = [(s, _time(rec.steps[s])) for s in UPGRADE_STATES if s in rec.steps]
    known = [(s, t) for s, t in times if t is not None]
    if not known:
        return ""
    start = min(t for _, t in known)
    return ", ".join(
        f"{s} +{int((t - start).total_seconds())}s" for s, t in sorted(known, key=lambda x: x[1])
    )


def upgrade_rows(sr: SpecialResourceInfo, nodes: Sequence[NodeInfo]) -> list[tuple[str, ...]]:
    """One row per node with an upgrade record: node, state, from → to, the steps, the reason."""
    rows: list[tuple[str, ...]] = []
    for node in sorted(nodes, key=lambda n: n.name):
        rec = Record.from_json(node.annotations.get(upgrade_annotation(sr.name), ""))
        if rec is None:
            continue
        rows.append(
            (
                node.name,
                rec.state,
                f"{version_of(rec.from_rev)} → {version_of(rec.to_rev)}",
                step_durations(rec),
                rec.reason,
            )
        )
    return rows
