"""The remediation machine's metrics, in the operator's registry (`sro.operator.metrics.REGISTRY`).

Why these three: an admin alerting on self-healing wants to know how many nodes are in each step
now (a node held at `limit` or `failed` waits for a person), whether the circuit breaker is holding
repairs back (a bad day faulting many nodes at once), and how remediations end by fault class and
action (a class that keeps failing its reset asks for a stronger action, or for the vendor).

A remediation is counted once, when its record reaches done, failed or limit: the pass that enters
that state carries the matching event (`policy.event_reason`). A pass whose writes failed is
computed again from the same record, so its event comes again; the remediation's start stamp (the
record's `started`, written when it began) tells the repeat from a new remediation on the node.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge

from sro.operator.metrics import REGISTRY
from sro.operator.remediation.machine import RemediationPlan
from sro.operator.remediation.policy import event_reason
from sro.operator.remediation.record import DONE, FAILED, LIMIT, STATES

# event reason -> the `result` label of a finished remediation
RESULTS: Final = {event_reason(DONE): "succeeded", "RemediationFailed": "failed", "RemediationLimit": "limit"}
assert event_reason(FAILED) == "RemediationFailed" and event_reason(LIMIT) == "RemediationLimit"

NODES = Gauge(
    "sro_operator_remediation_nodes",
    "Nodes per remediation state (waiting, cordoned, evicting, resetting, rebooting, validating, "
    "done, limit, failed); limit or failed > 0: a node left cordoned for a person.",
    ["specialresource", "state"],
    registry=REGISTRY,
)
BREAKER_TRIPPED = Gauge(
    "sro_operator_remediation_breaker_tripped",
    "1 while a faulty node waits because spec.remediation.maxUnavailable of the nodes are out of service.",
    ["specialresource"],
    registry=REGISTRY,
)
REMEDIATIONS = Counter(
    "sro_operator_remediations",
    "Remediations that ended, by fault class, action and result (succeeded, failed, limit).",
    ["specialresource", "class", "action", "result"],
    registry=REGISTRY,
)

_counted: dict[tuple[str, str], tuple[str, str]] = {}  # (sr, node) -> (started, result) last counted
_ended: set[tuple[str, str, str, str]] = set()  # the counter's series, to remove with the SR
_known: set[str] = set()


def observe(sr: str, plan: RemediationPlan) -> None:
    """Update the gauges from one pass's plan and count the remediations it finished."""
    counts = plan.summary.get("nodes") or {}
    for state in STATES:
        NODES.labels(sr, state).set(int(counts.get(state, 0)))
    breaker = plan.summary.get("breaker") or {}
    BREAKER_TRIPPED.labels(sr).set(1 if breaker.get("tripped") else 0)
    _known.add(sr)
    for node, step in plan.nodes.items():
        for _, reason, _ in step.events:
            result = RESULTS.get(reason)
            if result is None:
                continue
            rec = step.record
            started = rec.started if rec is not None else ""
            key = (sr, node)
            if started and _counted.get(key) == (started, result):
                continue  # the same ending seen again (its pass's writes failed and it ran again)
            _counted[key] = (started, result)
            labels = (
                sr,
                (rec.fault_class if rec is not None else "") or "unknown",
                (rec.action if rec is not None else "") or "unknown",
                result,
            )
            REMEDIATIONS.labels(*labels).inc()
            _ended.add(labels)


def forget(sr: str) -> None:
    """A deleted SpecialResource (or one whose spec.remediation was removed) leaves no series."""
    if sr in _known:
        for state in STATES:
            NODES.remove(sr, state)
        BREAKER_TRIPPED.remove(sr)
        _known.discard(sr)
    for labels in [k for k in _ended if k[0] == sr]:
        REMEDIATIONS.remove(*labels)
        _ended.discard(labels)
    for key in [k for k in _counted if k[0] == sr]:
        del _counted[key]
