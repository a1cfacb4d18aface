"""NodeFeatureRules, cluster-side: every node's NodeFeatures + every rule -> what to change on the node.

Why pure: this is NFD master's job (labels, annotations, extended resources and taints from the
rules, and the labels NodeFeature objects ask for directly), and its ownership rules are where the
mistakes would be, so unit tests drive it with plain records. Per node, in NFD's order: the
NodeFeatureRule objects by name, each one's rules in order, `rule.matched` carrying over from one
rule (and object) to the next; the labels of the node's NodeFeature objects first, the rules' after
(a rule's label wins).

Ownership: what this step applied is recorded on the node in `sro.dev/nodefeaturerule-owned`, and
only that is ever changed or removed — a rule deleted takes its label back, a label, annotation,
resource or taint someone set by hand (or the discovery agent's, `sro.dev/feature-labels`) is
never touched, and an output that would overwrite one is skipped and reported. The one exception is
the hand-over of `core.noNodeLabels` (the default `sro install` configures: the agent may not write
Nodes, nfd-master's model): once sro's own NodeFeature for a node carries labels, the agent no longer
labels that node, so every label its record lists is taken over — kept if asked for, removed (and
struck from its record) if not. The record keeps the keys taken, so that going back to the agent
labelling the Node hands them back without a flicker. Extended resources are removed from the record only once they are gone from the
capacity (the status is patched after the record is written).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sro.api.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from sro.api.problems import Problem
from sro.nfd.matching import FeatureMap, Outcome, key_problem, label_key, label_problem, run_rules
from sro.nfd.model import Rule
from sro.nfd.nodefeatures import from_spec, merge, target_node
from sro.nfd.ownership import (
    FEATURE_LABELS_ANNOTATION,
    RULES_OWNED_ANNOTATION,
    Owned,
    TaintId,
    decode_feature_labels,
    decode_owned,
    encode_feature_labels,
)
from sro.nfd.rules import parse_rules
from sro.operator.observed import NodeInfo


@dataclass(frozen=True)
class RuleObject:
    """One NodeFeatureRule, parsed: its good rules, and a problem per bad one (skipped)."""

    name: str
    rules: tuple[Rule, ...]
    problems: tuple[Problem, ...] = ()


def parse_rule_object(doc: Mapping[str, Any]) -> RuleObject:
    name = str((doc.get("metadata") or {}).get("name", ""))
    spec = doc.get("spec")
    where = f"NodeFeatureRule {name} spec.rules"
    if not isinstance(spec, Mapping):
        return RuleObject(name, (), (Problem(f"NodeFeatureRule {name} spec", "expected a mapping; ignored"),))
    rules, problems = parse_rules(spec.get("rules"), where, nodefeaturerule=True)
    return RuleObject(name, rules, problems)


@dataclass(frozen=True)
class Inputs:
    """What the NodeFeature objects of the cluster say, per node (merged in namespace/name order)."""

    features: Mapping[str, FeatureMap]
    labels: Mapping[str, Mapping[str, str]]  # spec.labels asked for directly
    ours: Mapping[str, frozenset[str]]  # of those, the keys asked by sro's own objects (hand-over)
    problems: tuple[Problem, ...] = ()


def gather(node_features: Iterable[Mapping[str, Any]]) -> Inputs:
    docs = list(node_features)
    merged, problems = merge(docs)
    ours: dict[str, set[str]] = {}
    for doc in docs:
        md_labels = (doc.get("metadata") or {}).get("labels") or {}
        if md_labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE and target_node(doc):
            keys = (label_key(k) for k in from_spec(doc)[1])
            ours.setdefault(target_node(doc), set()).update(k for k in keys if k)
    return Inputs(
        features={n: FeatureMap(nf.features) for n, nf in merged.items()},
        labels={n: nf.labels for n, nf in merged.items()},
        ours={n: frozenset(keys) for n, keys in ours.items()},
        problems=tuple(problems),
    )


@dataclass(frozen=True)
class NodeChange:
    """One node's patch: metadata (labels, annotations with the record, taints) then status capacity."""

    name: str
    labels: Mapping[str, str | None] = field(default_factory=dict)
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] | None = None  # the whole new list, or None: unchanged
    capacity: Mapping[str, str | None] = field(default_factory=dict)
    resource_version: str = ""
    skipped: tuple[str, ...] = ()  # outputs not applied: someone else's already there
    warnings: tuple[Problem, ...] = ()

    @property
    def metadata_changed(self) -> bool:
        return bool(self.labels or self.annotations or self.taints is not None)

    @property
    def changed(self) -> bool:
        return self.metadata_changed or bool(self.capacity)


