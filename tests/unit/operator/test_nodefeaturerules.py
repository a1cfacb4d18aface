"""The operator's NodeFeatureRule step (pure): what it applies, and that it owns only that.

A label set by hand is never touched, a rule deleted takes its label back, two rules with one label
give one label (the later rule's value) that goes only when both are gone; the same for
annotations, extended resources and taints; a bad rule costs itself only; the discovery agent's
labels (`sro.dev/feature-labels`) are never taken, except in the `core.noNodeLabels` hand-over.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sro.nfd.ownership import FEATURE_LABELS_ANNOTATION, RULES_OWNED_ANNOTATION, decode_owned
from sro.operator.nodefeaturerules import NodeChange, plan
from sro.operator.observed import NodeInfo, node_from_json

NFD = "feature.node.kubernetes.io/"
NODE = "n1"


def nodefeature(
    name: str = NODE, *, flags: Mapping[str, list[str]] | None = None, labels: Mapping[str, str] | None = None,
    ours: bool = False, node: str = NODE, namespace: str = "sro-system",
) -> dict[str, Any]:  # fmt: skip
    md_labels = {"nfd.node.kubernetes.io/node-name": node}
    if ours:
        md_labels["app.kubernetes.io/managed-by"] = "sro"
    spec: dict[str, Any] = {
        "features": {
            "flags": {k: {"elements": {e: {} for e in v}} for k, v in (flags or {}).items()},
            "attributes": {"kernel.version": {"elements": {"major": "6", "full": "6.1.0"}}},
            "instances": {"pci.device": {"elements": [{"attributes": {"vendor": "10de", "class": "0302"}}]}},
        }
    }
    if labels:
        spec["labels"] = dict(labels)
    return {"metadata": {"name": name, "namespace": namespace, "labels": md_labels}, "spec": spec}


def rule(name: str, *rules: Mapping[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"rules": list(rules)}}


MATCH_GPU = [{"feature": "pci.device", "matchExpressions": {"vendor": {"op": "In", "value": ["10de"]}}}]


def one(node: NodeInfo, features: list[dict[str, Any]], rules: list[dict[str, Any]]) -> NodeChange:
    changes, _problems = plan([node], features, rules)
    return changes[0]


def applied(node: NodeInfo, change: NodeChange) -> NodeInfo:
    """The node after the change (what the API server would hold)."""
    labels = {**node.labels, **change.labels}
    annotations = {**node.annotations, **change.annotations}
    capacity = {**node.capacity, **change.capacity}
    return NodeInfo(
        node.name,
        {k: v for k, v in labels.items() if v is not None},
        {k: v for k, v in annotations.items() if v is not None},
        node.taints if change.taints is None else tuple(change.taints),
        {k: v for k, v in capacity.items() if v is not None},
    )


def converge(node: NodeInfo, features: list[dict[str, Any]], rules: list[dict[str, Any]]) -> NodeInfo:
    for _ in range(4):
        change = one(node, features, rules)
        if not change.changed:
            return node
        node = applied(node, change)
    raise AssertionError("no fixed point after 4 passes")


def test_a_rule_sets_its_label_and_records_it() -> None:
    change = one(
        NodeInfo(NODE),
        [nodefeature()],
        [rule("r", {"name": "gpu", "labels": {"gpu": "yes"}, "matchFeatures": MATCH_GPU})],
    )
    assert change.labels == {NFD + "gpu": "yes"}
    assert decode_owned(change.annotations[RULES_OWNED_ANNOTATION]).labels == {NFD + "gpu"}


def test_a_deleted_rule_takes_its_label_back_and_leaves_a_hand_set_one() -> None:
    rules = [rule("r", {"name": "gpu", "labels": {"gpu": "yes"}, "matchFeatures": MATCH_GPU})]
    node = converge(NodeInfo(NODE, labels={"example.com/by-hand": "x"}), [nodefeature()], rules)
    assert node.labels == {"example.com/by-hand": "x", NFD + "gpu": "yes"}
    node = converge(node, [nodefeature()], [])
    assert node.labels == {"example.com/by-hand": "x"}
    assert RULES_OWNED_ANNOTATION not in node.annotations  # nothing owned: no record left


def test_a_hand_set_label_with_the_rules_key_is_never_touched() -> None:
    rules = [rule("r", {"name": "gpu", "labels": {"gpu": "yes"}, "matchFeatures": MATCH_GPU})]
    node = NodeInfo(NODE, labels={NFD + "gpu": "mine"})
    change = one(node, [nodefeature()], rules)
    assert NFD + "gpu" not in change.labels and change.skipped == (f"label {NFD}gpu",)
    node = converge(node, [nodefeature()], rules)
    assert node.labels == {NFD + "gpu": "mine"}
    assert converge(node, [nodefeature()], []).labels == {NFD + "gpu": "mine"}  # nor on rule deletion


def test_two_rules_one_label_the_later_value_and_gone_only_with_both() -> None:
    r1 = rule("a-first", {"name": "one", "labels": {"shared": "a"}, "matchFeatures": MATCH_GPU})
    r2 = rule("b-second", {"name": "two", "labels": {"shared": "b"}, "matchFeatures": MATCH_GPU})
    node = converge(NodeInfo(NODE), [nodefeature()], [r2, r1])  # objects run in name order, not list order
    assert node.labels == {NFD + "shared": "b"}
    node = converge(node, [nodefeature()], [r1])
    assert node.labels == {NFD + "shared": "a"}
    assert converge(node, [nodefeature()], []).labels == {}


def test_the_discovery_agents_labels_are_not_the_rules() -> None:
    agent = {FEATURE_LABELS_ANNOTATION: "pci-10de.present"}
    node = NodeInfo(NODE, labels={NFD + "pci-10de.present": "true"}, annotations=agent)
    rules = [
        rule("r", {"name": "same key", "labels": {"pci-10de.present": "false"}, "matchFeatures": MATCH_GPU})
    ]
    node = converge(node, [nodefeature()], rules)
    assert node.labels == {NFD + "pci-10de.present": "true"}


def test_nodefeature_labels_applied_and_handed_over_from_the_agent() -> None:
    """core.noNodeLabels: sro's own NodeFeature carries the labels; the operator takes over the ones
    the agent recorded (no flicker: same value, only the record changes); another vendor's object
    asking for an agent's label does not take it."""
    agent = {FEATURE_LABELS_ANNOTATION: "pci-10de.present"}
    node = NodeInfo(NODE, labels={NFD + "pci-10de.present": "true"}, annotations=agent)
    theirs = nodefeature("vendor", labels={"pci-10de.present": "true"}, namespace="vendor")
    assert one(node, [theirs], []).skipped == (f"label {NFD}pci-10de.present",)
    ours = nodefeature(labels={"pci-10de.present": "true", "example.com/x": "1"}, ours=True)
    change = one(node, [ours], [])
    assert change.labels == {"example.com/x": "1"}  # nothing re-set, nothing flickers
    assert decode_owned(change.annotations[RULES_OWNED_ANNOTATION]).labels == {
        NFD + "pci-10de.present",
        "example.com/x",
    }
    # back to the agent labelling (it still records the key): forgotten, never removed
    node = applied(node, change)
    back = one(node, [nodefeature(ours=True)], [])
    assert NFD + "pci-10de.present" not in back.labels and back.labels == {"example.com/x": None}


