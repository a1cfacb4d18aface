"""The circuit breaker: how many of a SpecialResource's nodes may be out of service at once (pure).

Why a breaker: a bad day (a driver bug, a cooling failure, a bad firmware push) faults many nodes
at once, and a repair that cordons every faulty node empties the cluster faster than the faults do.
So at most `maxUnavailable` of the SpecialResource's nodes are out of service at once — under
remediation, held cordoned by sro (a node past its limit or failed, a driver upgrade's node) or not
Ready — and at most `maxConcurrentNodes` are under remediation; every other faulty node waits,
reported `waiting` with the reason, and starts when one comes back. NVIDIA's NVSentinel stops at
half the cluster; the default here is the upgrade's 25 %, rounded up so one node can always be
repaired. An admin's own cordon is the admin's maintenance and does not count: it must not stop
repairs elsewhere.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from sro.api.specialresource import RemediationSpec
from sro.operator.remediation.policy import max_unavailable

BREAKER_REASON = "waiting for the circuit breaker (spec.remediation.maxUnavailable: {limit} of {nodes} nodes)"
CONCURRENCY_REASON = "waiting for its turn (spec.remediation.maxConcurrentNodes: {most})"


@dataclass(frozen=True)
class Verdict:
    """Which waiting nodes start this pass, and why each of the others waits."""

    starts: frozenset[str]
    waiting: Mapping[str, str] = field(default_factory=dict)  # node -> why it waits
    limit: int = 1  # the breaker's share of the nodes
    unavailable: int = 0  # nodes out of service once the starts are counted
    tripped: bool = False  # a node waits for the breaker (not merely for its turn)


def admit(
    spec: RemediationSpec,
    nodes: int,
    candidates: Sequence[str],
    active: Collection[str],
    unavailable: Collection[str],
) -> Verdict:
    """Start `candidates` (in the order given) while both limits allow.

    `active`: the nodes under remediation now; `unavailable`: every node out of service now (the
    active ones included). A candidate already out of service (not Ready) costs the breaker nothing."""
    limit = max_unavailable(spec, nodes)
    out = set(unavailable) | set(active)
    running = len(set(active))
    starts: set[str] = set()
    waiting: dict[str, str] = {}
    tripped = False
    for name in candidates:
        if running + len(starts) >= spec.max_concurrent_nodes:
            waiting[name] = CONCURRENCY_REASON.format(most=spec.max_concurrent_nodes)
            continue
        if name not in out and len(out) + 1 > limit:
            waiting[name] = BREAKER_REASON.format(limit=limit, nodes=nodes)
            tripped = True
            continue
        starts.add(name)
        out.add(name)
    return Verdict(frozenset(starts), waiting, limit, len(out), tripped)
