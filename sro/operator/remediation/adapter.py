"""The remediation machine inside a reconcile: one pass's records in, node patches, pods and rows out.

Why apart from the machine, as `sro.operator.upgrade.adapter` is for upgrades: the machine knows
records and facts only; this is where one pass's Observed (the health reports decoded from each
node's NodeFeature, the node's pods, the SpecialResource's action pods, the walk's rows) becomes the
machine's `NodeFacts`, and its decisions become the plan's steps — the record annotation and the
cordon as node patches, evictions through the upgrade's path, reset and reboot pods created once per
token (`sro.operator.remediation.pods`) and deleted when their step is over, the node's last
validation run again, the `GpuHealthy` condition on `nodes/status`, events, the status summary and
each node row's `remediation` entry. Nothing here runs unless the spec has `remediation`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sro.api.names import DEVICE_PLUGIN
from sro.api.timestamps import parse_stamp
from sro.devices.faultclasses import Fault, fault_of
from sro.devices.healthreport import HealthReport
from sro.operator.observed import NodeInfo, Observed, PodInfo, SpecialResourceInfo
from sro.operator.plan import NodeEvent, NodePatch
from sro.operator.remediation.conditions import gpu_condition
from sro.operator.remediation.machine import Machine, NodeFacts, NodeRemediation, RemediationPlan, release
from sro.operator.remediation.pods import (
    DEVICES_ANNOTATION,
    TOKEN_ANNOTATION,
    action_pod,
    action_pod_name,
)
from sro.operator.remediation.record import HELD, RESETTING, read
from sro.operator.rendering import Context
from sro.operator.states import State, ValidationState
from sro.operator.status import NodeRow


def enabled(sr: SpecialResourceInfo) -> bool:
    """The SpecialResource asks for remediation (`spec.remediation` is there, even empty)."""
    return isinstance(sr.spec.get("remediation"), Mapping)


@dataclass
class Steps:
    """What the remediation adds to one reconcile's plan."""

    plan: RemediationPlan
    patches: dict[str, NodePatch] = field(default_factory=dict)
    evict: list[tuple[str, str]] = field(default_factory=list)
    create_pods: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    conditions: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    events: list[NodeEvent] = field(default_factory=list)


def remediations(
    ctx: Context,
    chain: Sequence[State],
    selected: Sequence[NodeInfo],
    rows: Sequence[NodeRow],
    obs: Observed,
    by_node: Mapping[str, Sequence[PodInfo]],
    now: datetime,
) -> Steps:
    """Run the remediation machine over the selected nodes and translate its plan."""
    last = _last_validation(chain)
    by_row = {r.name: r for r in rows}
    workloads: dict[str, list[Any]] = {}
    for w in obs.workloads:
        workloads.setdefault(w.node, []).append(w)
    read_pods = set(obs.workload_nodes)
    facts = []
    for node in selected:
        pods = by_node.get(node.name, ())
        report = _report(obs, node.name, ctx.recipe.name)
        current = report is None or from_running_plugin(report, pods)
        facts.append(
            NodeFacts(
                node=node,
                faults=faults_of(report) if current else (),
                report_current=current,
                workloads=tuple(workloads.get(node.name, ())) if node.name in read_pods else None,
                holders=dict(report.holders) if report is not None else {},
                resets=resets(ctx.sr, node, pods),
                boot_id=(report.boot_id if report is not None else "") or node.boot_id,
                validated_at=validated_at(ctx, last, by_row.get(node.name), node.name, pods),
                condition=node.gpu_condition,
            )
        )
    plan = Machine(ctx.spec.remediation, ctx.sr, ctx.recipe.resource, now).run(facts)
    out = Steps(plan)
    for node in selected:
        step = plan.nodes[node.name]
        pods = by_node.get(node.name, ())
        patch = NodePatch(annotations=step.annotations, unschedulable=step.unschedulable)
        if not patch.empty:
            out.patches[node.name] = patch
        out.evict.extend(step.evict)
        creates, deletes = action_pods(ctx, node, step, pods)
        out.create_pods.extend(creates)
        out.delete_pods.extend(deletes)
        if step.revalidate:
            out.delete_pods.extend(revalidation(ctx, last, node.name, pods, step.token))
        # the node's condition from every recipe's report on it, not this recipe's alone: two
        # SpecialResources on one node (a GPU's, an accelerator's) then write the same condition
        # instead of undoing each other's every pass
        every = tuple(f for r in (obs.health.get(node.name) or {}).values() for f in faults_of(r))
        condition = gpu_condition(every, node.gpu_condition, now)
        if condition is not None:
            out.conditions[node.name] = condition
        out.events.extend(NodeEvent(node.name, node.uid, *e) for e in step.events)
    return out


def _report(obs: Observed, node: str, recipe: str) -> HealthReport | None:
    return (obs.health.get(node) or {}).get(recipe)