def evaluate(features: FeatureMap | None, rule_objects: Sequence[RuleObject]) -> Outcome:
    """Every rule of every object (by name) against one node's features."""
    view = features if features is not None else FeatureMap({})
    view.matched.clear()
    out = Outcome()
    for obj in sorted(rule_objects, key=lambda o: o.name):
        run_rules(obj.rules, view, out)
    return out


def _taint_id(t: Mapping[str, Any]) -> TaintId:
    return (str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))


def plan_node(node: NodeInfo, inputs: Inputs, rule_objects: Sequence[RuleObject]) -> NodeChange:
    """What to change on `node` so that it carries exactly what the rules and NodeFeatures ask for,
    within what this step owns (pure)."""
    out = evaluate(inputs.features.get(node.name), rule_objects)
    warnings = list(out.warnings)
    skipped: list[str] = []
    prev = decode_owned(node.annotations.get(RULES_OWNED_ANNOTATION))
    agents = decode_feature_labels(node.annotations.get(FEATURE_LABELS_ANNOTATION, ""))
    ours_asked = inputs.ours.get(node.name, frozenset())
    # the agent puts its labels in its NodeFeature (core.noNodeLabels): its record is ours to settle
    agent_handed_over = bool(ours_asked)

    desired_labels: dict[str, str] = {}
    for key, value in inputs.labels.get(node.name, {}).items():
        full = label_key(key)
        if full is None:
            warnings.append(
                Problem(f"node {node.name}", f"NodeFeature label {key}: namespace reserved; not set")
            )
            continue
        desired_labels[full] = value
    desired_labels.update(out.labels)
    for key, value in list(desired_labels.items()):
        why = label_problem(key, value)
        if why:
            warnings.append(Problem(f"label {key}", f"{why}; not set on node {node.name}"))
            del desired_labels[key]

    labels: dict[str, str | None] = {}
    owned_labels: set[str] = set()
    for key, value in sorted(desired_labels.items()):
        handed_over = key in agents and agent_handed_over  # the one exception: core.noNodeLabels
        if key in node.labels and key not in prev.labels and not handed_over:
            skipped.append(f"label {key}")
            continue
        owned_labels.add(key)
        if node.labels.get(key) != value:
            labels[key] = value
    for key in sorted(prev.labels - owned_labels):
        if key in node.labels and key not in agents:  # the agent's again (hand-back): only forgotten
            labels[key] = None
    if agent_handed_over:
        for key in sorted(agents - owned_labels):
            if key in node.labels:  # the agent would have removed it; it can no longer
                labels[key] = None

    annotations: dict[str, str | None] = {}
    owned_annotations: set[str] = set()
    for key, value in sorted(out.annotations.items()):
        why = key_problem(key)
        if why or key in (RULES_OWNED_ANNOTATION, FEATURE_LABELS_ANNOTATION):
            warnings.append(
                Problem(f"annotation {key}", f"{why or 'reserved by sro'}; not set on node {node.name}")
            )
            continue
        if key in node.annotations and key not in prev.annotations:
            skipped.append(f"annotation {key}")
            continue
        owned_annotations.add(key)
        if node.annotations.get(key) != value:
            annotations[key] = value
    for key in sorted(prev.annotations - owned_annotations):
        if key in node.annotations:
            annotations[key] = None

    capacity: dict[str, str | None] = {}
    owned_resources: set[str] = set()
    for key, value in sorted(out.extended_resources.items()):
        why = key_problem(key)
        if why or "/" not in key:
            warnings.append(Problem(f"extended resource {key}", f"{why or 'needs a namespace'}; not set"))
            continue
        if key in node.capacity and key not in prev.extended_resources:
            skipped.append(f"extended resource {key}")
            continue
        owned_resources.add(key)
        if node.capacity.get(key) != value:
            capacity[key] = value
    for key in sorted(prev.extended_resources - owned_resources):
        if key in node.capacity:
            capacity[key] = None
            owned_resources.add(key)  # recorded until it is gone from the capacity

    present = [_taint_id(t) for t in node.taints]
    wanted: dict[tuple[str, str], TaintId] = {}
    for (key, effect), taint in sorted(out.taints.items()):
        tid = (key, taint.value, effect)
        mine = any(p[0] == key and p[2] == effect for p in prev.taints)
        theirs = any(p[0] == key and p[2] == effect for p in present)
        if theirs and not mine:
            skipped.append(f"taint {taint}")
            continue
        wanted[(key, effect)] = tid
    drop = {p for p in prev.taints if (p[0], p[2]) not in wanted or wanted[(p[0], p[2])] != p}
    kept = [t for t in node.taints if _taint_id(t) not in drop]
    for tid in wanted.values():
        if tid not in {_taint_id(t) for t in kept}:
            kept.append({"key": tid[0], **({"value": tid[1]} if tid[1] else {}), "effect": tid[2]})
    taints = tuple(kept) if [_taint_id(t) for t in kept] != present else None

    owned = Owned(
        labels=frozenset(owned_labels),
        annotations=frozenset(owned_annotations),
        extended_resources=frozenset(owned_resources),
        taints=frozenset(wanted.values()),
    )
    record = owned.encode()
    if record != node.annotations.get(RULES_OWNED_ANNOTATION):
        annotations[RULES_OWNED_ANNOTATION] = record
    if agent_handed_over and FEATURE_LABELS_ANNOTATION in node.annotations:
        kept_for_agent = agents & owned_labels  # its once, ours now; the rest were removed above
        agent_record = encode_feature_labels(kept_for_agent) if kept_for_agent else None
        if agent_record != node.annotations[FEATURE_LABELS_ANNOTATION]:
            annotations[FEATURE_LABELS_ANNOTATION] = agent_record
    return NodeChange(
        name=node.name,
        labels=labels,
        annotations=annotations,
        taints=taints,
        capacity=capacity,
        resource_version=node.resource_version,
        skipped=tuple(skipped),
        warnings=tuple(warnings),
    )


def _has_record(node: NodeInfo) -> bool:
    return RULES_OWNED_ANNOTATION in node.annotations


def plan(
    nodes: Sequence[NodeInfo],
    node_features: Iterable[Mapping[str, Any]],
    rule_docs: Iterable[Mapping[str, Any]],
) -> tuple[list[NodeChange], list[Problem]]:
    """Every node's change (only the ones that change something), and the problems of the inputs:
    bad rules (named by object and field, skipped) and malformed NodeFeature parts."""
    inputs = gather(node_features)
    objects = [parse_rule_object(d) for d in rule_docs]
    problems = [*inputs.problems, *(p for o in objects for p in o.problems)]
    if not objects:
        # No rule: only a node's NodeFeature labels, or what an earlier pass set there (its record),
        # can change it. Every sro label patch wakes this step, and planning all 1,000 nodes of a
        # cluster with no rules for each was a tenth of the operator's CPU while a fleet rolled out.
        nodes = [n for n in nodes if n.name in inputs.labels or n.name in inputs.ours or _has_record(n)]
    changes = [plan_node(n, inputs, objects) for n in nodes]
    return changes, problems
