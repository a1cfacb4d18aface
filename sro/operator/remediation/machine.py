"""One pass of the remediation machine over a SpecialResource's nodes (pure).

Why a machine, as for driver upgrades: which faulty node starts (within the breaker and
maxConcurrentNodes, in name order), when it moves to its next step, what is evicted (and what
never), which device is reset, when a node is given up on — all is decided here from the nodes'
records and this pass's facts, so unit tests run it over simulated fleets. Its inputs are plain
records (the nodes, their pods, each node's fault reports, the devices' holders, reset and boot
facts); its outputs are what to do (a node patch: record, cordon or uncordon; evictions; device
resets; a reboot request; a revalidation; the GpuHealthy condition; events), so the wiring into the
reconcile is a thin translation, as `sro.operator.upgrade.adapter` is for upgrades.

Never both at once: a node mid-upgrade starts no remediation (it waits), and the upgrade machine
starts no upgrade on a node mid-remediation (`record.remediating`). A device reset and a reboot are
requests with a token (the step's start time): the node side acts once per token, so an operator
restarted mid-step asks again without the node resetting twice. A dry run writes nothing, so its
event says the same words each pass: the wiring's event recorder counts repeats, as Kubernetes' own
recorders do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sro.api.names import upgrade_annotation
from sro.api.specialresource import RemediationSpec
from sro.api.timestamps import stamp
from sro.devices.faultclasses import Fault
from sro.operator.observed import NodeInfo, WorkloadPod
from sro.operator.remediation.breaker import admit
from sro.operator.remediation.conditions import gpu_condition
from sro.operator.remediation.evictions import evictions, names, targets
from sro.operator.remediation.policy import (
    CORDONS,
    TIMEOUT_SECONDS,
    Choice,
    choose,
    event_reason,
    next_step,
    step_words,
    would,
)
from sro.operator.remediation.record import (
    ACTIVE,
    CORDONED,
    DONE,
    EVICTING,
    FAILED,
    HELD,
    LIMIT,
    REBOOTING,
    RESETTING,
    STATES,
    VALIDATING,
    WAITING,
    Record,
    read,
    remediation_annotation,
)
from sro.operator.upgrade.record import IN_PROGRESS as UPGRADING
from sro.operator.upgrade.record import Record as UpgradeRecord

Event = tuple[str, str, str]  # (type, reason, message)


@dataclass(frozen=True)
class NodeFacts:
    """What the machine reads about one of the SpecialResource's nodes."""

    node: NodeInfo
    faults: tuple[Fault, ...] = ()  # the node's active device faults (its health report)
    workloads: tuple[WorkloadPod, ...] | None = None  # None: not read this pass
    holders: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # device -> pods (ns/name)
    resets: Mapping[str, datetime] = field(default_factory=dict)  # device -> its last reset's end
    boot_id: str = ""  # status.nodeInfo.bootID: a reboot is over when it changes
    validated_at: datetime | None = None  # when the node's validations last passed; None: not passed
    condition: Mapping[str, Any] | None = None  # the node's GpuHealthy condition now
    # False: the node's report is a stopped device plugin's (its faults are not in `faults`): no
    # proof either way of its devices' health, so a revalidation waits for the running plugin's
    report_current: bool = True


@dataclass(frozen=True)
class NodeRemediation:
    """What the machine decided for one node in one pass."""

    record: Record | None
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    unschedulable: bool | None = None  # None: leave as is
    evict: tuple[tuple[str, str], ...] = ()
    reset: tuple[str, ...] = ()  # devices the node resets (once per `token`)
    reboot: bool = False  # the node is rebooted (once per `token`)
    revalidate: bool = False  # the node's validations run again (once per `token`)
    token: str = ""
    condition: Mapping[str, Any] | None = None  # the GpuHealthy condition to write; None: unchanged
    events: tuple[Event, ...] = ()

    def to_status(self) -> dict[str, Any] | None:
        """The node's `remediation` entry on its status row (while there is one to show)."""
        rec = self.record
        if rec is None or (rec.state == DONE and not rec.cordoned):
            return None
        out: dict[str, Any] = {
            "class": rec.fault_class,
            "devices": list(rec.devices),
            "action": rec.action,
            "step": rec.state,
            "since": rec.started,
            "attempts": len(rec.attempts),
        }
        if rec.reason:
            out["reason"] = rec.reason[:300]
        return out


@dataclass(frozen=True)
class RemediationPlan:
    nodes: Mapping[str, NodeRemediation]
    summary: Mapping[str, Any]
    busy: bool  # a node is mid-remediation: look again soon


