"""A custom recipe reaches every agent of its SpecialResource (issue 28), over recorded cluster states.

The operator renders the ADMITTED recipe as ConfigMap `sro-<sr>-recipe` (canonical JSON); every pod
template of that SpecialResource mounts it and runs with `--recipe-file` (never `--recipe=<name>`,
which an agent cannot resolve for a custom name) and carries the recipe's hash, so an edit rolls the
agents. A simulated custom recipe runs the simulated driver from spec.driver.devicesConfig; a real one
is found by a NodeFeatureRule. Built-in recipes render as before. A bad recipe deploys nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from sro.api.crd import status_schema
from sro.api.names import DEVICE_PLUGIN, DEVICE_PLUGIN_VALIDATION, DRIVER_VALIDATION, SPECIALRESOURCE_LABEL
from sro.api.recipes import recipe_from_dict, recipe_to_dict
from sro.api.specparsing import parse_spec
from sro.manifests import render
from sro.operator import teardown
from sro.operator.admission import resolve_recipe
from sro.operator.observed import NodeInfo, Observed, PodInfo, SpecialResourceInfo
from sro.operator.plan import Plan
from sro.operator.recipedistribution import (
    HASH_ANNOTATION,
    RECIPE_FILE,
    RECIPE_MOUNT,
    config_map_name,
    recipe_hash,
    recipe_json,
)
from sro.operator.reconcile import reconcile
from sro.operator.rendering import Context
from sro.operator.states import KERNEL_LABEL, STATES, ValidationState
from sro.operator.status_table import summary_rows
from sro.operator.upgrade.revision import driver_revision
from sro.operator.upgrade.scan import scan_pod
from tests.unit.operator.test_reconcile import IMAGE, NOW, NS, cond, daemonsets
from tests.unit.operator.test_status_schema import fits

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
FPGA: dict[str, Any] = yaml.safe_load((EXAMPLES / "fpga" / "recipe.yaml").read_text())
NIC: dict[str, Any] = yaml.safe_load((EXAMPLES / "smartnic" / "recipe.yaml").read_text())
DEVICES = (EXAMPLES / "fpga" / "devices.yaml").read_text()
SR = "fpga"
CM = f"sro-{SR}-recipe"
NIC_RULE_RECIPE = {**NIC, "name": "real-nic", "backend": "devnodes", "driverRoot": "/"}


def custom_sr(recipe: Mapping[str, Any] = FPGA, name: str = SR, **spec: Any) -> SpecialResourceInfo:
    body = {
        "recipe": recipe["name"],
        "recipeConfigMap": f"{recipe['name']}-recipe",
        "driver": {"devicesConfig": DEVICES},
        **spec,
    }
    return SpecialResourceInfo(name=name, uid=f"uid-{name}", spec=body, created="2026-11-22T10:00:00Z")


def opted_in(name: str, recipe: Mapping[str, Any] = FPGA, **labels: str) -> NodeInfo:
    """A node of the simulated recipe (opted in), with a kernel, on the default driver revision."""
    return NodeInfo(
        name=name,
        labels={
            "kubernetes.io/hostname": name,
            KERNEL_LABEL: "6.1.0",
            f"sro.dev/{recipe['name']}.enabled": "true",
        }
        | labels,
    )


def plan_for(
    the_sr: SpecialResourceInfo,
    recipe: Mapping[str, Any] | None = FPGA,
    nodes: tuple[NodeInfo, ...] = (),
    **kw: Any,
) -> Plan:
    obs = Observed(sr=the_sr, nodes=nodes or (opted_in("a"),), image=IMAGE, custom_recipe=recipe, **kw)
    return reconcile(obs, NS, NOW)


def context(the_sr: SpecialResourceInfo, recipe: Mapping[str, Any] | None) -> Context:
    spec = parse_spec(the_sr.name, the_sr.spec)
    return Context(the_sr.name, the_sr.uid, spec, resolve_recipe(spec, recipe), NS, IMAGE)


def validation_pods(ctx: Context) -> dict[str, dict[str, Any]]:
    out = {}
    for st in STATES:
        if isinstance(st, ValidationState):
            out[st.name] = st.pod(ctx, "a", "inputs")
    return out


def every_agent(the_sr: SpecialResourceInfo, recipe: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Every pod-carrying object of the SpecialResource, by name: its DaemonSets (driver, runtime,
    device plugin, exporter), both validation pods and the upgrade's holder scan."""
    ctx = context(the_sr, recipe)
    return {
        **daemonsets(plan_for(the_sr, recipe)),
        **{f"pod/{k}": v for k, v in validation_pods(ctx).items()},
        "pod/holder-scan": scan_pod(ctx, "a", "inputs"),
    }


