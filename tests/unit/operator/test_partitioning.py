"""Partitioning in the reconcile: the resource-named taint, owned PriorityClasses, per-namespace
quotas and limits, their removal, and the specs refused with the field named."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sro.operator.observed import NodeInfo, QuotaInfo
from sro.operator.partitioning import announced_names
from sro.operator.plan import NodePatch
from sro.operator.reconcile import reconcile
from sro.operator.release import release
from sro.operator.taints import taints_after
from tests.unit.operator.test_reconcile import NOW, NS, SR, cond, node, observed, sr

RES = "sro.dev/simulated-gpu"
PART = {"key": RES, "value": SR, "effect": "NoSchedule"}


def spec(**partitioning: Any) -> dict[str, Any]:
    return {"recipe": "simulated-gpu", "partitioning": partitioning}


def kinds(plan: Any, kind: str) -> list[dict[str, Any]]:
    return [o for o in plan.apply if o["kind"] == kind]


def test_taint_named_after_the_resource_and_tolerated_by_operands() -> None:
    plan = reconcile(observed([node("a"), node("cpu", opt_in=False)], the_sr=sr(spec(taint=True))), NS, NOW)
    assert plan.node_patches["a"].add_taints == (PART,)
    assert "cpu" not in plan.node_patches
    for ds in kinds(plan, "DaemonSet"):
        tolerations = ds["spec"]["template"]["spec"]["tolerations"]
        assert {"key": RES, "operator": "Exists", "effect": "NoSchedule"} in tolerations


def test_taint_removed_with_the_field_but_never_someone_elses() -> None:
    admins = {"key": RES, "value": "admin", "effect": "NoSchedule"}
    a = replace(node("a"), taints=(PART, admins))
    plan = reconcile(observed([a], the_sr=sr(spec(taint=False))), NS, NOW)
    patch = plan.node_patches["a"]
    assert patch.remove_taints == ((RES, SR),)
    assert taints_after(a.taints, patch) == [admins]


def test_release_takes_only_our_taints() -> None:
    other = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    n = NodeInfo(
        "a", taints=(PART, other, {"key": f"sro.dev/{SR}.not-ready", "value": "true", "effect": "NoSchedule"})
    )
    patch = release(SR, RES, n)
    assert patch is not None
    assert taints_after(n.taints, patch) == [other]
    assert release(SR, RES, NodeInfo("b", taints=(other,))) is None


def test_taints_after_adds_once() -> None:
    patch = NodePatch(add_taints=(PART,))
    assert taints_after([PART], patch) == [PART]
    assert taints_after([], patch) == [PART]


@pytest.mark.parametrize(
    ("config", "extra", "mixed"),
    [
        ("version: v1\n", [], False),
        (
            "sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources: [{name: R, replicas: 2}]\n",
            ["R.shared"],
            False,
        ),
        (
            "sharing:\n  timeSlicing:\n    resources: [{name: R, replicas: 2, rename: R.small}]\n",
            ["R.small"],
            False,
        ),
        ("flags: {migStrategy: mixed}\n", [], True),
        ("::: not yaml", [], False),
    ],
)
def test_announced_names(config: str, extra: list[str], mixed: bool) -> None:
    assert announced_names("R", config) == (extra, mixed)


def test_taint_refused_when_the_plugin_announces_several_names() -> None:
    config = "sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources: [{name: sro.dev/simulated-gpu, replicas: 2}]\n"
    s = {**spec(taint=True), "devicePlugin": {"config": config}}
    plan = reconcile(observed([node("a")], the_sr=sr(s)), NS, NOW)
    degraded = cond(plan, "Degraded")
    assert degraded["reason"] == "SpecInvalid" and degraded["message"].startswith("spec.partitioning.taint:")
    assert "sro.dev/simulated-gpu.shared" in degraded["message"]
    assert not plan.apply and not plan.node_patches


def test_priority_classes_are_owned_and_stale_ones_go() -> None:
    prios = [
        {"name": "gpu-high", "value": 1000000, "description": "training"},
        {"name": "gpu-low", "value": 1000, "preemptionPolicy": "Never"},
    ]
    obs = observed(
        [node("a")], the_sr=sr(spec(priorities=prios)), owned_elsewhere=(("PriorityClass", "", "gone"),)
    )
    plan = reconcile(obs, NS, NOW)
    pcs = {p["metadata"]["name"]: p for p in kinds(plan, "PriorityClass")}
    assert (
        pcs["gpu-high"]["value"] == 1000000 and pcs["gpu-high"]["preemptionPolicy"] == "PreemptLowerPriority"
    )
    assert pcs["gpu-low"]["preemptionPolicy"] == "Never" and not pcs["gpu-low"]["globalDefault"]
    assert "namespace" not in pcs["gpu-high"]["metadata"]
    assert pcs["gpu-high"]["metadata"]["ownerReferences"][0]["uid"] == f"uid-{SR}"
    assert plan.delete_elsewhere == (("PriorityClass", "", "gone"),)


def test_quota_and_limit_per_existing_namespace_with_status_rows() -> None:
    quotas = [
        {"namespace": "team-a", "limit": 2, "maxPerContainer": 1},
        {"namespace": "team-b", "limit": 4},
        {"namespace": "later", "limit": 1},
    ]
    info = QuotaInfo("team-a", f"sro-{SR}", hard={f"requests.{RES}": "2"}, used={f"requests.{RES}": "1"})
    obs = observed(
        [node("a")],
        the_sr=sr(spec(quotas=quotas)),
        namespaces=("default", "team-a", "team-b"),
        quotas=(info,),
        owned_elsewhere=(
            ("ResourceQuota", "old-team", f"sro-{SR}"),
            ("ResourceQuota", "team-a", f"sro-{SR}"),
        ),
    )
    plan = reconcile(obs, NS, NOW)
    rq = {q["metadata"]["namespace"]: q for q in kinds(plan, "ResourceQuota")}
    assert rq["team-a"]["spec"]["hard"] == {f"requests.{RES}": "2"}
    assert set(rq) == {"team-a", "team-b"}  # not in a namespace that does not exist
    [lr] = kinds(plan, "LimitRange")
    assert lr["metadata"]["namespace"] == "team-a"
    assert lr["spec"]["limits"] == [{"type": "Container", "max": {RES: "1"}}]  # a max, never a default
    assert plan.delete_elsewhere == (("ResourceQuota", "old-team", f"sro-{SR}"),)
    rows = {r["namespace"]: r for r in plan.status["quotas"]}
    assert rows["team-a"] == {"namespace": "team-a", "resource": RES, "hard": "2", "used": "1"}
    assert "used" not in rows["team-b"]
    assert rows["later"]["problem"].startswith("namespace not found")


@pytest.mark.parametrize(
    ("partitioning", "words"),
    [
        ({"priorities": [{"name": "p", "value": 2000000000}]}, "spec.partitioning.priorities[0].value"),
        ({"priorities": [{"name": "system-gpu", "value": 1}]}, "spec.partitioning.priorities[0].name"),
        ({"priorities": [{"name": "p", "value": 1, "preemptionPolicy": "Sometimes"}]}, "preemptionPolicy"),
        ({"priorities": [{"name": "p", "value": 1}, {"name": "p", "value": 2}]}, "listed twice"),
        ({"quotas": [{"namespace": "Team_A", "limit": 1}]}, "spec.partitioning.quotas[0].namespace"),
        ({"quotas": [{"namespace": "a", "limit": -1}]}, "spec.partitioning.quotas[0].limit"),
        (
            {"quotas": [{"namespace": "a", "limit": 1, "resource": "nvidia.com/gpu"}]},
            "is not announced by recipe",
        ),
    ],
)
def test_bad_partitioning_is_refused_with_the_field_named(partitioning: dict[str, Any], words: str) -> None:
    plan = reconcile(observed([node("a")], the_sr=sr(spec(**partitioning)), namespaces=("a",)), NS, NOW)
    assert not plan.deployable and not plan.apply
    assert words in cond(plan, "Degraded")["message"]
