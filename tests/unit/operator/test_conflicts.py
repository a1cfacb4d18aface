"""Two SpecialResources and one extended resource: refused by node, never by recipe name.

A node goes to the oldest SpecialResource (creationTimestamp, then name) that selects it for a
resource; a later one is refused on exactly the nodes it shares and deploys on the rest. Two of
one recipe on disjoint node pools both deploy (NVIDIA's NVIDIADriver: a driver version per pool);
a custom recipe announcing `nvidia.com/gpu` conflicts with the built-in `nvidia-gpu`.
"""

from __future__ import annotations

from typing import Any

from sro.api.names import driver_revision_label, state_label
from sro.operator.observed import NodeInfo, SpecialResourceInfo
from sro.operator.plan import Plan
from sro.operator.reconcile import reconcile
from tests.unit.operator.test_reconcile import NOW, NS, SR, cond, daemonsets, node, observed, sr
from tests.unit.operator.test_status_schema import empty_strings, fits

OLDER = "2026-11-22T09:00:00Z"
POOL = "example.com/pool"
PCI_NVIDIA = "feature.node.kubernetes.io/pci-0300_10de.present"
MY_GPU_PRESENT = "sro.dev/my-gpu.present"  # what the custom recipe's NodeFeatureRule labels
CUSTOM_GPU = {
    "name": "my-gpu",
    "resource": "nvidia.com/gpu",
    "pciVendor": "10de",
    "visibleDevicesEnv": "NVIDIA_VISIBLE_DEVICES",
    "deviceNode": "/dev/nvidia{index}",
    "pciClasses": ["0300"],
    "backend": "nvml",
}


def pool_node(name: str, pool: str) -> NodeInfo:
    return node(name, **{POOL: pool})


def in_pool(
    pool: str, name: str = SR, created: str = "2026-11-22T10:00:00Z", **spec: Any
) -> SpecialResourceInfo:
    return sr({"recipe": "simulated-gpu", "nodeSelector": {POOL: pool}, **spec}, name=name, created=created)


def table(plan: Plan) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in plan.status.get("nodes", [])}


def test_one_recipe_on_disjoint_node_pools_deploys_both() -> None:
    nodes = [pool_node("a", "x"), pool_node("b", "y")]
    first = in_pool("x", name="first", created=OLDER)
    mine = in_pool("y")
    plan = reconcile(observed(nodes, the_sr=mine, others=(first,)), NS, NOW)
    assert plan.deployable and [r.name for r in plan.rows] == ["b"]
    assert cond(plan, "Degraded")["status"] == "False", cond(plan, "Degraded")
    assert set(table(plan)) == {"b"} and plan.status["nodeCount"] == 1
    theirs = reconcile(observed(nodes, the_sr=first, others=(mine,)), NS, NOW)
    assert theirs.deployable and [r.name for r in theirs.rows] == ["a"]


def test_overlapping_pools_refuse_only_the_shared_nodes_of_the_later_one() -> None:
    nodes = [pool_node("a", "x"), node("b", **{POOL: "x", "shared": "yes"}), node("c", shared="yes")]
    first = in_pool("x", name="first", created=OLDER)  # a and b
    mine = sr({"recipe": "simulated-gpu", "nodeSelector": {"shared": "yes"}})  # b and c
    plan = reconcile(observed(nodes, the_sr=mine, others=(first,)), NS, NOW)
    assert plan.deployable and [r.name for r in plan.rows] == ["c"]
    rows = table(plan)
    assert rows["b"]["state"] == "refused" and rows["b"]["reason"] == "ResourceConflict", rows
    assert "'first' already manages sro.dev/simulated-gpu" in rows["b"]["message"]
    assert "a" not in rows and plan.status["nodeCount"] == 1
    # Ready for its own node, the refused one named; not Degraded
    assert cond(plan, "Degraded")["status"] == "False"
    assert "1 node(s) refused: b (ResourceConflict)" in cond(plan, "Ready")["message"]
    # nothing of ours stays on b: its driver revision label (the driver DaemonSet's gate) comes off
    assert plan.node_patches["b"].labels == {driver_revision_label(SR): None}
    assert driver_revision_label(SR) not in plan.node_patches["c"].labels
    assert fits_schema(plan)
    # the older one keeps both its nodes
    theirs = reconcile(observed(nodes, the_sr=first, others=(mine,)), NS, NOW)
    assert sorted(r.name for r in theirs.rows) == ["a", "b"] and "refused" not in str(theirs.status)


def fits_schema(plan: Plan) -> bool:
    from sro.api.crd import status_schema

    return fits(status_schema(), plan.status) == [] and empty_strings(plan.status) == []


def test_a_refused_node_that_was_ours_is_released() -> None:
    """The older one's selector grew onto our node: our labels come off, so our DaemonSets leave it."""
    b = node("b", **{POOL: "x", state_label(SR, "driver"): "ready"})
    first = in_pool("x", name="first", created=OLDER)
    plan = reconcile(observed([b, node("c")], others=(first,)), NS, NOW)
    assert plan.node_patches["b"].labels == {state_label(SR, "driver"): None, driver_revision_label(SR): None}
    assert [r.name for r in plan.rows] == ["c"]


