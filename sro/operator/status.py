"""The SpecialResource's status: conditions, counts and the per-node table.

Why rows of two sizes: at 1,000 nodes the object must stay small, and what an admin needs is the
nodes that are *not* validated — the state they reached, the one failing, why (the pod's reason
and at most 1 KiB of its log) and since when. A validated node gets a short row (name, since).
Conditions keep their lastTransitionTime while their status does not change, as Kubernetes
conditions do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sro.api.timestamps import stamp
from sro.operator.observed import SpecialResourceInfo

LOG_LIMIT = 1024
NOTE_LIMIT = 600  # characters of a row's note: two validations' skipped checks
# The row state of a selected node that an older SpecialResource holds for the same resource
REFUSED = "refused"


@dataclass(frozen=True)
class NodeRow:
    name: str
    ready_states: tuple[str, ...] = ()
    validated: bool = False
    failing: str = ""
    reason: str = ""
    message: str = ""
    log: str = ""
    failed: bool = False  # a failure rather than progress
    note: str = ""  # what a ready state said, e.g. the checks a passed validation skipped
    since: str = ""
    reached: Mapping[str, str] = field(default_factory=dict)
    upgrade: Mapping[str, Any] | None = None  # a driver upgrade under way on the node
    remediation: Mapping[str, Any] | None = None  # a remediation under way (or held) on the node
    refused: bool = False  # held by an older SpecialResource (reason/message say which)

    def to_status(self) -> dict[str, Any]:
        if self.refused:
            refused: dict[str, Any] = without_empty(
                {"name": self.name, "state": REFUSED, "reason": self.reason, "message": self.message[:300]}
            )
            return refused
        if self.validated:
            short: dict[str, Any] = {"name": self.name, "state": "validated", "since": self.since}
            if self.note:
                short["note"] = self.note[:NOTE_LIMIT]
            if self.upgrade:
                short["upgrade"] = dict(self.upgrade)
            if self.remediation:
                short["remediation"] = dict(self.remediation)
            return short
        out: dict[str, Any] = {
            "name": self.name,
            "state": self.ready_states[-1] if self.ready_states else "",
            "failing": self.failing,
            "reason": self.reason,
            "message": self.message[:300],
            "note": self.note[:NOTE_LIMIT],
            "since": self.since,
        }
        if self.log:
            out["log"] = tail_bytes(self.log, LOG_LIMIT)
        if self.upgrade:
            out["upgrade"] = dict(self.upgrade)
        if self.remediation:
            out["remediation"] = dict(self.remediation)
        row: dict[str, Any] = without_empty(out)
        return row


def without_empty(value: Any) -> Any:
    """`value` with every empty string left out (keys in objects, items in lists), at every depth.

    Why: Kubernetes 1.20's OpenAPI validator, built with Go >= 1.16, takes any zero value for null
    (kubernetes#99804, fixed in 1.21 by kube-openapi#230) and refuses "" where the schema says
    string, so a status carrying one is never written there. A status never depends on how an API
    server treats "": an absent key reads as empty (`.get(key, "")`) everywhere the status is read."""
    if isinstance(value, Mapping):
        return {k: without_empty(v) for k, v in value.items() if v != ""}
    if isinstance(value, list | tuple):
        return [without_empty(v) for v in value if v != ""]
    return value


def tail_bytes(text: str, limit: int) -> str:
    data = text.encode()[-limit:]
    return data.decode(errors="ignore")


def _condition(
    previous: Sequence[Mapping[str, Any]], ctype: str, ok: bool, reason: str, message: str, now: datetime
) -> dict[str, Any]:
    status = "True" if ok else "False"
    prev = next((c for c in previous if c.get("type") == ctype), None)
    since = prev.get("lastTransitionTime") if prev and prev.get("status") == status else None
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or stamp(now),
    }


def _summary(rows: Sequence[NodeRow], limit: int = 3) -> str:
    parts = [f"{r.name} at {r.failing} ({r.reason}: {r.message[:120]})" for r in rows[:limit]]
    more = f" and {len(rows) - limit} more" if len(rows) > limit else ""
    return "; ".join(parts) + more


def _refused(rows: Sequence[NodeRow], limit: int = 3) -> str:
    more = f" and {len(rows) - limit} more" if len(rows) > limit else ""
    return ", ".join(f"{r.name} ({r.reason})" for r in rows[:limit]) + more


PATCH_REFUSED = "NodePatchRefused"


def _patch_refused(row: NodeRow, why: str) -> NodeRow:
    """The row of a node whose patch (labels, taints, cordon) the API server refused for good — an
    admission webhook, RBAC, validation: failing, never validated (its labels, which workloads
    select on, are not what the states say), with the API server's words."""
    return replace(
        row,
        validated=False,
        failed=True,
        failing="node patch",
        reason=PATCH_REFUSED,
        message=f"{why}; the operator tries again every pass",
    )


def _degraded(failed: Sequence[NodeRow]) -> tuple[bool, str, str]:
    """Degraded's (status, reason, message): NodePatchRefused when every failing node is one whose
    patch was refused, NodesFailing otherwise."""
    if not failed:
        return False, "AsExpected", "no node is failing"
    reason = PATCH_REFUSED if all(r.reason == PATCH_REFUSED for r in failed) else "NodesFailing"
    return True, reason, f"{len(failed)} node(s) failing: {_summary(failed)}"


def build_status(
    sr: SpecialResourceInfo,
    rows: Sequence[NodeRow],
    states: Mapping[str, str],
    counts: Mapping[str, int],
    resource: str,
    now: datetime,
    problem: tuple[str, str] | None = None,
    patches_refused: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The whole status object; `problem` (reason, message) means nothing could be deployed;
    `patches_refused` (node -> the API server's words) are nodes whose patch it refused for good.

    Refused rows (nodes an older SpecialResource holds) are listed but not counted: the
    SpecialResource is Ready for its own nodes, and Degraded (their reason) only when every node it
    selects is refused."""
    previous = sr.status.get("conditions") or []
    refused = [r for r in rows if r.refused]
    rows = [r for r in rows if not r.refused]
    if patches_refused:
        rows = [_patch_refused(r, patches_refused[r.name]) if r.name in patches_refused else r for r in rows]
    if refused and not rows and problem is None:
        holders = sorted({r.message for r in refused})
        problem = (refused[0].reason, f"every selected node is refused: {'; '.join(holders)[:300]}")
    validated = sum(1 for r in rows if r.validated)
    failed = [r for r in rows if r.failed]
    waiting = [r for r in rows if not r.validated and not r.failed]
    if problem is not None:
        reason, message = problem
        conditions = [
            _condition(previous, "Ready", False, reason, message, now),
            _condition(
                previous, "Progressing", False, reason, "nothing is deployed until the spec is fixed", now
            ),
            _condition(previous, "Degraded", True, reason, message, now),
        ]
    else:
        ready = bool(rows) and validated == len(rows)
        if ready:
            ready_c = ("AllNodesValidated", f"{validated} of {len(rows)} nodes validated")
        elif not rows:
            ready_c = ("NoMatchingNodes", "no node matches the node selector")
        else:
            ready_c = ("NodesNotValidated", f"{validated} of {len(rows)} nodes validated")
        if refused:
            ready_c = (ready_c[0], f"{ready_c[1]}; {len(refused)} node(s) refused: {_refused(refused)}")
        conditions = [
            _condition(previous, "Ready", ready, *ready_c, now),
            _condition(
                previous,
                "Progressing",
                bool(waiting),
                "NodesProgressing" if waiting else "Stable",
                _summary(waiting) if waiting else "every node is validated or failed",
                now,
            ),
            _condition(previous, "Degraded", *_degraded(failed), now),
        ]
    status: dict[str, Any] = without_empty(
        {
            "ready": conditions[0]["status"],
            "resource": resource,
            "observedGeneration": sr.generation,
            "nodeCount": len(rows),
            "validatedCount": validated,
            "stateCounts": dict(counts),
            "states": dict(states),
            "conditions": conditions,
            "nodes": [r.to_status() for r in sorted(rows, key=lambda r: (r.validated, r.name))]
            + [r.to_status() for r in sorted(refused, key=lambda r: r.name)],
        }
    )
    return status