def pod_parts(obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(pod metadata, pod spec) of a DaemonSet's template or of a Pod."""
    if obj["kind"] == "Pod":
        return obj["metadata"], obj["spec"]
    return obj["spec"]["template"]["metadata"], obj["spec"]["template"]["spec"]


def args(pod_spec: Mapping[str, Any]) -> list[str]:
    c = pod_spec["containers"][0]
    return [*c.get("command", []), *c.get("args", [])]


# ---- the ConfigMap ---------------------------------------------------------------------------------
def test_the_admitted_recipe_is_rendered_as_a_configmap_of_canonical_json() -> None:
    plan = plan_for(custom_sr())
    assert plan.deployable, plan.status["conditions"]
    (cm,) = [o for o in plan.apply if o["kind"] == "ConfigMap" and o["metadata"]["name"] == CM]
    assert cm["metadata"]["namespace"] == NS
    assert cm["metadata"]["labels"][SPECIALRESOURCE_LABEL] == SR  # found again, deleted with it
    assert cm["metadata"]["ownerReferences"][0]["uid"] == f"uid-{SR}"
    admitted = recipe_from_dict(FPGA)
    assert cm["data"] == {"recipe.json": json.dumps(recipe_to_dict(admitted), sort_keys=True)}
    assert recipe_from_dict(json.loads(cm["data"]["recipe.json"])) == admitted
    assert config_map_name(SR) == CM


# ---- every agent mounts it -----------------------------------------------------------------------
def test_every_agent_mounts_the_recipe_and_is_given_the_file_not_the_name() -> None:
    agents = every_agent(custom_sr(), FPGA)
    names = set(agents)
    assert {f"sro-{SR}-runtime", f"sro-{SR}-device-plugin", f"sro-{SR}-monitoring"} <= names
    assert any(n.startswith(f"sro-{SR}-driver-") for n in names)
    assert {f"pod/{DRIVER_VALIDATION}", f"pod/{DEVICE_PLUGIN_VALIDATION}", "pod/holder-scan"} <= names
    digest = recipe_hash(recipe_from_dict(FPGA))
    for name, obj in agents.items():
        md, ps = pod_parts(obj)
        assert md["annotations"][HASH_ANNOTATION] == digest, name
        volumes = {v["name"]: v for v in ps["volumes"]}
        assert volumes["recipe"]["configMap"]["name"] == CM, name
        mounts = {m["name"]: m for m in ps["containers"][0]["volumeMounts"]}
        assert mounts["recipe"] == {"name": "recipe", "mountPath": RECIPE_MOUNT, "readOnly": True}, name
        argv = args(ps)
        assert f"--recipe-file={RECIPE_FILE}" in argv, (name, argv)
        assert not [a for a in argv if a.startswith("--recipe=")], (name, argv)


def test_the_simulated_driver_runs_the_recipe_with_the_devices_config_under_its_driver_root() -> None:
    plan = plan_for(custom_sr())
    (driver,) = [d for n, d in daemonsets(plan).items() if n.startswith(f"sro-{SR}-driver-")]
    ps = driver["spec"]["template"]["spec"]
    argv = args(ps)
    root = FPGA.get("driverRoot") or "/var/lib/sro/driver/example-fpga"
    assert argv[:3] == ["sro", "driver", "simulate"]
    assert "--config=/etc/sro/driver/devices.yaml" in argv and f"--recipe-file={RECIPE_FILE}" in argv
    assert f"--driver-root=/host{root}" in argv and not [a for a in argv if a.startswith("--personality")]
    volumes = {v["name"]: v for v in ps["volumes"]}
    assert volumes["driver-root"]["hostPath"]["path"] == root
    assert driver["metadata"]["labels"]["sro.dev/simulated"] == "true"  # said wherever it shows
    (devices,) = [o for o in plan.apply if o["kind"] == "ConfigMap" and "devices.yaml" in o.get("data", {})]
    assert devices["data"]["devices.yaml"].strip() == DEVICES.strip()


def test_a_custom_simulated_recipe_without_devices_config_is_degraded_and_deploys_nothing() -> None:
    the_sr = custom_sr(driver={})
    plan = plan_for(the_sr)
    degraded = cond(plan, "Degraded")
    assert degraded["status"] == "True" and "spec.driver.devicesConfig" in degraded["message"], degraded
    assert not plan.deployable and plan.apply == () and plan.node_patches == {}


def test_an_edited_recipe_changes_the_hash_and_the_driver_revision() -> None:
    edited = {**FPGA, "defaultCapabilities": ["runtime", "utility"]}
    before, after = every_agent(custom_sr(), FPGA), every_agent(custom_sr(), edited)
    hashes = {pod_parts(o)[0]["annotations"][HASH_ANNOTATION] for o in after.values()}
    assert hashes == {recipe_hash(recipe_from_dict(edited))} != {recipe_hash(recipe_from_dict(FPGA))}
    assert driver_revision(context(custom_sr(), FPGA)) != driver_revision(context(custom_sr(), edited))
    old = plan_for(custom_sr(), FPGA)
    new = plan_for(custom_sr(), edited)
    cm = {o["metadata"]["name"]: o for o in new.apply if o["kind"] == "ConfigMap"}[CM]
    assert json.loads(cm["data"]["recipe.json"])["defaultCapabilities"] == ["runtime", "utility"]
    assert old.apply != new.apply and set(before) != set(after)  # the driver's DaemonSet is a new revision


# ---- built-ins unchanged ------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", ["simulated-gpu", "nvidia-gpu"])
def test_builtin_recipes_render_no_recipe_configmap_mount_or_hash(recipe: str) -> None:
    spec: dict[str, Any] = {"recipe": recipe}
    if recipe == "nvidia-gpu":
        spec["driver"] = {"imageTemplate": "reg/driver:{version}"}
    the_sr = SpecialResourceInfo(name="gpus", uid="uid-gpus", spec=spec)
    agents = every_agent(the_sr, None) if recipe == "simulated-gpu" else {}
    ctx = context(the_sr, None)
    agents.update({f"pod/{k}": v for k, v in validation_pods(ctx).items()})
    agents["pod/holder-scan"] = scan_pod(ctx, "a", "inputs")
    text = json.dumps(agents)
    assert "recipe-hash" not in text and "/etc/sro/recipe" not in text and "--recipe-file" not in text
    assert f"--recipe={recipe}" in text
    plan = reconcile(Observed(sr=the_sr, nodes=(opted_in("a", {"name": recipe}),), image=IMAGE), NS, NOW)
    assert not [o for o in plan.apply if o["metadata"]["name"].endswith("-recipe")]
    assert not [o for o in plan.apply if o["kind"] == "NodeFeatureRule"]


# ---- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"colour": "blue"}, "colour"),
        ({"resource": "not a resource"}, "resource"),
        ({"deviceNode": "/etc/xclmgmt{index}"}, "deviceNode"),
        ({"libraries": {"runtime": ["../../etc/libx.so"]}}, "libraries"),
    ],
)
def test_a_bad_recipe_is_degraded_naming_the_field_and_nothing_is_rendered(
    change: dict[str, Any], field: str
) -> None:
    bad = {**FPGA, **change}
    plan = plan_for(custom_sr(), bad)
    degraded = cond(plan, "Degraded")
    assert degraded["status"] == "True" and field in degraded["message"], degraded
    assert plan.apply == () and plan.create_pods == () and plan.node_patches == {} and not plan.deployable
    # fixed: deployed on the next pass (the ConfigMap's edit wakes it: sro/operator/handlers.py)
    assert plan_for(custom_sr(), FPGA).deployable


