"""The upgrade machine inside a reconcile: the walk's verdicts in, node patches and rows out.

Why apart from the machine: the machine knows records and facts only; this is where one pass's
walk (is the node validated, which state fails) becomes the machine's facts, and its decisions
become the plan's node patches and the status rows' `upgrade` entries. Taking a SpecialResource's
upgrade keys off a node (it left the selection, no driver is deployed) is here too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sro.api.names import driver_revision_label, upgrade_annotation, upgrade_state_label
from sro.api.timestamps import stamp
from sro.operator.observed import NodeInfo, Observed, PodInfo
from sro.operator.plan import NodePatch
from sro.operator.rendering import Context
from sro.operator.status import NodeRow
from sro.operator.upgrade.machine import Machine, NodeFacts, NodeUpgrade, UpgradePlan
from sro.operator.upgrade.record import DONE, Record
from sro.operator.upgrade.revision import driver_ready, driver_revision
from sro.operator.upgrade.rewalk import stale_pods
from sro.operator.upgrade.scan import scan_pod_name


def upgrades(
    ctx: Context,
    selected: Sequence[NodeInfo],
    rows: Sequence[NodeRow],
    obs: Observed,
    by_node: Mapping[str, Sequence[PodInfo]],
    now: datetime,
) -> UpgradePlan:
    """Run the upgrade machine over the selected nodes, with the walk's verdicts."""
    rev_key = driver_revision_label(ctx.sr)
    by_row = {r.name: r for r in rows}
    pods_by_node: dict[str, list[Any]] = {}
    for w in obs.workloads:
        pods_by_node.setdefault(w.node, []).append(w)
    read = set(obs.workload_nodes)
    by_name = {p.name: p for p in obs.pods}
    facts = []
    for node in selected:
        row = by_row[node.name]
        scan_name = scan_pod_name(ctx, node.name)
        facts.append(
            NodeFacts(
                node=node,
                validated=row.validated,
                failing=f"{row.failing}: {row.reason} {row.message}".strip() if row.failing else "",
                driver_ready=driver_ready(node, by_node.get(node.name, ()), rev_key),
                workloads=tuple(pods_by_node.get(node.name, ())) if node.name in read else None,
                scan=by_name.get(scan_name),
                own=frozenset(p.uid for p in by_node.get(node.name, ()) if p.uid),
                stale=stale_pods(ctx, node.name, by_node.get(node.name, ())),
            )
        )
    return Machine(ctx, driver_revision(ctx), now, stamp(now)).run(facts)


def as_patch(step: NodeUpgrade) -> NodePatch:
    return NodePatch(labels=step.labels, annotations=step.annotations, unschedulable=step.unschedulable)


def with_upgrade(row: NodeRow, step: NodeUpgrade | None) -> NodeRow:
    """The row carries the node's upgrade while one is under way (a finished one lives on the node)."""
    if step is None or step.record is None or step.record.state == DONE:
        return row
    return replace(row, upgrade=step.to_status())


def release_upgrade(sr: str, node: NodeInfo) -> NodePatch:
    """The driver revision and upgrade keys taken off a node, uncordoning it if sro cordoned it."""
    keys = [k for k in (driver_revision_label(sr), upgrade_state_label(sr)) if k in node.labels]
    ann = upgrade_annotation(sr)
    rec = Record.from_json(node.annotations.get(ann, ""), f"node {node.name}")
    ours = rec is not None and rec.cordoned and rec.state not in (DONE,) and node.unschedulable
    return NodePatch(
        labels={k: None for k in keys},
        annotations={ann: None} if ann in node.annotations else {},
        unschedulable=False if ours else None,
    )