def test_with_the_agent_labelling_through_its_nodefeature_the_operator_settles_its_whole_record() -> None:
    """The default install: the agent may not patch Nodes, so what its record lists (from an earlier
    agent that labelled the Node) is the operator's to settle: a label still asked for is kept, one
    no longer discovered is removed and struck from the record, and a taken label whose feature goes
    later is removed too (the agent cannot any more)."""
    gpu, old = NFD + "pci-10de.present", NFD + "old-feature"
    agent = {FEATURE_LABELS_ANNOTATION: "old-feature,pci-10de.present"}
    node = NodeInfo(NODE, labels={gpu: "true", old: "true", "example.com/by-hand": "x"}, annotations=agent)
    ours = nodefeature(labels={"pci-10de.present": "true"}, ours=True)
    node = converge(node, [ours], [])
    assert node.labels == {gpu: "true", "example.com/by-hand": "x"}
    assert node.annotations[FEATURE_LABELS_ANNOTATION] == "pci-10de.present"
    assert decode_owned(node.annotations[RULES_OWNED_ANNOTATION]).labels == {gpu}
    # the GPU goes: the NodeFeature still asks for another label, not this one
    node = converge(node, [nodefeature(labels={"kernel-version.major": "6"}, ours=True)], [])
    assert node.labels == {NFD + "kernel-version.major": "6", "example.com/by-hand": "x"}
    assert FEATURE_LABELS_ANNOTATION not in node.annotations


