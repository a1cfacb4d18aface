"""Which Node changes wake an operator job: only those it could decide differently on.

Why: a kubelet writes its Node every few seconds (status, heartbeats, images) and at a thousand nodes
that is hundreds of events a second; waking a pass for each would keep the operator busy re-reading
a cluster that did not change for it. Each job says what it reads of a Node (a `view`), and a
`NodeWatch` compares only that: a node that appears or goes, or one whose view changed, wakes;
anything else is ignored. Two views: what a SpecialResource's reconcile reads (`reconcile_view`: its
labels under the watched prefixes or named by a selector, sro's annotations, taints, cordon, Ready,
the allocatable extended resources — not the heartbeat times) and what the NodeFeatureRule step
reads and writes (`rules_view`: labels, annotations, taints, capacity). Pure, so it is unit-tested on recorded events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sro.api.names import NFD_PREFIX, PREFIX
from sro.kube.reflector import Listener
from sro.operator.observed import node_ready

# Label prefixes a reconcile always reads: sro's own (state labels, upgrade, opt-in, simulated device
# counts), NFD's (PCI selection, kernel, OS), and GFD's (nvidia.com/gpu.count and friends).
WATCHED_PREFIXES = (PREFIX, NFD_PREFIX, "nvidia.com/")
View = tuple[Any, ...]


def reconcile_view(body: Mapping[str, Any], keys: frozenset[str] = frozenset()) -> View:
    """What of a Node a reconcile acts on: labels under the watched prefixes or named in `keys`
    (SpecialResources' node selectors, custom recipes' labels), sro's annotations, taints, cordon,
    Ready, and the allocatable extended resources (`domain/name`: a device plugin's devices, which
    a workload validation waits for)."""
    md = body.get("metadata") or {}
    labels = md.get("labels") or {}
    annotations = md.get("annotations") or {}
    spec = body.get("spec") or {}
    allocatable = (body.get("status") or {}).get("allocatable") or {}
    return (
        tuple(sorted((k, v) for k, v in labels.items() if k.startswith(WATCHED_PREFIXES) or k in keys)),
        tuple(sorted((k, v) for k, v in annotations.items() if k.startswith(PREFIX))),
        tuple(sorted(repr(sorted(t.items())) for t in spec.get("taints") or ())),
        bool(spec.get("unschedulable")),
        node_ready(body),
        tuple(sorted((k, str(v)) for k, v in allocatable.items() if "/" in k)),
    )


def rules_view(body: Mapping[str, Any], keys: frozenset[str] = frozenset()) -> View:
    """What the NodeFeatureRule step reads or writes of a Node: labels, annotations, taints, capacity."""
    md = body.get("metadata") or {}
    return (
        tuple(sorted((md.get("labels") or {}).items())),
        tuple(sorted((md.get("annotations") or {}).items())),
        repr((body.get("spec") or {}).get("taints")),
        tuple(sorted(((body.get("status") or {}).get("capacity") or {}).items())),
    )


class NodeWatch:
    """The last view of every node; `changed` says whether an event is worth a pass."""

    def __init__(self, view: Callable[[Mapping[str, Any], frozenset[str]], View] = reconcile_view) -> None:
        self.view = view
        self._seen: dict[str, int] = {}
        self._keys: dict[str, frozenset[str]] = {}  # per SpecialResource: label keys its passes read
        self.keys: frozenset[str] = frozenset()

    def read_by(self, sr: str, keys: Iterable[str]) -> None:
        """Record the label keys a SpecialResource's reconcile reads (its selector, its recipe's)."""
        self._keys[sr] = frozenset(k for k in keys if not k.startswith(WATCHED_PREFIXES))
        self.keys = frozenset().union(*self._keys.values())

    def forget(self, sr: str) -> None:
        self._keys.pop(sr, None)
        self.keys = frozenset().union(*self._keys.values())

    def changed(self, body: Mapping[str, Any], deleted: bool) -> bool:
        name = str((body.get("metadata") or {}).get("name", ""))
        if deleted:
            self._seen.pop(name, None)
            return True
        key = hash(self.view(body, self.keys))
        if self._seen.get(name) == key:
            return False
        self._seen[name] = key
        return True

    def waking(self, poke: Callable[[], None]) -> Listener:
        """A listener for the cache's node reflector: `poke` on a change this watch cares about (and
        after a fresh list, which comes with no object)."""

        def listener(kind: str, body: Mapping[str, Any] | None) -> None:
            if body is None or self.changed(body, deleted=kind == "DELETED"):
                poke()

        return listener