def upgrade_in_progress(node: NodeInfo, sr: str) -> bool:
    """True while a driver upgrade of `sr` has the node out of service (remediation yields to it)."""
    rec = UpgradeRecord.from_json(node.annotations.get(upgrade_annotation(sr), ""), f"node {node.name}")
    return rec is not None and rec.state in UPGRADING


class Machine:
    """One pass of the remediation machine over the SpecialResource's nodes."""

    def __init__(self, spec: RemediationSpec, sr: str, resource: str, now: datetime) -> None:
        self.spec, self.sr, self.resource, self.now = spec, sr, resource, now
        self.stamp = stamp(now)
        self.key = remediation_annotation(sr)

    def run(self, facts: Sequence[NodeFacts]) -> RemediationPlan:
        records = {f.node.name: read(f.node, self.sr) for f in facts}
        choices = {f.node.name: choose(self.spec, f.faults) for f in facts}
        pending = {f.node.name: self._pending(records[f.node.name], choices[f.node.name]) for f in facts}
        active = {n for n, r in records.items() if r is not None and r.state in ACTIVE}
        unavailable = set(active)
        for f in facts:
            rec = records[f.node.name]
            held = rec is not None and rec.state in HELD and rec.cordoned
            if held or not f.node.ready or upgrade_in_progress(f.node, self.sr):
                unavailable.add(f.node.name)
        free = [
            f.node.name
            for f in facts
            if pending[f.node.name] and self._may_start(f, records[f.node.name]) == ""
        ]
        # a node past its limit is held cordoned whatever the breaker says: it is out of service
        unavailable |= {n for n in free if self._over_limit(records[n])}
        candidates = sorted(n for n in free if not self._over_limit(records[n]))
        verdict = admit(self.spec, len(facts), candidates, active, unavailable)
        out = {}
        for f in sorted(facts, key=lambda f: f.node.name):
            name = f.node.name
            blocked = self._may_start(f, records[name]) if pending[name] else ""
            why = verdict.waiting.get(name, "") or blocked
            start = name in verdict.starts
            out[name] = self._node(f, records[name], choices[name], pending[name], start, blocked, why)
        counts: dict[str, int] = {}
        for step in out.values():
            if step.record is not None:
                counts[step.record.state] = counts.get(step.record.state, 0) + 1
        summary: dict[str, Any] = {
            "nodes": counts,
            "breaker": {
                "limit": verdict.limit,
                "unavailable": verdict.unavailable,
                "tripped": verdict.tripped,
            },
            "paused": self.spec.paused,
            "dryRun": self.spec.dry_run,
        }
        busy = any(s.record is not None and s.record.state in (*ACTIVE, WAITING) for s in out.values())
        return RemediationPlan(out, summary, busy)

    # ---- before the steps: which nodes have a new fault to repair -------------------------------
    @staticmethod
    def _pending(rec: Record | None, choice: Choice | None) -> bool:
        """The node has a fault to repair that no remediation has taken on yet."""
        if choice is None or (rec is not None and rec.state in (*ACTIVE, *HELD)):
            return False
        # a finished remediation whose fault is still reported (restart-workload leaves the device
        # unhealthy) is not a new fault: only one seen after a clearing (or another one) is
        return not (rec is not None and rec.state == DONE and (rec.devices, rec.xids) == _print(choice))

    def _may_start(self, f: NodeFacts, rec: Record | None) -> str:
        """Why a node with a new fault may not start now ("" if it may, breaker permitting)."""
        if self.spec.dry_run:
            return "dry run"
        if self.spec.paused:
            return "paused (spec.remediation.paused); `sro remediation resume` goes on"
        if upgrade_in_progress(f.node, self.sr):
            return "a driver upgrade is in progress on the node"
        return ""

    def _over_limit(self, rec: Record | None) -> bool:
        return self._attempts(rec) >= self.spec.max_attempts

    def _attempts(self, rec: Record | None) -> int:
        return len(rec.attempts_within(self.now, self.spec.window_seconds)) if rec is not None else 0

    # ---- one node -------------------------------------------------------------------------------
    def _node(
        self,
        f: NodeFacts,
        rec: Record | None,
        choice: Choice | None,
        pending: bool,
        start: bool,
        blocked: str,
        why: str,
    ) -> NodeRemediation:
        node = f.node
        events: list[Event] = []
        act = _Acts()
        if pending and choice is not None:
            rec = self._begin(f, rec, choice, start, blocked, why, events, act)
        elif not f.report_current:
            pass  # a stopped plugin's report: no fault is known to have cleared either
        elif choice is None and rec is not None and rec.state == WAITING:
            events.append(("Normal", "RemediationCancelled", "the fault cleared before the node started"))
            rec = replace(
                rec.enter(DONE, self.stamp, "the fault cleared before it started"), devices=(), xids=()
            )
        elif choice is None and rec is not None and rec.state == DONE and rec.devices:
            rec = replace(rec, devices=(), xids=())  # cleared: the same fault seen again is a new one
        for _ in range(len(STATES)):
            if rec is None or rec.state not in ACTIVE:
                break
            nxt = self._advance(f, rec, act)
            if nxt.state == FAILED:
                events.append(("Warning", "RemediationFailed", nxt.reason))
            elif nxt.state != rec.state:
                events.append(("Normal", event_reason(nxt.state), step_words(nxt)))
            moved = nxt.state != rec.state
            rec = nxt
            if not moved:
                break
        if rec is not None and rec.state == DONE and rec.cordoned:
            if node.unschedulable:
                act.unschedulable = False  # what sro cordoned it uncordons (an admin's cordon: never)
            rec = replace(rec, cordoned=False)
        if rec is not None:
            attempts = rec.attempts_within(self.now, self.spec.window_seconds)
            if attempts != rec.attempts:
                rec = replace(rec, attempts=attempts)
            if rec.state == DONE and not rec.attempts and not rec.devices:
                rec = None  # nothing left to remember
        text = rec.to_json() if rec is not None else None
        annotations = {self.key: text} if node.annotations.get(self.key) != text else {}
        return NodeRemediation(
            record=rec,
            annotations=annotations,
            unschedulable=act.unschedulable,
            evict=tuple(act.evict),
            reset=act.reset,
            reboot=act.reboot,
            revalidate=act.revalidate,
            token=act.token,
            # a stopped plugin's report says nothing new: the condition keeps what it said
            condition=gpu_condition(f.faults, f.condition, self.now) if f.report_current else None,
            events=tuple(events),
        )

    def _begin(
        self,
        f: NodeFacts,
        rec: Record | None,
        choice: Choice,
        start: bool,
        blocked: str,
        why: str,
        events: list[Event],
        act: _Acts,
    ) -> Record | None:
        """A node with a new fault: held past its limit, started, or left waiting (with why)."""
        what = f"{choice.fault_class} on device(s) {', '.join(choice.devices)}" + (
            f" (Xid {', '.join(map(str, choice.xids))})" if choice.xids else ""
        )
        if self.spec.dry_run:
            pods = targets(choice.action, f.workloads or (), choice.devices, f.holders, self.resource)
            keys = [p.key for p in pods] or sorted({k for d in choice.devices for k in f.holders.get(d, ())})
            events.append(
                (
                    "Normal",
                    "RemediationDryRun",
                    f"dry run: {what}: would {would(choice.action, choice.devices, keys)}",
                )
            )
            return rec
        attempts = self._attempts(rec)
        base = Record(
            WAITING,
            choice.fault_class,
            choice.action,
            choice.devices,
            choice.xids,
            attempts=rec.attempts_within(self.now, self.spec.window_seconds) if rec is not None else (),
            cordoned=rec.cordoned if rec is not None else False,
            started=self.stamp,
            updated=self.stamp,
        )
        if not blocked and attempts >= self.spec.max_attempts:
            held = base.enter(
                LIMIT,
                self.stamp,
                f"{what}: {attempts} remediation(s) within {self.spec.window_seconds}s, the most "
                f"spec.remediation.maxAttempts allows; node {f.node.name} left cordoned for a person: "
                f"`sro remediation retry {f.node.name}`",
            )
            if not f.node.unschedulable:
                held, act.unschedulable = replace(held, cordoned=True), True
            events.append(("Warning", "RemediationLimit", held.reason))
            return held
        if not start:
            if rec is not None and rec.state == WAITING and rec.devices == choice.devices:
                return replace(rec, reason=why, xids=choice.xids)
            events.append(("Normal", "RemediationWaiting", f"{what}: {why}"))
            return replace(base.enter(WAITING, self.stamp, why))
        first = next_step(choice.action, WAITING)
        begun = replace(base, attempts=(*base.attempts, self.stamp), evicted=())
        begun = begun.enter(first, self.stamp)
        if choice.action in CORDONS and not f.node.unschedulable:
            begun, act.unschedulable = replace(begun, cordoned=True), True
        events.append(
            (
                "Normal",
                "RemediationStarted",
                f"{what}: {choice.action}, attempt {len(begun.attempts)} of {self.spec.max_attempts} "
                f"within {self.spec.window_seconds}s"
                + ("; node cordoned" if choice.action in CORDONS else ""),
            )
        )
        return begun

    def _advance(self, f: NodeFacts, rec: Record, act: _Acts) -> Record:
        """The record after one step, or `rec` itself when the node must wait."""
        state = rec.state
        timeout = TIMEOUT_SECONDS.get(state)
        late = timeout is not None and self._older(rec, state, timeout)
        if state == CORDONED:
            return rec.enter(next_step(rec.action, state), self.stamp)
        if state == EVICTING:
            if f.workloads is None:
                return rec  # its pods are read from the next pass on
            pods = targets(rec.action, f.workloads, rec.devices, f.holders, self.resource)
            ev = evictions(pods, rec.evicted)
            act.evict.extend(ev.ask)
            rec = replace(rec, evicted=ev.asked)
            if not ev.left:
                return rec.enter(next_step(rec.action, state), self.stamp)
            if late:
                return self._fail(
                    f,
                    rec,
                    f"pods not evicted within {timeout}s: {names(ev.left)} "
                    "(a PodDisruptionBudget may forbid it)",
                )
            return replace(rec, reason=f"evicting {len(ev.left)} pod(s): {names(ev.left)}")
        if state == RESETTING:
            since = rec.entered(RESETTING)
            done = since is not None and all(
                (t := f.resets.get(d)) is not None and t >= since for d in rec.devices
            )
            if done:
                return rec.enter(next_step(rec.action, state), self.stamp)
            if late:
                return self._fail(f, rec, f"device(s) {', '.join(rec.devices)} not reset within {timeout}s")
            act.reset, act.token = rec.devices, rec.steps.get(RESETTING, "")
            return replace(rec, reason=f"resetting device(s) {', '.join(rec.devices)}")
        if state == REBOOTING:
            if not rec.boot_id:
                rec = replace(rec, boot_id=f.boot_id or "unknown")
            if f.boot_id and f.boot_id != rec.boot_id:
                return rec.enter(next_step(rec.action, state), self.stamp)
            if late:
                return self._fail(f, rec, f"node not rebooted within {timeout}s")
            act.reboot, act.token = True, rec.steps.get(REBOOTING, "")
            return replace(rec, reason="rebooting the node")
        if state == VALIDATING:
            since = rec.entered(VALIDATING)
            faulty = sorted({x.device for x in f.faults} & set(rec.devices))
            fresh = since is not None and f.validated_at is not None and f.validated_at >= since
            if fresh and not faulty and f.report_current:
                return rec.enter(DONE, self.stamp)
            if late:
                still = f"device(s) {', '.join(faulty)} still faulty" if faulty else "validations not passed"
                return self._fail(f, rec, f"node not revalidated within {timeout}s ({still})")
            act.revalidate, act.token = True, rec.steps.get(VALIDATING, "")
            return replace(
                rec,
                reason="waiting for the node's validations"
                + (f" (device(s) {', '.join(faulty)} still faulty)" if faulty else "")
                + ("" if f.report_current else " (waiting for the running device plugin's health report)"),
            )
        return rec

    def _fail(self, f: NodeFacts, rec: Record, what: str) -> Record:
        return rec.enter(
            FAILED,
            self.stamp,
            f"{rec.action} of {rec.fault_class} on node {f.node.name}: {what}; node left cordoned; "
            f"`sro remediation retry {f.node.name}` tries again",
        )

    def _older(self, rec: Record, state: str, seconds: int) -> bool:
        since = rec.entered(state)
        return since is not None and self.now - since > timedelta(seconds=seconds)


@dataclass
class _Acts:
    """What one node's pass asks the wiring to do (collected while its steps advance)."""

    unschedulable: bool | None = None
    evict: list[tuple[str, str]] = field(default_factory=list)
    reset: tuple[str, ...] = ()
    reboot: bool = False
    revalidate: bool = False
    token: str = ""


def _print(choice: Choice) -> tuple[tuple[str, ...], tuple[int, ...]]:
    return choice.devices, choice.xids


def release(node: NodeInfo, sr: str) -> NodeRemediation:
    """SpecialResource `sr`'s remediation taken off a node (it left the selection, the SpecialResource
    is deleted): its record removed, the node uncordoned if sro cordoned it — and only then."""
    key = remediation_annotation(sr)
    rec = read(node, sr)
    ours = rec is not None and rec.cordoned and node.unschedulable
    return NodeRemediation(
        record=None,
        annotations={key: None} if key in node.annotations else {},
        unschedulable=False if ours else None,
    )