def test_annotations_extended_resources_and_taints_owned_the_same_way() -> None:
    r = rule("r", {
        "name": "all kinds",
        "annotations": {"example.com/note": "@kernel.version.full"},
        "extendedResources": {"example.com/widgets": "@kernel.version.major"},
        "taints": [{"key": "example.com/gpu", "value": "true", "effect": "NoSchedule"}],
        "matchFeatures": MATCH_GPU,
    })  # fmt: skip
    hand_taint = {"key": "example.com/by-hand", "effect": "NoExecute"}
    node = NodeInfo(
        NODE, annotations={"example.com/by-hand": "x"}, taints=(hand_taint,), capacity={"cpu": "4"}
    )
    node = converge(node, [nodefeature()], [r])
    assert node.annotations["example.com/note"] == "6.1.0" and node.annotations["example.com/by-hand"] == "x"
    assert node.capacity == {"cpu": "4", "example.com/widgets": "6"}
    assert list(node.taints) == [
        hand_taint,
        {"key": "example.com/gpu", "value": "true", "effect": "NoSchedule"},
    ]
    # the rule goes: everything it made goes, the rest stays
    first = one(node, [nodefeature()], [])
    assert first.capacity == {"example.com/widgets": None}
    # the resource stays recorded until the capacity no longer has it (status patched after the record)
    assert decode_owned(first.annotations[RULES_OWNED_ANNOTATION]).extended_resources == {
        "example.com/widgets"
    }
    node = converge(node, [nodefeature()], [])
    assert node.annotations == {"example.com/by-hand": "x"}
    assert node.capacity == {"cpu": "4"} and list(node.taints) == [hand_taint]


def test_a_taint_someone_else_set_is_left_and_a_changed_value_replaced() -> None:
    def taint_rule(value: str) -> dict[str, Any]:
        taint = {"key": "example.com/gpu", "value": value, "effect": "NoSchedule"}
        return rule("r", {"name": "t", "taints": [taint], "matchFeatures": MATCH_GPU})

    theirs = {"key": "example.com/gpu", "value": "theirs", "effect": "NoSchedule"}
    change = one(NodeInfo(NODE, taints=(theirs,)), [nodefeature()], [taint_rule("a")])
    assert change.taints is None and change.skipped
    node = converge(NodeInfo(NODE), [nodefeature()], [taint_rule("a")])
    node = converge(node, [nodefeature()], [taint_rule("b")])
    assert list(node.taints) == [{"key": "example.com/gpu", "value": "b", "effect": "NoSchedule"}]


def test_a_bad_rule_costs_itself_and_names_the_object_and_field() -> None:
    bad = {"name": "typo", "labels": {"x": "1"}, "matchFeatures": [{"feature": "pci.device", "matchExpressions": {"vendor": {"op": "Inn", "value": ["10de"]}}}]}  # fmt: skip
    good = {"name": "fine", "labels": {"y": "1"}, "matchFeatures": MATCH_GPU}
    changes, problems = plan([NodeInfo(NODE)], [nodefeature()], [rule("mixed", bad, good)])
    assert changes[0].labels == {NFD + "y": "1"}
    assert [p.path for p in problems] == [
        "NodeFeatureRule mixed spec.rules[0].matchFeatures[0].matchExpressions.vendor.op"
    ]
    assert "Inn" in problems[0].message and "'typo' skipped" in problems[0].message


