"""What one reconcile decides, as data: the plan, the node patches in it, the events it posts.

Why apart from the fold: the cluster side (`sro.operator.cluster`) carries a plan out and teardown
builds one, so the types and the one rule for combining two patches of a node live on their own,
below everything that makes or reads a plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sro.operator.status import PATCH_REFUSED, NodeRow

if TYPE_CHECKING:  # the plan carries it for the metrics; plan.py stays below the machine
    from sro.operator.remediation.machine import RemediationPlan

Taint = Mapping[str, str]


@dataclass(frozen=True)
class NodePatch:
    labels: Mapping[str, str | None] = field(default_factory=dict)
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    add_taints: tuple[Taint, ...] = ()
    remove_taints: tuple[tuple[str, str | None], ...] = ()  # (key, value); None: any value
    unschedulable: bool | None = None  # cordon (True) or uncordon (False); None: leave as is

    @property
    def changes_taints(self) -> bool:
        return bool(self.add_taints or self.remove_taints)

    @property
    def empty(self) -> bool:
        return not (self.labels or self.annotations or self.changes_taints or self.unschedulable is not None)


def merge(a: NodePatch | None, b: NodePatch | None) -> NodePatch:
    """Two patches of one node as one (b's keys win)."""
    a, b = a or NodePatch(), b or NodePatch()
    return NodePatch(
        labels={**a.labels, **b.labels},
        annotations={**a.annotations, **b.annotations},
        add_taints=(*a.add_taints, *b.add_taints),
        remove_taints=(*a.remove_taints, *b.remove_taints),
        unschedulable=b.unschedulable if b.unschedulable is not None else a.unschedulable,
    )


@dataclass(frozen=True)
class NodeEvent:
    """An event about a node's upgrade or remediation, posted on the Node and on the SpecialResource."""

    node: str
    uid: str
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Plan:
    status: dict[str, Any]
    apply: tuple[dict[str, Any], ...] = ()
    delete: tuple[tuple[str, str], ...] = ()  # (kind, name) in the operator's namespace
    delete_elsewhere: tuple[tuple[str, str, str], ...] = ()  # (kind, namespace or "", name)
    create_pods: tuple[dict[str, Any], ...] = ()
    delete_pods: tuple[str, ...] = ()
    node_patches: Mapping[str, NodePatch] = field(default_factory=dict)
    evict: tuple[tuple[str, str], ...] = ()  # (namespace, pod) through the Eviction API
    events: tuple[NodeEvent, ...] = ()
    # node -> the condition to write on its status (strategic merge by type: GpuHealthy)
    node_conditions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    remediation: RemediationPlan | None = None  # the remediation machine's pass (its metrics)
    rows: tuple[NodeRow, ...] = ()
    requeue: float = 30.0
    # False: the spec cannot work (nothing was planned but the status), or every node it selects is
    # held by an older SpecialResource (its nodes are released); the status says why
    deployable: bool = True
    label_keys: frozenset[str] = frozenset()  # node label keys this reconcile read (what wakes it)

    def status_waits_for(self, unpatched: Iterable[str]) -> list[str]:
        """The nodes among `unpatched` (their patch did not go through this pass) that keep this
        plan's status from being written: it says what their patch was to write — a state ready, the
        node validated, its startup taint gone, or a state no longer ready — and a status claiming
        what the node does not show (Ready while the workloads' label is missing) is worse than one a
        pass late. A node whose refusal the status already reports (NodePatchRefused) is not one:
        that status is what must be written."""
        reported = {r.get("name") for r in self.status.get("nodes") or () if r.get("reason") == PATCH_REFUSED}
        return sorted(n for n in unpatched if n not in reported)
