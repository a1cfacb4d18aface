"""Deleting a SpecialResource, as a plan: everything it made, deleted; every node it touched, released.

Why pure: the teardown is where a mistake removes what is not ours (another SpecialResource's
label, an admin's taint) or leaves ours behind for ever, so it is planned from recorded states and
unit-tested like a reconcile; the plan is carried out by the same code that carries out a pass
(`sro.operator.cluster`), and the finalizer stays until the cluster is clean. What it removes:
the objects labelled with the SpecialResource in the operator's namespace (DaemonSets, ConfigMaps,
Services, the Prometheus operator's kinds, pods), its partitioning objects elsewhere
(PriorityClasses, quotas, limit ranges), and from every node its labels, annotations and taints
(`sro.operator.release`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sro.api.names import PREFIX
from sro.api.recipes import BUILTIN
from sro.devices.faultclasses import CONDITION
from sro.nfd.ownership import RULES_OWNED_ANNOTATION, decode_owned
from sro.operator.observed import NodeInfo, SpecialResourceInfo
from sro.operator.plan import Plan
from sro.operator.release import release


@dataclass(frozen=True)
class Remains:
    """What a deleted SpecialResource left behind, as read when its teardown runs."""

    owned: tuple[tuple[str, str], ...] = ()  # (kind, name) in the operator's namespace, pods included
    owned_elsewhere: tuple[tuple[str, str, str], ...] = ()  # (kind, namespace or "", name)
    nodes: tuple[NodeInfo, ...] = ()


def resource_of(sr: SpecialResourceInfo) -> str | None:
    """The extended resource the SpecialResource managed (its partitioning taint names it): what its
    status says, else its built-in recipe's; None when neither tells."""
    recipe = BUILTIN.get(sr.recipe)
    return str(sr.status.get("resource") or (recipe.resource if recipe else "")) or None


def plan(sr: SpecialResourceInfo, remains: Remains) -> Plan:
    """The teardown of `sr`: its status is left as it is (the object is going)."""
    resource = resource_of(sr)
    patches = {n.name: release(sr.name, resource, n) for n in remains.nodes}
    # its remediation's GpuHealthy condition goes too (nothing would keep it true any more; another
    # SpecialResource's remediation that sees a fault sets it again on its next pass)
    remedied = isinstance(sr.spec.get("remediation"), Mapping)
    conditions = {
        n.name: {"type": CONDITION, "$patch": "delete"}
        for n in remains.nodes
        if remedied and n.gpu_condition is not None
    }
    return Plan(
        status=dict(sr.status),
        delete=tuple(key for key in remains.owned if key[0] != "Pod"),
        delete_pods=tuple(name for kind, name in remains.owned if kind == "Pod"),
        delete_elsewhere=tuple(sorted(remains.owned_elsewhere)),
        node_patches={name: patch for name, patch in patches.items() if patch is not None},
        node_conditions=conditions,
    )


def rule_labels_left(sr: str, nodes: Sequence[NodeInfo]) -> list[str]:
    """The labels under `sro.dev/<sr>.` that the NodeFeatureRule step applied (its record on the node
    says so) and a node still carries, as "node N: key, ...". The SpecialResource's rule went with
    it and that step takes its labels back within a pass or two; the finalizer waits for them, so a
    deletion that returns has left nothing. Only recorded labels: one an admin set by hand under
    the prefix never holds a deletion up."""
    prefix = f"{PREFIX}{sr}."
    left = []
    for node in nodes:
        owned = decode_owned(node.annotations.get(RULES_OWNED_ANNOTATION))
        keys = sorted(k for k in owned.labels if k.startswith(prefix) and k in node.labels)
        if keys:
            left.append(f"node {node.name}: {', '.join(keys)}")
    return left
