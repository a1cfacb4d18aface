"""Taking a SpecialResource off a node: exactly the labels, annotations and taints sro put there.

Why one function: a node that stops matching, a label someone copied by hand and the teardown of a
deleted SpecialResource all release nodes, and each must take back every key of ours — and never
a key that only looks like ours.
"""

from __future__ import annotations

from sro.api.names import STATE_NAMES, reached_annotation, state_label, validated_label
from sro.operator.observed import NodeInfo
from sro.operator.plan import NodePatch, merge
from sro.operator.remediation.machine import release as release_remediation
from sro.operator.taints import taints_to_release
from sro.operator.upgrade.adapter import release_upgrade


def our_label_keys(sr: str) -> frozenset[str]:
    """Exactly the label keys the operator writes for `sr`. Not a prefix match: a SpecialResource
    named like its recipe shares `sro.dev/<name>.` with the recipe's own labels (discovery's
    `sro.dev/simulated-gpu.count`, the admin's opt-in `.enabled`), which are never ours to remove."""
    return frozenset({*(state_label(sr, s) for s in STATE_NAMES), validated_label(sr)})


def our_keys(sr: str, node: NodeInfo) -> list[str]:
    """The label keys of `sr` that `node` carries."""
    ours = our_label_keys(sr)
    return [k for k in node.labels if k in ours]


def release(sr: str, resource: str | None, node: NodeInfo) -> NodePatch | None:
    """Everything of `sr` taken off a node: its labels, annotation, startup and partitioning taints
    (the latter matched by key and value: the value is the SpecialResource's name)."""
    ann = reached_annotation(sr)
    patch = merge(
        NodePatch(
            labels={k: None for k in our_keys(sr, node)},
            annotations={ann: None} if ann in node.annotations else {},
            remove_taints=taints_to_release(sr, resource, node),
        ),
        release_upgrade(sr, node),
    )
    remedy = release_remediation(node, sr)  # its record; the cordon only if sro's
    patch = merge(patch, NodePatch(annotations=remedy.annotations, unschedulable=remedy.unschedulable))
    return None if patch.empty else patch