def test_every_node_refused_is_degraded_naming_the_older_one() -> None:
    first = sr(name="first", created=OLDER)
    plan = reconcile(observed([node("a")], others=(first,)), NS, NOW)
    assert not plan.deployable and not plan.apply  # nothing deployed: no DaemonSet waits for a node
    degraded = cond(plan, "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "ResourceConflict", degraded
    assert "'first' already manages sro.dev/simulated-gpu" in degraded["message"]
    assert cond(plan, "Ready")["status"] == "False"
    assert table(plan)["a"]["state"] == "refused" and plan.status["nodeCount"] == 0
    # nothing of ours set on it (the revision label the helper gave it comes off)
    assert all(v is None for p in plan.node_patches.values() for v in p.labels.values()) and fits_schema(plan)


def test_the_name_breaks_a_tie_of_creation_times() -> None:
    same = "2026-11-22T10:00:00Z"
    a, b = sr(name="a", created=same), sr(name="b", created=same)
    assert reconcile(observed([node("n")], the_sr=a, others=(b,)), NS, NOW).deployable
    assert not reconcile(observed([node("n")], the_sr=b, others=(a,)), NS, NOW).deployable


def test_a_custom_recipe_announcing_nvidia_gpu_conflicts_with_the_builtin() -> None:
    gpu = node("g", opt_in=False, **{PCI_NVIDIA: "true", MY_GPU_PRESENT: "true"})
    builtin = sr({"recipe": "nvidia-gpu", "driver": {"mode": "host"}}, name="nvidia", created=OLDER)
    custom_spec = {"recipe": "my-gpu", "recipeConfigMap": "my-gpu-recipe", "driver": {"mode": "host"}}
    custom = sr(custom_spec, name="mine")
    # the custom one is later: refused on the node the built-in holds
    plan = reconcile(observed([gpu], the_sr=custom, others=(builtin,), custom_recipe=CUSTOM_GPU), NS, NOW)
    assert cond(plan, "Degraded")["reason"] == "ResourceConflict", cond(plan, "Degraded")
    assert "'nvidia' already manages nvidia.com/gpu" in cond(plan, "Degraded")["message"]
    # the built-in one is later: the custom one's recipe is read from its ConfigMap
    late = sr({"recipe": "nvidia-gpu", "driver": {"mode": "host"}}, name="nvidia")
    older_custom = sr(custom_spec, name="mine", created=OLDER)
    plan = reconcile(
        observed([gpu], the_sr=late, others=(older_custom,), other_recipes={"my-gpu-recipe": CUSTOM_GPU}),
        NS,
        NOW,
    )
    assert cond(plan, "Degraded")["reason"] == "ResourceConflict", cond(plan, "Degraded")


def test_another_resource_never_conflicts() -> None:
    other = sr(
        {"recipe": "nvidia-gpu", "nodeSelector": {"kubernetes.io/hostname": "a"}}, name="n", created=OLDER
    )
    plan = reconcile(observed([node("a")], others=(other,)), NS, NOW)
    assert plan.deployable and [r.name for r in plan.rows] == ["a"]


def test_an_unreadable_custom_recipe_holds_what_its_last_status_listed() -> None:
    status = {"resource": "sro.dev/simulated-gpu", "nodes": [{"name": "a", "state": "validated"}]}
    other = SpecialResourceInfo(
        name="first", uid="u1", spec={"recipe": "x", "recipeConfigMap": "gone"}, created=OLDER, status=status
    )
    plan = reconcile(observed([node("a"), node("b")], others=(other,)), NS, NOW)
    assert [r.name for r in plan.rows] == ["b"] and table(plan)["a"]["state"] == "refused"


def test_a_first_state_gated_by_the_selector_alone_leaves_out_refused_nodes() -> None:
    """With no driver and no driver validation, the runtime DaemonSet is gated on the selector: the
    refused nodes are named in its affinity (metadata.name NotIn)."""
    spec = {"driver": {"mode": "host"}, "driverValidation": {"enabled": False}}
    first = in_pool("x", name="first", created=OLDER)
    mine = sr({"recipe": "simulated-gpu", "nodeSelector": {"shared": "yes"}, **spec})
    nodes = [node("b", **{POOL: "x", "shared": "yes"}), node("c", shared="yes")]
    plan = reconcile(observed(nodes, the_sr=mine, others=(first,)), NS, NOW)
    runtime = daemonsets(plan)[f"sro-{SR}-runtime"]
    terms = runtime["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms and all(
        t["matchFields"] == [{"key": "metadata.name", "operator": "NotIn", "values": ["b"]}] for t in terms
    ), terms
    # and not when nothing is refused (objects unchanged for everyone else)
    alone = reconcile(observed(nodes, the_sr=mine), NS, NOW)
    assert "matchFields" not in str(daemonsets(alone)[f"sro-{SR}-runtime"])
