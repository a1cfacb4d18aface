"""An object from custom manifests may not take the name of an object sro makes itself, for this or
another SpecialResource (issue 21 §2): applied, it would be force-adopted and then deleted with this
SpecialResource. The reconcile refuses it with Degraded naming the object; a custom file that
replaces a built-in one (same file name) still renders that file's objects."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sro.manifests import templates
from sro.operator.reconcile import reconcile
from tests.unit.operator.test_reconcile import NOW, NS, SR, cond, context, node, observed, sr, state

SPEC = {"recipe": "simulated-gpu", "customManifests": "mine"}


def _cm(kind: str, name: str) -> str:
    return f"apiVersion: v1\nkind: {kind}\nmetadata:\n  name: {name}\ndata: {{a: b}}\n"


@pytest.mark.parametrize(
    ("kind", "name", "what"),
    [
        ("Deployment", "sro-operator", "Deployment sro-system/sro-operator"),  # the operator itself
        ("DaemonSet", "sro-discovery", "DaemonSet sro-system/sro-discovery"),  # sro install's
        (
            "DaemonSet",
            "sro-other-device-plugin",
            "DaemonSet sro-system/sro-other-device-plugin",
        ),  # another SR's
        (
            "DaemonSet",
            f"sro-{SR}-runtime",
            f"DaemonSet sro-system/sro-{SR}-runtime",
        ),  # this SR's, added twice
        ("ConfigMap", f"sro-{SR}-device-plugin", f"ConfigMap sro-system/sro-{SR}-device-plugin"),
        ("ConfigMap", "sro-discovery-config", "ConfigMap sro-system/sro-discovery-config"),
    ],
)
def test_a_custom_object_may_not_take_a_name_sro_makes(kind: str, name: str, what: str) -> None:
    custom = {"device-plugin.0600_extra.yaml": _cm(kind, name)}
    other = sr(name="other", created="2026-11-22T11:00:00Z")
    plan = reconcile(
        observed([node("a")], the_sr=sr(SPEC), custom_manifests=custom, others=(other,)), NS, NOW
    )
    assert not plan.deployable and not plan.apply and not plan.create_pods and not plan.node_patches
    degraded = cond(plan, "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "CustomManifestConflict"
    assert what in degraded["message"] and "spec.customManifests" in degraded["message"]


def test_a_custom_priority_class_may_not_take_a_partitioning_one() -> None:
    spec = {**SPEC, "partitioning": {"priorities": [{"name": "gpu-high", "value": 1000}]}}
    custom = {
        "runtime.0600_pc.yaml": "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: gpu-high}\nvalue: 5\n"
    }
    plan = reconcile(observed([node("a")], the_sr=sr(spec), custom_manifests=custom), NS, NOW)
    assert cond(plan, "Degraded")["reason"] == "CustomManifestConflict"
    assert (
        "PriorityClass" in cond(plan, "Degraded")["message"]
        and "gpu-high" in cond(plan, "Degraded")["message"]
    )


def test_a_replaced_file_keeps_its_objects_and_other_names_are_free() -> None:
    original = templates("device-plugin")["0300_configmap.yaml"]
    replaced = original.replace("metadata:\n", "metadata:\n  annotations: {note: custom}\n", 1)
    assert replaced != original
    custom = {
        "device-plugin.0300_configmap.yaml": replaced,  # the same file name: replaces sro's
        "device-plugin.0600_extra.yaml": _cm("ConfigMap", f"extra-{SR}"),
    }
    plan = reconcile(observed([node("a")], the_sr=sr(SPEC), custom_manifests=custom), NS, NOW)
    assert plan.deployable, plan.status["conditions"]
    names = {(o["kind"], o["metadata"]["name"]) for o in plan.apply}
    assert ("ConfigMap", f"extra-{SR}") in names and ("ConfigMap", f"sro-{SR}-device-plugin") in names
    plugin_cm = next(o for o in plan.apply if o["metadata"]["name"] == f"sro-{SR}-device-plugin")
    assert plugin_cm["kind"] == "ConfigMap" and plugin_cm["metadata"]["annotations"] == {"note": "custom"}


def test_a_custom_validation_pod_keeps_sros_name() -> None:
    """A custom validation template naming its pod after another SpecialResource's gets sro's name
    (before: the other's pod was taken, and this one's never found, so made again on every pass)."""
    pod = templates("validation")["0500_pod.yaml"].replace(
        "name: {{ name }}", "name: sro-other-driver-validation-a", 1
    )
    ctx = replace(context(sr(SPEC)), custom={"driver-validation.0500_pod.yaml": pod})
    v = state("driver-validation")
    made = v.pod(ctx, "a", "inputs")
    assert made["metadata"]["name"] == v.pod_name(ctx, "a") and made["metadata"]["name"].startswith(
        f"sro-{SR}-"
    )


@pytest.mark.parametrize("state_name", ["driver-validation", "device-plugin-validation"])
def test_validation_pods_from_one_render_are_those_rendered_per_node(state_name: str) -> None:
    """A pass renders a validation template once with stand-in names and puts each node's names
    into a copy: the pods are exactly those a render per node gives."""
    v = state(state_name)
    ctx = context(sr(SPEC))
    for node_name in ("a", "worker-7.example.com", "ip-10-0-12-34.ec2.internal"):
        fresh = replace(ctx, custom={})  # a new pass: nothing kept
        pod = v.pod(fresh, node_name, "inputs")
        by_hand = v._render_pod(fresh, node_name, v.pod_name(fresh, node_name), None)
        by_hand["metadata"]["annotations"] = {
            **by_hand["metadata"].get("annotations", {}),
            "sro.dev/inputs": "inputs",
        }
        assert pod == by_hand
        assert node_name in str(pod) and "stand-in" not in str(pod)
    assert v.pod(ctx, "a", "x") is not v.pod(ctx, "a", "x")  # a copy each time: callers edit it


@pytest.mark.parametrize(
    "use",
    [
        "{{ node | upper }}",
        "{{ node[:12] }}",
        "{{ node[-3:] }}",
        "{{ name[4:9] }}",
        "{{ node | length }}",
        "{{ name | replace('-', '.') }}",
    ],
)
def test_a_template_that_does_more_with_the_names_is_never_filled_in(use: str) -> None:
    """A validation template that transforms the node's or the pod's name (case, a slice, its length)
    cannot be filled in from one render: the stand-in check refuses it, and each node's pod is right."""
    pod = templates("validation")["0500_pod.yaml"].replace(
        "  labels:\n", f'  labels:\n    seen: "{use}"\n', 1
    )
    ctx = replace(context(sr(SPEC)), custom={"driver-validation.0500_pod.yaml": pod})
    v = state("driver-validation")
    assert v._pod_template(ctx, None) is None
    for node_name in ("node-one", "the-second-node-longer"):
        made = v.pod(ctx, node_name, "inputs")
        expected = v._render_pod(ctx, node_name, v.pod_name(ctx, node_name), None)
        assert made["metadata"]["labels"]["seen"] == expected["metadata"]["labels"]["seen"]
        assert "stand-in" not in str(made)


def test_a_custom_template_branching_on_the_node_is_rendered_per_node() -> None:
    """A custom template may branch on the node's name in a way no stand-in shows (both stand-ins
    take the same branch): custom templates are always rendered for each node."""
    pod = templates("validation")["0500_pod.yaml"].replace(
        "  labels:\n",
        "  labels:\n    pool: \"{% if node.startswith('gpu-') %}gpu{% else %}other{% endif %}\"\n",
        1,
    )
    ctx = replace(context(sr(SPEC)), custom={"driver-validation.0500_pod.yaml": pod})
    v = state("driver-validation")
    assert v._pod_template(ctx, None) is not None  # the stand-in check alone would let it through
    assert v.pod(ctx, "gpu-1", "i")["metadata"]["labels"]["pool"] == "gpu"
    assert v.pod(ctx, "cpu-1", "i")["metadata"]["labels"]["pool"] == "other"
