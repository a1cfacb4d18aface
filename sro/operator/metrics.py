"""The operator's own Prometheus metrics (port 8080, /metrics).

Why these: an admin alerting on the operator wants to know that it reconciles (and how often it
fails), how many nodes sit in each state per SpecialResource, and how long a new node takes from
matching to validated — the figure that says whether GPU nodes join the cluster fast enough.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from sro.api.timestamps import parse_stamp
from sro.operator.reached import SELECTED
from sro.operator.status import NodeRow

REGISTRY = CollectorRegistry()
RECONCILIATIONS = Counter(
    "sro_operator_reconciliations",
    "Reconcile passes per SpecialResource.",
    ["specialresource"],
    registry=REGISTRY,
)
ERRORS = Counter(
    "sro_operator_reconcile_errors",
    "Reconcile passes that raised or had steps fail (retried).",
    ["specialresource"],
    registry=REGISTRY,
)
NODES = Gauge(
    "sro_operator_nodes",
    "Nodes per state: a state counts a node when it is ready there; `selected` and `validated` too.",
    ["specialresource", "state"],
    registry=REGISTRY,
)
VALIDATION_SECONDS = Histogram(
    "sro_operator_node_validation_seconds",
    "Time from a node matching a SpecialResource to the node being validated.",
    ["specialresource"],
    buckets=(5, 10, 20, 30, 60, 120, 300, 600, 1800),
    registry=REGISTRY,
)
PASS_SECONDS = Histogram(
    "sro_operator_pass_seconds",
    "Wall time of one reconcile pass (observe, reconcile, carry out the plan).",
    ["specialresource"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
    registry=REGISTRY,
)
UPGRADES = Gauge(
    "sro_operator_driver_upgrade_nodes",
    "Nodes per driver-upgrade state (upgrade-required ... done, failed); alert on failed > 0.",
    ["specialresource", "state"],
    registry=REGISTRY,
)
API_REQUESTS = Counter(
    "sro_operator_api_requests",
    "Requests this process sent to the API server, by verb (GET, LIST, WATCH, POST, PATCH, DELETE) "
    "and resource; kopf's own watch of SpecialResources and NodeFeatureRules is not counted.",
    ["verb", "resource"],
    registry=REGISTRY,
)
LEADER = Gauge("sro_operator_leader", "1 while this replica holds the leader lease.", registry=REGISTRY)

_seen_validated: set[tuple[str, str]] = set()
_node_series: set[tuple[str, str]] = set()
_upgrade_series: set[tuple[str, str]] = set()


def record(sr: str, rows: Sequence[NodeRow], states: Sequence[str]) -> None:
    """Update the gauges from one pass's rows; observe each node's time to validate once."""
    counts = {"selected": len(rows), "validated": sum(r.validated for r in rows)}
    counts.update({s: sum(s in r.ready_states for r in rows) for s in states})
    for state, n in counts.items():
        NODES.labels(sr, state).set(n)
        _node_series.add((sr, state))
    for row in rows:
        key = (sr, row.name)
        if not row.validated:
            _seen_validated.discard(key)
            continue
        if key in _seen_validated:
            continue
        _seen_validated.add(key)
        start, end = parse_stamp(row.reached.get(SELECTED)), parse_stamp(row.reached.get("validated"))
        if start and end:
            VALIDATION_SECONDS.labels(sr).observe(max((end - start).total_seconds(), 0.0))


def record_upgrades(sr: str, counts: Mapping[str, int]) -> None:
    """The rollout's nodes per upgrade state; a state no node is in any more reads 0."""
    for key in [k for k in _upgrade_series if k[0] == sr and k[1] not in counts]:
        UPGRADES.labels(*key).set(0)
    for state, n in counts.items():
        UPGRADES.labels(sr, state).set(n)
        _upgrade_series.add((sr, state))


def forget(sr: str) -> None:
    """A deleted SpecialResource leaves no series behind."""
    for key in [k for k in _node_series if k[0] == sr]:
        NODES.remove(*key)
        _node_series.discard(key)
    for key in [k for k in _upgrade_series if k[0] == sr]:
        UPGRADES.remove(*key)
        _upgrade_series.discard(key)
    for key in [k for k in _seen_validated if k[0] == sr]:
        _seen_validated.discard(key)
    # and its counts: the same name applied again starts from zero (its time to validate counted once)
    for per_sr in (RECONCILIATIONS, ERRORS, VALIDATION_SECONDS, PASS_SECONDS):
        with contextlib.suppress(KeyError):  # never observed for this SpecialResource
            per_sr.remove(sr)


def serve(port: int) -> None:
    start_http_server(port, registry=REGISTRY)
