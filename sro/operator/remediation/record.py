"""A node's remediation as kept in its annotation: the step names and the Record codec (JSON).

Why on the node, as the upgrade's record is: an operator restarted mid-remediation reads it and goes
on from the step it was in — whether sro cordoned the node (so it uncordons it, and only then), the
pods it asked to evict (so none is asked for twice), the devices it asked to reset, the boot it
asked to leave — and the attempts within the window survive the fault clearing, so a node that
flaps (fault, clear, fault) counts each one and stops at the limit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Final

from sro.api.names import PREFIX
from sro.api.timestamps import parse_stamp
from sro.operator.observed import NodeInfo
from sro.operator.unreadable import unreadable

WAITING: Final = "waiting"  # a fault to repair; the breaker, a pause or an upgrade holds it back
CORDONED: Final = "cordoned"
EVICTING: Final = "evicting"
RESETTING: Final = "resetting"
REBOOTING: Final = "rebooting"
VALIDATING: Final = "validating"
DONE: Final = "done"  # finished (or nothing left to do); kept while it has attempts in the window
LIMIT: Final = "limit"  # past maxAttempts in the window: left cordoned for a person
FAILED: Final = "failed"  # a step did not finish in time: left cordoned for a person
STATES: Final = (WAITING, CORDONED, EVICTING, RESETTING, REBOOTING, VALIDATING, DONE, LIMIT, FAILED)
# Under way: counts against maxConcurrentNodes; an upgrade does not start on such a node.
ACTIVE: Final = (CORDONED, EVICTING, RESETTING, REBOOTING, VALIDATING)
HELD: Final = (LIMIT, FAILED)  # sro keeps the node cordoned until `sro remediation retry`
# The steps whose pods the operator must read (it lists pods only on these nodes).
READS_PODS: Final = (EVICTING,)


def remediation_annotation(sr: str) -> str:
    """Node annotation with the node's remediation record for SpecialResource `sr` (JSON)."""
    return f"{PREFIX}{sr}.remediation"


@dataclass(frozen=True)
class Record:
    """A node's remediation, as kept in its annotation."""

    state: str
    fault_class: str = ""
    action: str = ""
    devices: tuple[str, ...] = ()
    xids: tuple[int, ...] = ()
    steps: Mapping[str, str] = field(default_factory=dict)  # state -> when it was entered (RFC 3339)
    attempts: tuple[str, ...] = ()  # when each remediation within the window started
    cordoned: bool = False  # sro cordoned the node (so it uncordons it at the end)
    evicted: tuple[str, ...] = ()  # namespace/name of the pods it asked to evict
    boot_id: str = ""  # reboot: the boot the node was in when the reboot was asked for
    started: str = ""  # when this remediation (or its wait) began
    updated: str = ""  # the last change
    reason: str = ""

    def to_json(self) -> str:
        doc: dict[str, Any] = {
            "state": self.state,
            "class": self.fault_class,
            "action": self.action,
            "devices": list(self.devices),
            "xids": list(self.xids),
            "steps": dict(self.steps),
            "attempts": list(self.attempts),
            "cordoned": self.cordoned,
            "started": self.started,
            "updated": self.updated,
        }
        for key, value in (
            ("evicted", list(self.evicted)),
            ("bootID", self.boot_id),
            ("reason", self.reason),
        ):
            if value:
                doc[key] = value
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    @staticmethod
    def from_json(text: str, where: str = "a node") -> Record | None:
        """None for an absent or unreadable annotation (anyone who may patch nodes writes it: any
        failure is garbage, logged once, handled as absent)."""
        if not text:
            return None
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or doc.get("state") not in STATES:
                unreadable("the remediation record", where, text, "not a remediation record")
                return None
            steps = doc.get("steps") or {}
            return Record(
                state=doc["state"],
                fault_class=str(doc.get("class", "")),
                action=str(doc.get("action", "")),
                devices=tuple(str(d) for d in doc.get("devices") or ()),
                xids=tuple(int(x) for x in doc.get("xids") or ()),
                steps={str(k): str(v) for k, v in steps.items()} if isinstance(steps, dict) else {},
                attempts=tuple(str(a) for a in doc.get("attempts") or ()),
                cordoned=bool(doc.get("cordoned", False)),
                evicted=tuple(str(e) for e in doc.get("evicted") or ()),
                boot_id=str(doc.get("bootID", "")),
                started=str(doc.get("started", "")),
                updated=str(doc.get("updated", "")),
                reason=str(doc.get("reason", "")),
            )
        except Exception as e:  # written by others: any failure is garbage
            unreadable("the remediation record", where, text, e)
            return None

    def enter(self, state: str, when: str, reason: str = "") -> Record:
        return replace(self, state=state, steps={**self.steps, state: when}, updated=when, reason=reason)

    def entered(self, state: str) -> datetime | None:
        return parse_stamp(self.steps.get(state))

    def attempts_within(self, now: datetime, window_seconds: int) -> tuple[str, ...]:
        """The attempts that started within the window ending `now` (an unreadable one counts:
        a garbled stamp must not buy a node more attempts)."""
        since = now - timedelta(seconds=window_seconds)
        kept = []
        for a in self.attempts:
            t = parse_stamp(a)
            if t is None or t > since:
                kept.append(a)
        return tuple(kept)

    def retried(self, when: str) -> Record:
        """The record `sro remediation retry NODE` writes: its attempts forgotten, done — the machine
        then uncordons the node if sro cordoned it, and a fault still there starts afresh."""
        return replace(self.enter(DONE, when, "retried by a person"), attempts=(), devices=(), xids=())


def read(node: NodeInfo, sr: str) -> Record | None:
    """SpecialResource `sr`'s remediation record on `node`, None when it has none (or garbage)."""
    return Record.from_json(node.annotations.get(remediation_annotation(sr), ""), f"node {node.name}")


def remediating(node: NodeInfo, sr: str) -> bool:
    """True while a remediation is under way on the node. The upgrade machine's predicate: a node
    under remediation starts no driver upgrade (its driver is never replaced while its devices are
    being reset), as the remediation machine starts nothing on a node mid-upgrade."""
    rec = read(node, sr)
    return rec is not None and rec.state in ACTIVE