def from_running_plugin(report: HealthReport, pods: Sequence[PodInfo]) -> bool:
    """The report was written by a device plugin of this SpecialResource that runs on the node now.

    Why: a plugin that stops leaves its report behind (discovery carries it on the NodeFeature until
    the recipe's next plugin writes its own, about a second after that one starts), and no node is
    to be cordoned and drained for a fault a stopped plugin saw, nor a repair taken as done on its
    silence. A starting plugin writes its report at once, so its own is never older than its start:
    one written before the plugin's containers (re)started, or with no plugin running there, is a
    predecessor's. Whole seconds on both sides (the API's `startedAt`); boot ids and holders are
    still read from it (what the node last reported, for the reboot step and its evictions).
    """
    written = parse_stamp(report.updated)
    if written is None:
        return False
    written = written.replace(microsecond=0)
    return any(
        p.state == DEVICE_PLUGIN
        and not p.deleting
        and p.running_since is not None
        and written >= p.running_since
        for p in pods
    )


def faults_of(report: HealthReport | None) -> tuple[Fault, ...]:
    """The node faults among a report's (an Xid the table calls the application's is none)."""
    if report is None:
        return ()
    found = []
    for df in report.faults:
        for xid in df.xids:
            fault = fault_of(df.device, xid, df.detail)
            if fault is not None:
                found.append(fault)
    return tuple(found)


def _action_pods(pods: Sequence[PodInfo]) -> list[PodInfo]:
    return [p for p in pods if TOKEN_ANNOTATION in p.annotations]


def resets(sr: str, node: NodeInfo, pods: Sequence[PodInfo]) -> dict[str, datetime]:
    """device -> when its reset ended: the Succeeded reset pod of the record's RESETTING token (a
    Failed one counts for nothing: the machine times the step out and says so)."""
    rec = read(node, sr)
    token = rec.steps.get(RESETTING, "") if rec is not None else ""
    out: dict[str, datetime] = {}
    for pod in _action_pods(pods):
        if not token or pod.annotations.get(TOKEN_ANNOTATION) != token:
            continue
        if pod.phase != "Succeeded" or pod.finished_at is None:
            continue
        devices = [d for d in pod.annotations.get(DEVICES_ANNOTATION, "").split(",") if d]
        for d in devices:
            if d not in out or pod.finished_at > out[d]:
                out[d] = pod.finished_at
    return out


def _last_validation(chain: Sequence[State]) -> ValidationState | None:
    validations = [s for s in chain if isinstance(s, ValidationState)]
    return validations[-1] if validations else None


def validated_at(
    ctx: Context,
    last: ValidationState | None,
    row: NodeRow | None,
    node: str,
    pods: Sequence[PodInfo],
) -> datetime | None:
    """When the node's validations last passed: its last validation pod's finish (the chain's
    validations run in order, so the last one passing is when the node was validated); None while
    the walk does not call it validated."""
    if row is None or not row.validated:
        return None
    if last is None:  # no validation enabled: validated is what the walk says, since then
        return parse_stamp(row.reached.get("validated") or row.since)
    pod = last.current(ctx, node, pods)
    return pod.finished_at if pod is not None and pod.phase == "Succeeded" else None


def revalidation(
    ctx: Context, last: ValidationState | None, node: str, pods: Sequence[PodInfo], token: str
) -> list[str]:
    """The node validated again after its repair: its last validation's pod (the one that runs a
    workload on the resource through the device plugin) deleted once when it finished before the
    step began; the walk creates it anew. Earlier validations keep their verdicts: a reset leaves
    the driver as it was (a real reboot restarts every pod, so they all run again anyway)."""
    since = parse_stamp(token)
    pod = last.current(ctx, node, pods) if last is not None else None
    if pod is None or pod.deleting or since is None or pod.phase not in ("Succeeded", "Failed"):
        return []
    return [pod.name] if pod.finished_at is None or pod.finished_at < since else []


def action_pods(
    ctx: Context, node: NodeInfo, step: NodeRemediation, pods: Sequence[PodInfo]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The reset or reboot pod this step wants (created once per token: a pod of that name already
    there, whatever its phase, is the node's answer) and the action pods whose step is over (a
    Failed one is kept while the node is held, for a person to read its log)."""
    wanted = ""
    creates = []
    if step.token and (step.reset or step.reboot):
        wanted = action_pod_name(ctx, node.name, step.token)
        if not any(p.name == wanted for p in pods):
            kind = "reboot" if step.reboot else "reset"
            creates.append(action_pod(ctx, node.name, kind, list(step.reset), step.token))
    held = step.record is not None and step.record.state in HELD
    deletes = [
        p.name
        for p in _action_pods(pods)
        if p.name != wanted and not p.deleting and not (held and p.phase == "Failed")
    ]
    return creates, deletes


def stray_action_pods(pods: Sequence[PodInfo], selected: set[str]) -> list[str]:
    """Action pods on nodes that left the selection (or of a SpecialResource that no longer asks
    for remediation): their step is over."""
    return [p.name for p in _action_pods(pods) if not p.deleting and p.node not in selected]


def with_remediation(row: NodeRow, step: NodeRemediation | None) -> NodeRow:
    """The row carries the node's remediation while there is one to show."""
    entry = step.to_status() if step is not None else None
    return replace(row, remediation=entry) if entry else row


def release_remediation(sr: str, node: NodeInfo) -> NodePatch:
    """SpecialResource `sr`'s remediation taken off a node: its record, and the cordon if sro's."""
    step = release(node, sr)
    return NodePatch(annotations=step.annotations, unschedulable=step.unschedulable)
