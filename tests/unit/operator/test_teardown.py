"""The teardown of a deleted SpecialResource (sro/operator/teardown.py) over recorded states: what
is deleted, which nodes are released and how, and that nothing of anyone else is touched."""

from __future__ import annotations

from sro.api.names import reached_annotation, state_label, validated_label
from sro.operator.observed import NodeInfo, SpecialResourceInfo
from sro.operator.taints import taints_after
from sro.operator.teardown import Remains, plan, resource_of

SR = "gpus"
RES = "nvidia.com/gpu"
PART = {"key": RES, "value": SR, "effect": "NoSchedule"}
STARTUP = {"key": f"sro.dev/{SR}.not-ready", "value": "true", "effect": "NoSchedule"}
ADMINS = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def special_resource(status: dict[str, str] | None = None, recipe: str = "nvidia-gpu") -> SpecialResourceInfo:
    return SpecialResourceInfo(SR, "uid-1", {"recipe": recipe}, status=status or {})


def test_everything_ours_is_deleted_and_the_status_left_alone() -> None:
    sr = special_resource({"resource": RES, "ready": "True"})
    remains = Remains(
        owned=(("DaemonSet", "gpus-driver"), ("ConfigMap", "gpus-config"), ("Pod", "gpus-validate-a")),
        owned_elsewhere=(("ResourceQuota", "team-a", "gpus"), ("PriorityClass", "", "gpus-high")),
    )
    p = plan(sr, remains)
    assert p.delete == (("DaemonSet", "gpus-driver"), ("ConfigMap", "gpus-config"))
    assert p.delete_pods == ("gpus-validate-a",)
    assert p.delete_elsewhere == (("PriorityClass", "", "gpus-high"), ("ResourceQuota", "team-a", "gpus"))
    assert p.status == sr.status and not p.apply and not p.create_pods and not p.node_patches


def test_nodes_lose_our_labels_annotation_and_taints_only() -> None:
    ours = NodeInfo(
        "a",
        labels={state_label(SR, "driver"): "ready", validated_label(SR): "true", "pool": "gpu"},
        annotations={reached_annotation(SR): "driver=2024-01-01T00:00:00Z", "other": "x"},
        taints=(PART, STARTUP, ADMINS),
    )
    untouched = NodeInfo("b", labels={"pool": "cpu"}, taints=(ADMINS,))
    p = plan(special_resource({"resource": RES}), Remains(nodes=(ours, untouched)))
    assert set(p.node_patches) == {"a"}
    patch = p.node_patches["a"]
    assert patch.labels == {state_label(SR, "driver"): None, validated_label(SR): None}
    assert patch.annotations == {reached_annotation(SR): None}
    assert taints_after(ours.taints, patch) == [ADMINS]


def test_the_resource_comes_from_the_status_else_the_builtin_recipe() -> None:
    assert resource_of(special_resource({"resource": "example.com/fpga"})) == "example.com/fpga"
    assert resource_of(special_resource()) == RES
    assert resource_of(special_resource(recipe="no-such-recipe")) is None


def test_the_finalizer_waits_only_for_the_rule_labels_the_nodefeaturerule_step_recorded() -> None:
    """A deletion that returns leaves nothing: the labels the SpecialResource's NodeFeatureRule made
    (recorded on the node by that step) hold it until the step has taken them back; a label an
    admin set under the same prefix, or one already gone, does not."""
    from sro.nfd.ownership import RULES_OWNED_ANNOTATION, Owned
    from sro.operator.teardown import rule_labels_left

    record = Owned(labels=frozenset({"sro.dev/gpus.count", "sro.dev/gpus.family", "sro.dev/other.count"}))
    carrying = NodeInfo(
        "a",
        labels={"sro.dev/gpus.count": "8", "sro.dev/gpus.mine": "x", "sro.dev/other.count": "1"},
        annotations={RULES_OWNED_ANNOTATION: record.encode() or ""},
    )
    assert rule_labels_left("gpus", [carrying]) == ["node a: sro.dev/gpus.count"]
    by_hand = NodeInfo("b", labels={"sro.dev/gpus.mine": "x"})
    taken_back = NodeInfo("c", labels={}, annotations={RULES_OWNED_ANNOTATION: record.encode() or ""})
    assert rule_labels_left("gpus", [by_hand, taken_back]) == []


def test_the_finalizers_waits_end_when_nothing_is_left_or_say_what_is_after_the_timeout() -> None:
    import asyncio

    from sro.operator.cluster.specialresources import _while_left

    answers = [["pod a", "pod b"], ["pod b"], []]
    assert asyncio.run(_while_left(lambda: answers.pop(0), 5.0, 0.01)) == [] and answers == []
    assert asyncio.run(_while_left(lambda: ["node a: sro.dev/gpus.count"], 0.05, 0.01)) == [
        "node a: sro.dev/gpus.count"
    ]