def test_reserved_namespaces_and_bad_values_are_reported_not_applied() -> None:
    r = rule("r", {
        "name": "bad outputs",
        "labels": {"kubernetes.io/hostname": "x", "ok": "fine", "bad-value": "has space"},
        "extendedResources": {"example.com/not-a-quantity": "lots"},
        "matchFeatures": MATCH_GPU,
    })  # fmt: skip
    change = one(NodeInfo(NODE), [nodefeature()], [r])
    assert change.labels == {NFD + "ok": "fine"} and change.capacity == {}
    text = " ".join(str(w) for w in change.warnings)
    assert "kubernetes.io/hostname" in text and "bad-value" in text and "not-a-quantity" in text


def test_rules_without_node_features_and_nodefeatures_of_other_nodes() -> None:
    """A node with no NodeFeature gets only what needs no feature; one for another node is not ours."""
    always = rule("r", {"name": "everyone", "labels": {"everyone": "yes"}})
    gpu = rule("s", {"name": "gpu", "labels": {"gpu": "yes"}, "matchFeatures": MATCH_GPU})
    changes, _ = plan([NodeInfo(NODE), NodeInfo("n2")], [nodefeature(node="n2")], [always, gpu])
    by = {c.name: c for c in changes}
    assert by[NODE].labels == {NFD + "everyone": "yes"}
    assert by["n2"].labels == {NFD + "everyone": "yes", NFD + "gpu": "yes"}


def test_unchanged_node_makes_no_change_and_record_is_json() -> None:
    rules = [rule("r", {"name": "gpu", "labels": {"gpu": "yes"}, "matchFeatures": MATCH_GPU})]
    node = converge(NodeInfo(NODE), [nodefeature()], rules)
    assert not one(node, [nodefeature()], rules).changed
    assert json.loads(node.annotations[RULES_OWNED_ANNOTATION]) == {"labels": [NFD + "gpu"]}


def test_node_state_from_the_api_object() -> None:
    doc = {
        "metadata": {"name": NODE, "labels": {"a": "1"}, "annotations": {"b": "2"}, "resourceVersion": "7"},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "4", "example.com/x": 3}},
    }
    s = node_from_json(doc)
    assert (s.labels, s.annotations, s.resource_version) == ({"a": "1"}, {"b": "2"}, "7")
    assert s.taints == ({"key": "k", "effect": "NoSchedule"},) and s.capacity == {
        "cpu": "4",
        "example.com/x": "3",
    }


def test_with_no_rule_only_nodes_with_nodefeature_labels_or_a_record_are_planned() -> None:
    """The shortcut for a cluster without NodeFeatureRules (a pass per sro label patch, over every
    node) leaves out exactly the nodes the full plan would not change."""
    from sro.operator.nodefeaturerules import gather, plan_node

    plain = node_from_json({"metadata": {"name": "plain", "labels": {"a": "b"}}, "spec": {"taints": []}})
    recorded = node_from_json(
        {"metadata": {"name": "n1", "labels": {"x.example/y": "1"},
                      "annotations": {RULES_OWNED_ANNOTATION: json.dumps({"labels": ["x.example/y"]})}}}
    )  # fmt: skip
    asked = node_from_json({"metadata": {"name": "n2"}})
    features = [nodefeature("nf2", node="n2", labels={"z.example/w": "2"})]
    changes, _ = plan([plain, recorded, asked], features, [])
    assert [c.name for c in changes] == ["n1", "n2"]
    assert not plan_node(plain, gather(features), []).changed  # what was left out had nothing to do
    assert changes[0].labels == {"x.example/y": None} and changes[1].labels == {"z.example/w": "2"}
