"""A node's upgrade as kept in its annotation: the step names and the Record codec (JSON).

Why on the node: an operator restarted mid-upgrade reads the record and goes on — the step it is
in, when each step was entered, whether sro cordoned the node, the old and new revision and the
pods it asked to evict (so no eviction is asked for twice), and the operand pods that ran on the
old driver (restarted once the new one is validated).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sro.api.timestamps import parse_stamp
from sro.operator.unreadable import unreadable

UPGRADE_REQUIRED = "upgrade-required"
CORDONED = "cordoned"
WAITING_FOR_JOBS = "waiting-for-jobs"
PODS_EVICTED = "pods-evicted"
DRIVER_REPLACED = "driver-replaced"
VALIDATED = "validated"
UNCORDONED = "uncordoned"
DONE = "done"
FAILED = "failed"
UPGRADE_STATES = (
    UPGRADE_REQUIRED,
    CORDONED,
    WAITING_FOR_JOBS,
    PODS_EVICTED,
    DRIVER_REPLACED,
    VALIDATED,
    UNCORDONED,
    DONE,
    FAILED,
)
# A node in one of these is out of service for the upgrade (counts against the limits).
IN_PROGRESS = (CORDONED, WAITING_FOR_JOBS, PODS_EVICTED, DRIVER_REPLACED, VALIDATED, UNCORDONED)
# The steps whose pods the operator must read (it lists pods only on these nodes).
READS_PODS = (CORDONED, WAITING_FOR_JOBS, PODS_EVICTED)


def version_of(revision: str) -> str:
    """The version part of a revision label value (for messages)."""
    return revision.rsplit("-", 1)[0] if "-" in revision else revision


@dataclass(frozen=True)
class Record:
    """A node's upgrade, as kept in its annotation."""

    state: str
    from_rev: str
    to_rev: str
    steps: Mapping[str, str] = field(default_factory=dict)  # state -> when it was entered (RFC 3339)
    cordoned: bool = False  # the operator cordoned the node (so it uncordons it at the end)
    reason: str = ""
    evicted: tuple[str, ...] = ()  # namespace/name of the pods it asked to evict
    # uids of the operand pods that ran on the old driver and are restarted once the new one is
    # validated (`sro.operator.upgrade.rewalk`), taken when the driver label moves
    stale: tuple[str, ...] = ()

    def to_json(self) -> str:
        doc: dict[str, Any] = {
            "state": self.state,
            "from": self.from_rev,
            "to": self.to_rev,
            "steps": dict(self.steps),
            "cordoned": self.cordoned,
        }
        if self.reason:
            doc["reason"] = self.reason
        if self.evicted:
            doc["evicted"] = list(self.evicted)
        if self.stale:
            doc["stale"] = list(self.stale)
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    @staticmethod
    def from_json(text: str, where: str = "a node") -> Record | None:
        """None for an absent or unreadable annotation: the node then starts afresh.

        Anyone who may patch nodes can write it, so any failure (RecursionError for `[[[...`
        included) is garbage: logged once, handled as absent."""
        if not text:
            return None
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or doc.get("state") not in UPGRADE_STATES:
                unreadable("the upgrade record", where, text, "not an upgrade record")
                return None
            steps = doc.get("steps") or {}
            return Record(
                state=doc["state"],
                from_rev=str(doc.get("from", "")),
                to_rev=str(doc.get("to", "")),
                steps={str(k): str(v) for k, v in steps.items()} if isinstance(steps, dict) else {},
                cordoned=bool(doc.get("cordoned", False)),
                reason=str(doc.get("reason", "")),
                evicted=tuple(str(e) for e in doc.get("evicted") or ()),
                stale=tuple(str(u) for u in doc.get("stale") or ()),
            )
        except Exception as e:  # written by others: any failure is garbage
            unreadable("the upgrade record", where, text, e)
            return None

    def enter(self, state: str, when: str, reason: str = "") -> Record:
        return replace(self, state=state, steps={**self.steps, state: when}, reason=reason)

    def entered(self, state: str) -> datetime | None:
        return parse_stamp(self.steps.get(state))
