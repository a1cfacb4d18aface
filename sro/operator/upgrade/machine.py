"""One pass of the upgrade machine over a SpecialResource's selected nodes (pure).

Why a machine of its own: which nodes start (in name order, within maxParallelUpgrades and
maxUnavailable), when a node moves to its next step, what is evicted (and what never), when the
driver label moves and when a node fails — all is decided here from the nodes' records and the
facts of this pass, so unit tests run it over recorded cluster states. An eviction is asked for
only while the pod is still there and not already terminating, so none is repeated after a restart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sro.api.names import driver_revision_label, upgrade_annotation, upgrade_state_label
from sro.api.selectors import parse_selector, selector_matches
from sro.api.specialresource import UpgradePolicy
from sro.operator.observed import NodeInfo, PodInfo, WorkloadPod
from sro.operator.remediation.record import remediating
from sro.operator.rendering import Context, short_hash
from sro.operator.states import INPUTS_ANNOTATION
from sro.operator.upgrade.record import (
    CORDONED,
    DONE,
    DRIVER_REPLACED,
    FAILED,
    IN_PROGRESS,
    PODS_EVICTED,
    READS_PODS,
    UNCORDONED,
    UPGRADE_REQUIRED,
    UPGRADE_STATES,
    VALIDATED,
    WAITING_FOR_JOBS,
    Record,
    version_of,
)
from sro.operator.upgrade.scan import SCAN_RETRY, read_scan, scan_pod


@dataclass(frozen=True)
class NodeUpgrade:
    """What the machine decided for one node in one pass."""

    record: Record | None
    labels: Mapping[str, str | None] = field(default_factory=dict)
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    unschedulable: bool | None = None  # None: leave as is
    evict: tuple[tuple[str, str], ...] = ()
    create_pods: tuple[dict[str, Any], ...] = ()
    delete_pods: tuple[str, ...] = ()
    events: tuple[tuple[str, str, str], ...] = ()  # (type, reason, message)

    def to_status(self) -> dict[str, Any] | None:
        rec = self.record
        if rec is None:
            return None
        out: dict[str, Any] = {
            "state": rec.state,
            "from": version_of(rec.from_rev),
            "to": version_of(rec.to_rev),
            "steps": dict(rec.steps),
        }
        if rec.reason:
            out["reason"] = rec.reason[:300]
        return out


@dataclass(frozen=True)
class UpgradePlan:
    nodes: Mapping[str, NodeUpgrade]
    summary: Mapping[str, Any]
    pinned: frozenset[str]  # revisions whose DaemonSets must stay (a node runs or may return to them)
    busy: bool  # a node is mid-upgrade: look again soon


def max_unavailable(policy: UpgradePolicy, nodes: int) -> int:
    value = policy.max_unavailable
    if isinstance(value, str) and value.endswith("%"):
        return max(1, math.ceil(nodes * int(value[:-1]) / 100))
    return int(value)


@dataclass(frozen=True)
class NodeFacts:
    """What the machine reads about one selected node."""

    node: NodeInfo
    validated: bool  # the node's walk over the states, this pass
    failing: str = ""  # the walk's failing state and reason, for messages
    driver_ready: bool = False  # a driver pod of the node's revision is Ready
    workloads: tuple[WorkloadPod, ...] | None = None  # None: not read this pass
    scan: PodInfo | None = None
    own: frozenset[str] = frozenset()  # uids of the SpecialResource's own pods on the node
    stale: tuple[str, ...] = ()  # uids of the operand pods the new driver invalidates (`rewalk`)


class Machine:
    """One pass of the upgrade machine over the selected nodes."""

    def __init__(self, ctx: Context, target: str, now: datetime, stamp: str) -> None:
        self.ctx, self.target, self.now, self.stamp = ctx, target, now, stamp
        self.policy = ctx.spec.driver.upgrade_policy
        self.rev_key = driver_revision_label(ctx.sr)
        self.state_key = upgrade_state_label(ctx.sr)
        self.ann_key = upgrade_annotation(ctx.sr)

    def run(self, facts: Sequence[NodeFacts]) -> UpgradePlan:
        records: dict[str, Record | None] = {}
        out: dict[str, NodeUpgrade] = {}
        for f in facts:
            records[f.node.name] = self._classify(f)
        starts = self._starts(facts, records)
        for f in sorted(facts, key=lambda f: f.node.name):
            out[f.node.name] = self._step(f, records[f.node.name], f.node.name in starts)
        final = {n: u.record for n, u in out.items()}
        counts: dict[str, int] = {}
        for rec in final.values():
            if rec is not None:
                counts[rec.state] = counts.get(rec.state, 0) + 1
        pinned = {self.target}
        for f in facts:
            rev = out[f.node.name].labels.get(self.rev_key, f.node.labels.get(self.rev_key))
            if rev:
                pinned.add(rev)
            rec = final[f.node.name]
            if rec is not None and rec.state in (*IN_PROGRESS, UPGRADE_REQUIRED) and rec.from_rev:
                pinned.add(rec.from_rev)  # a failing node goes back to it
        blocked = self._blocked(final)
        summary: dict[str, Any] = {
            "target": version_of(self.target),
            "revision": self.target,
            "paused": self.policy.paused,
            "autoUpgrade": self.policy.auto_upgrade,
            "nodes": counts,
        }
        if blocked:
            summary["blocked"] = blocked
        busy = any(rec is not None and rec.state in IN_PROGRESS for rec in final.values())
        return UpgradePlan(out, summary, frozenset(pinned), busy)

    # ---- which record each node has before this pass's steps ------------------------------------
    def _classify(self, f: NodeFacts) -> Record | None:
        node = f.node
        rev = node.labels.get(self.rev_key)
        rec = Record.from_json(node.annotations.get(self.ann_key, ""), f"node {node.name}")
        if not rev:
            return None  # a new node: it gets the target driver straight away
        if rec is None or rec.state == DONE:
            if rev == self.target:
                return rec
            return Record(UPGRADE_REQUIRED, rev, self.target, {UPGRADE_REQUIRED: self.stamp})
        if rec.to_rev == self.target:
            return rec
        # the spec changed since this record was made
        if rec.state in (UPGRADE_REQUIRED, FAILED):
            if rev == self.target:  # back where the spec wants it: nothing to do (uncordon if ours)
                return replace(rec, to_rev=self.target).enter(VALIDATED, self.stamp) if rec.cordoned else None
            return Record(UPGRADE_REQUIRED, rev, self.target, {UPGRADE_REQUIRED: self.stamp}, rec.cordoned)
        # mid-upgrade: keep the node cordoned and emptied, and aim at the new target
        retarget = replace(rec, to_rev=self.target)
        if rev == self.target:  # it runs what the spec now asks for: validate, then uncordon
            return retarget.enter(DRIVER_REPLACED, self.stamp)
        if rec.state in (DRIVER_REPLACED, VALIDATED, UNCORDONED):  # replace its driver once more
            return retarget.enter(PODS_EVICTED, self.stamp)
        return retarget

    def _blocked(self, records: Mapping[str, Record | None]) -> str:
        failed = sorted(n for n, r in records.items() if r is not None and r.state == FAILED)
        if failed:
            return f"node {failed[0]} failed; no other node starts until `sro upgrade retry {failed[0]}`"
        if self.policy.paused:
            return "paused (spec.driver.upgradePolicy.paused); `sro upgrade resume` goes on"
        waiting = any(r is not None and r.state == UPGRADE_REQUIRED for r in records.values())
        if waiting and not self.policy.auto_upgrade:
            return "spec.driver.upgradePolicy.autoUpgrade is false: nodes keep their driver"
        return ""

    def _starts(self, facts: Sequence[NodeFacts], records: Mapping[str, Record | None]) -> set[str]:
        """The nodes that leave upgrade-required this pass, in name order, within the limits."""
        if not self.policy.auto_upgrade or self.policy.paused:
            return set()
        if any(r is not None and r.state == FAILED for r in records.values()):
            return set()
        in_progress = {n for n, r in records.items() if r is not None and r.state in IN_PROGRESS}
        unavailable = set(in_progress)
        for f in facts:
            if not f.validated or (f.node.unschedulable and f.node.name not in in_progress):
                unavailable.add(f.node.name)
        limit = max_unavailable(self.policy, len(facts))
        parallel = self.policy.max_parallel_upgrades or len(facts)
        starts: set[str] = set()
        # a node under remediation waits: its driver is never replaced while its devices are repaired
        repairing = {f.node.name for f in facts if remediating(f.node, self.ctx.sr)}
        for name in sorted(n for n, r in records.items() if r is not None and r.state == UPGRADE_REQUIRED):
            if len(in_progress) + len(starts) >= parallel:
                break
            if name in repairing:
                continue
            if name not in unavailable and len(unavailable) + 1 > limit:
                continue
            starts.add(name)
            unavailable.add(name)
        return starts

    # ---- one node's steps ---------------------------------------------------------------------
    def _step(self, f: NodeFacts, rec: Record | None, start: bool) -> NodeUpgrade:
        node = f.node
        labels: dict[str, str | None] = {}
        events: list[tuple[str, str, str]] = []
        evict: list[tuple[str, str]] = []
        creates: list[dict[str, Any]] = []
        deletes: list[str] = []
        unschedulable: bool | None = None
        if not node.labels.get(self.rev_key):
            labels[self.rev_key] = self.target
        if rec is not None and rec.state == UPGRADE_REQUIRED:
            if start:
                rec = rec.enter(CORDONED, self.stamp)
                if not node.unschedulable:
                    rec, unschedulable = replace(rec, cordoned=True), True
                events.append(
                    (
                        "Normal",
                        "UpgradeStarted",
                        f"driver {version_of(rec.from_rev)} → {version_of(rec.to_rev)}: node cordoned",
                    )
                )
            else:
                reason = (
                    self._blocked({node.name: rec})
                    or "waiting for its turn (maxParallelUpgrades, maxUnavailable)"
                )
                rec = replace(rec, reason=reason)
        # advance as far as the facts allow; each step is entered once
        for _ in range(len(UPGRADE_STATES)):
            if rec is None or rec.state not in IN_PROGRESS:
                break
            nxt = self._advance(f, rec, evict, creates, deletes, labels)
            if nxt.state == UNCORDONED and nxt.cordoned:
                unschedulable = False
            if nxt.state == FAILED:
                events.append(("Warning", "UpgradeFailed", nxt.reason))
            elif nxt.state != rec.state:
                words = f"driver {version_of(nxt.to_rev)}: {nxt.state}" + (
                    f" ({nxt.reason})" if nxt.reason else ""
                )
                events.append(("Normal", _event_reason(nxt.state), words))
            elif "holds" in nxt.reason and nxt.reason != rec.reason:
                events.append(("Warning", "UpgradeBlocked", nxt.reason))
            moved = nxt.state != rec.state
            rec = nxt
            if not moved:  # waiting: the next pass looks again
                break
        # a scan pod outside the eviction step is stale
        scan = f.scan
        stale = scan is not None and not scan.deleting and (rec is None or rec.state != PODS_EVICTED)
        if scan is not None and stale and scan.name not in deletes:
            deletes.append(scan.name)
        state_value = rec.state if rec is not None else None
        if node.labels.get(self.state_key) != state_value:
            labels[self.state_key] = state_value
        annotations: dict[str, str | None] = {}
        text = rec.to_json() if rec is not None else None
        if node.annotations.get(self.ann_key) != text:
            annotations[self.ann_key] = text
        return NodeUpgrade(
            rec,
            labels,
            annotations,
            unschedulable,
            tuple(evict),
            tuple(creates),
            tuple(deletes),
            tuple(events),
        )

    def _advance(
        self,
        f: NodeFacts,
        rec: Record,
        evict: list[tuple[str, str]],
        creates: list[dict[str, Any]],
        deletes: list[str],
        labels: dict[str, str | None],
    ) -> Record:
        """The record after one step, or `rec` itself when the node must wait."""
        pol = self.policy
        paused = pol.paused and rec.state in READS_PODS
        if rec.state in READS_PODS and f.workloads is None:
            return rec  # its pods are read from the next pass on
        if paused:
            return replace(rec, reason="paused before its evictions")
        pods = f.workloads or ()
        if rec.state == CORDONED:
            return rec.enter(WAITING_FOR_JOBS, self.stamp)
        if rec.state == WAITING_FOR_JOBS:
            selector = parse_selector(pol.wait_for_completion.pod_selector, "waitForCompletion.podSelector")
            jobs = [p for p in pods if selector and selector_matches(selector, p.labels) and not p.finished]
            timeout = pol.wait_for_completion.timeout_seconds
            if jobs and not (timeout and self._older(rec, WAITING_FOR_JOBS, timeout)):
                reason = f"waiting for {len(jobs)} pod(s) to complete: {_names(jobs)}"
                return replace(rec, reason=reason)
            return rec.enter(PODS_EVICTED, self.stamp)
        if rec.state == PODS_EVICTED:
            return self._evict(f, rec, pods, evict, creates, deletes, labels)
        if rec.state == DRIVER_REPLACED:
            if f.node.labels.get(self.rev_key) == rec.to_rev and f.driver_ready and f.validated:
                return rec.enter(VALIDATED, self.stamp)
            if self._older(rec, DRIVER_REPLACED, pol.timeout_seconds):
                labels[self.rev_key] = rec.from_rev  # back to the driver that worked
                return rec.enter(
                    FAILED,
                    self.stamp,
                    f"driver {version_of(rec.to_rev)} not validated within {pol.timeout_seconds}s "
                    f"({f.failing or 'not ready'}); node {f.node.name} put back on {version_of(rec.from_rev)} "
                    f"and left cordoned; fix spec.driver, then `sro upgrade retry {f.node.name}`",
                )
            reason = f"waiting for the new driver and validation ({f.failing or 'starting'})"
            return replace(rec, reason=reason)
        if rec.state == VALIDATED:
            return rec.enter(UNCORDONED, self.stamp)
        if rec.state == UNCORDONED:
            return rec.enter(DONE, self.stamp)
        return rec

    def _evict(
        self,
        f: NodeFacts,
        rec: Record,
        pods: Sequence[WorkloadPod],
        evict: list[tuple[str, str]],
        creates: list[dict[str, Any]],
        deletes: list[str],
        labels: dict[str, str | None],
    ) -> Record:
        pol = self.policy.drain
        selector = parse_selector(pol.pod_selector, "drain.podSelector")
        targets = [
            p
            for p in pods
            if not p.finished
            and not p.mirror
            and p.controller != "DaemonSet"
            and (
                self.ctx.recipe.resource in p.resources
                or (pol.enable and selector_matches(selector, p.labels))
            )
        ]
        refused: dict[str, str] = {}
        for p in targets:
            if not p.controller and not pol.force:
                refused[p.key] = "no controller would recreate it: set drain.force"
            elif p.empty_dir and not pol.delete_empty_dir:
                refused[p.key] = "it has an emptyDir volume: set drain.deleteEmptyDir"
        why = "; ".join(f"{k} ({v})" for k, v in refused.items())
        asked = list(rec.evicted)
        for p in targets:
            if p.deleting or p.key in refused:
                continue
            evict.append((p.namespace, p.name))
            if p.key not in asked:
                asked.append(p.key)
        rec = replace(rec, evicted=tuple(asked))
        if targets:
            if self._older(rec, PODS_EVICTED, pol.timeout_seconds):
                return rec.enter(
                    FAILED,
                    self.stamp,
                    f"pods not evicted within {pol.timeout_seconds}s: {_names(targets)}"
                    + (f"; refused: {why}" if refused else " (a PodDisruptionBudget may forbid it)")
                    + f"; node {f.node.name} left cordoned on {version_of(rec.from_rev)}; "
                    f"`sro upgrade retry {f.node.name}` tries again",
                )
            reason = f"evicting {len(targets)} pod(s): {_names(targets)}"
            if refused:
                reason += f"; refused: {why}"
            return replace(rec, reason=reason)
        # nothing of Kubernetes' uses the device: is a process outside it holding it?
        inputs = short_hash(f.node.name, rec.to_rev, rec.steps.get(PODS_EVICTED, ""), length=12)
        scan = f.scan
        if scan is None:
            creates.append(scan_pod(self.ctx, f.node.name, inputs))
            return replace(rec, reason="checking that no process holds the device")
        if scan.deleting:
            return rec
        if scan.annotations.get(INPUTS_ANNOTATION) != inputs:
            deletes.append(scan.name)
            return rec
        if scan.phase not in ("Succeeded", "Failed"):
            return rec
        # sro's own agents (the states' pods; DaemonSet pods in the operator's namespace, such as
        # discovery) go or restart once the driver's revision moves: they cannot be waited for
        ours = f.own | {
            p.uid for p in pods if p.namespace == self.ctx.namespace and p.controller == "DaemonSet"
        }
        free, words = read_scan(scan.message, ours) if scan.phase == "Failed" else (True, "")
        if free:
            deletes.append(scan.name)
            labels[self.rev_key] = rec.to_rev
            return replace(rec, stale=f.stale).enter(DRIVER_REPLACED, self.stamp, words)
        if scan.finished_at is None or self.now - scan.finished_at >= SCAN_RETRY:
            deletes.append(scan.name)  # look again
        return replace(rec, reason=words + "; the upgrade goes on once it exits")

    def _older(self, rec: Record, state: str, seconds: int) -> bool:
        since = rec.entered(state)
        return since is not None and self.now - since > timedelta(seconds=seconds)


def _event_reason(state: str) -> str:
    return "Upgrade" + "".join(part.capitalize() for part in state.split("-"))


def _names(pods: Sequence[WorkloadPod], limit: int = 3) -> str:
    names = ", ".join(p.key for p in pods[:limit])
    return names + (f" and {len(pods) - limit} more" if len(pods) > limit else "")