def test_a_missing_recipe_configmap_is_degraded_and_nothing_is_rendered() -> None:
    plan = plan_for(custom_sr(), None)
    assert "spec.recipeConfigMap" in cond(plan, "Degraded")["message"] and plan.apply == ()


def test_two_srs_announcing_one_pool_resource_degrade_the_later_one() -> None:
    older = custom_sr(NIC, name="nic-a")
    older = replace(older, created="2026-11-22T09:00:00Z")
    other = {
        **NIC,
        "name": "other-nic",
        "resource": "example.com/other",
        "pools": {"example.com/vf-pool-b": {"pf": "1"}},
    }
    later = custom_sr(other, name="nic-b")
    node = opted_in("a", NIC, **{"sro.dev/other-nic.enabled": "true"})
    plan = plan_for(
        later, other, nodes=(node,), others=(older,), other_recipes={"example-smartnic-recipe": NIC}
    )
    degraded = cond(plan, "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "ResourceConflict", degraded
    assert "'nic-a'" in degraded["message"] and not plan.deployable
    # the older one deploys
    assert plan_for(
        older, NIC, nodes=(node,), others=(later,), other_recipes={"other-nic-recipe": other}
    ).deployable


# ---- discovery of real hardware ------------------------------------------------------------------
def test_a_real_custom_recipe_gets_a_nodefeaturerule_and_selects_by_its_label() -> None:
    the_sr = custom_sr(NIC_RULE_RECIPE, name="nic", driver={"mode": "host"})
    present = "sro.dev/real-nic.present"
    nodes = (
        NodeInfo("with", labels={KERNEL_LABEL: "6.1.0", present: "true"}),
        NodeInfo(
            "pci-only",
            labels={KERNEL_LABEL: "6.1.0", "feature.node.kubernetes.io/pci-0200_15b3.present": "true"},
        ),
    )
    plan = plan_for(the_sr, NIC_RULE_RECIPE, nodes=nodes)
    assert plan.deployable, plan.status["conditions"]
    assert [r.name for r in plan.rows] == ["with"]  # the rule's label, narrowed by device id
    (rule,) = [o for o in plan.apply if o["kind"] == "NodeFeatureRule"]
    assert rule["metadata"]["name"] == "sro-recipe-real-nic" and "namespace" not in rule["metadata"]
    assert rule["metadata"]["labels"][SPECIALRESOURCE_LABEL] == "nic"
    (r,) = rule["spec"]["rules"]
    assert r["labels"] == {present: "true"}
    (match,) = r["matchFeatures"]
    assert match["feature"] == "pci.device"
    assert match["matchExpressions"] == {
        "vendor": {"op": "In", "value": ["15b3"]},
        "class": {"op": "InRegexp", "value": ["^0200$"]},
        "device": {"op": "In", "value": ["101e"]},
    }
    # a simulated recipe has no PCI device to find: no rule
    assert not [o for o in plan_for(custom_sr()).apply if o["kind"] == "NodeFeatureRule"]


def test_the_rule_and_the_configmap_go_when_the_sr_stops_naming_a_custom_recipe() -> None:
    builtin = SpecialResourceInfo(name="nic", uid="uid-nic", spec={"recipe": "simulated-gpu"})
    obs = Observed(
        sr=builtin,
        nodes=(opted_in("a", {"name": "simulated-gpu"}),),
        image=IMAGE,
        owned=(("ConfigMap", "sro-nic-recipe"),),
        owned_elsewhere=(("NodeFeatureRule", "", "sro-recipe-real-nic"),),
    )
    plan = reconcile(obs, NS, NOW)
    assert ("ConfigMap", "sro-nic-recipe") in plan.delete
    assert ("NodeFeatureRule", "", "sro-recipe-real-nic") in plan.delete_elsewhere
    # while it names one, both are kept
    obs = replace(
        obs, sr=custom_sr(NIC_RULE_RECIPE, name="nic", driver={"mode": "host"}), custom_recipe=NIC_RULE_RECIPE
    )
    kept = reconcile(obs, NS, NOW)
    assert ("ConfigMap", "sro-nic-recipe") not in kept.delete and kept.delete_elsewhere == ()


def test_teardown_deletes_the_recipe_configmap_and_the_rule() -> None:
    remains = teardown.Remains(
        owned=(("ConfigMap", CM), ("DaemonSet", f"sro-{SR}-runtime")),
        owned_elsewhere=(("NodeFeatureRule", "", "sro-recipe-example-fpga"),),
    )
    plan = teardown.plan(custom_sr(), remains)
    assert ("ConfigMap", CM) in plan.delete
    assert plan.delete_elsewhere == (("NodeFeatureRule", "", "sro-recipe-example-fpga"),)


# ---- readiness ---------------------------------------------------------------------------------
def test_the_device_plugin_is_ready_once_any_announced_resource_has_devices() -> None:
    the_sr = custom_sr(NIC, name="nic")
    ctx = context(the_sr, NIC)
    plugin = next(s for s in STATES if s.name == DEVICE_PLUGIN)
    pod = PodInfo(name="p", node="a", state=DEVICE_PLUGIN, phase="Running", ready=True)
    empty = NodeInfo("a", capacity={"example.com/smartnic-vf": "0"})
    verdict = plugin.readiness(ctx, empty, [pod], NOW)
    assert not verdict.ready and verdict.reason == "NoDevicesAnnounced", verdict
    assert "example.com/vf-pool-a" in verdict.message
    pooled = NodeInfo("a", capacity={"example.com/smartnic-vf": "0", "example.com/vf-pool-b": "4"})
    assert plugin.readiness(ctx, pooled, [pod], NOW).ready
    # a pod that is not Ready is not ready, whatever the node announces
    assert not plugin.readiness(ctx, pooled, [replace(pod, ready=False)], NOW).ready
    # the workload validation asks for a device of a pool (a VF in a pool is announced there only)
    workload = validation_pods(ctx)[DEVICE_PLUGIN_VALIDATION]
    assert workload["spec"]["containers"][0]["resources"]["limits"]["example.com/vf-pool-a"] == "1"


def test_feature_discovery_waits_for_the_custom_count_label() -> None:
    ctx = context(custom_sr(), FPGA)
    fd = STATES[-1]
    assert not fd.readiness(ctx, NodeInfo("a"), [], NOW).ready
    assert fd.readiness(ctx, NodeInfo("a", labels={"sro.dev/example-fpga.count": "2"}), [], NOW).ready
    assert recipe_json(recipe_from_dict(FPGA)).startswith("{")


def test_the_status_and_sro_status_list_every_resource_of_a_recipe_with_pools() -> None:
    the_sr = custom_sr(NIC, name="nic")
    plan = plan_for(the_sr, NIC, nodes=(opted_in("a", NIC),))
    assert plan.status["resource"] == "example.com/smartnic-vf"
    assert plan.status["resources"] == [
        "example.com/vf-pool-a",
        "example.com/vf-pool-b",
        "example.com/smartnic-vf",
    ]
    assert fits(status_schema(), plan.status) == []
    (row,) = summary_rows([replace(the_sr, status=plan.status)])
    assert row[2] == "example.com/vf-pool-a, example.com/vf-pool-b, example.com/smartnic-vf"
    # without pools: the one resource, no list
    fpga = plan_for(custom_sr())
    assert "resources" not in fpga.status
    assert summary_rows([replace(custom_sr(), status=fpga.status)])[0][2] == "example.com/fpga"


@pytest.mark.parametrize(
    "component", ["driver", "runtime", "device-plugin", "monitoring", "validation", "upgrade", "remediation"]
)
def test_the_templates_alone_take_the_recipe_configmap(component: str) -> None:
    """`sro manifests render <component> --set recipe_config_map=... --set recipe_hash=...` shows it too."""
    values: dict[str, Any] = dict(namespace=NS, image="i", pull_policy="Never", sr="x", name="n", node="a")
    values |= {
        "check": "driver",
        "simulated": True,
        "recipe": "example-fpga",
        "driver_root": "/var/lib/sro/x",
    }
    docs = render(component, recipe_config_map="sro-x-recipe", recipe_hash="0123456789ab", **values)
    pods = [d for d in docs if d["kind"] in ("DaemonSet", "Pod")]
    assert pods, component
    for obj in pods:
        md, ps = pod_parts(obj)
        assert md["annotations"][HASH_ANNOTATION] == "0123456789ab"  # a string, though all digits
        assert {"name": "recipe", "configMap": {"name": "sro-x-recipe"}} in ps["volumes"]
        assert f"--recipe-file={RECIPE_FILE}" in args(ps) and "--recipe=example-fpga" not in args(ps)
    plain = render(component, **values)
    assert "recipe-hash" not in json.dumps(plain) and "/etc/sro/recipe" not in json.dumps(plain)


def test_a_recipe_yaml_that_is_not_yaml_is_degraded_with_the_parse_error() -> None:
    """The cluster side turns unreadable YAML into `{recipe.yaml: why}` (SpecialResourceIO._recipe):
    the condition says why, not that `recipe.yaml` is an unknown field."""
    why = "invalid YAML: line 29, column 27: expected ',' or ']', but got '{'"
    plan = plan_for(custom_sr(), {"recipe.yaml": why})
    message = cond(plan, "Degraded")["message"]
    assert message == f"spec.recipeConfigMap 'example-fpga-recipe': recipe.yaml: {why}", message
    assert plan.apply == () and not plan.deployable
