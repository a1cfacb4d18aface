"""The pure reconcile over recorded cluster states: gating, labels, validation pods, status.

Each test writes the cluster as the operator would observe it (nodes, our pods) and checks the plan:
what is applied, which labels are set or taken back, which validation pods are made or removed, and
what the status says. Nothing here talks to a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sro.api.names import (
    DEVICE_PLUGIN,
    DEVICE_PLUGIN_VALIDATION,
    DRIVER,
    DRIVER_VALIDATION,
    FEATURE_DISCOVERY,
    MONITORING,
    RUNTIME,
    driver_revision_label,
    not_ready_taint,
    reached_annotation,
    state_label,
    validated_label,
)
from sro.api.specparsing import parse_spec
from sro.operator.admission import resolve_recipe
from sro.operator.observed import NodeInfo, Observed, PodInfo, SpecialResourceInfo
from sro.operator.plan import Plan
from sro.operator.reconcile import ACTING_REQUEUE, SETTLED_REQUEUE, reconcile
from sro.operator.rendering import Context
from sro.operator.states import INPUTS_ANNOTATION, KERNEL_LABEL, STATES, VALIDATION_RETRY, ValidationState
from sro.operator.upgrade.revision import driver_revision

NS = "sro-system"
NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
SR = "gpus"
OPT_IN = "sro.dev/simulated-gpu.enabled"
COUNT = "sro.dev/simulated-gpu.count"
RESOURCE = "sro.dev/simulated-gpu"
IMAGE = "localhost/sro:test"


def sr(
    spec: Mapping[str, Any] | None = None, name: str = SR, created: str = "2026-11-22T10:00:00Z"
) -> SpecialResourceInfo:
    return SpecialResourceInfo(
        name=name, uid=f"uid-{name}", spec=spec or {"recipe": "simulated-gpu"}, created=created
    )


def context(the_sr: SpecialResourceInfo | None = None) -> Context:
    the_sr = the_sr or sr()
    spec = parse_spec(the_sr.name, the_sr.spec)
    return Context(the_sr.name, the_sr.uid, spec, resolve_recipe(spec, None), NS, IMAGE)


REV = driver_revision(context())  # the default spec's driver revision: the nodes below run it


def node(name: str, kernel: str = "6.1.0-13-amd64", opt_in: bool = True, **labels: str) -> NodeInfo:
    all_labels = {"kubernetes.io/hostname": name, KERNEL_LABEL: kernel, **labels}
    allocatable = {}
    if opt_in:  # a selected node, running the default driver revision, its devices allocatable
        all_labels[OPT_IN] = "true"
        all_labels[driver_revision_label(SR)] = REV
        allocatable[RESOURCE] = labels.get(COUNT, "8")
    return NodeInfo(name=name, labels=all_labels, allocatable=allocatable)


def ready_pod(state: str, on: str, uid: str = "") -> PodInfo:
    return PodInfo(
        name=f"{state}-{on}",
        node=on,
        state=state,
        uid=uid or f"{state}-{on}-uid",
        phase="Running",
        ready=True,
        revision=REV if state == DRIVER else "",
        running_since=NOW - timedelta(hours=1),
    )


def observed(
    nodes: list[NodeInfo],
    pods: list[PodInfo] | None = None,
    the_sr: SpecialResourceInfo | None = None,
    **kw: Any,
) -> Observed:
    return Observed(sr=the_sr or sr(), nodes=tuple(nodes), pods=tuple(pods or ()), image=IMAGE, **kw)


def state(name: str) -> ValidationState:
    s = next(s for s in STATES if s.name == name)
    assert isinstance(s, ValidationState)
    return s


def validation_pod(
    plan_or_obs: Observed, vstate: str, on: str, phase: str = "Succeeded", **kw: Any
) -> PodInfo:
    """The validation pod the operator would have made for the current inputs, in `phase`."""
    obs = plan_or_obs
    ctx = context(obs.sr)
    v = state(vstate)
    return PodInfo(
        name=v.pod_name(ctx, on),
        node=on,
        state=vstate,
        uid=f"{vstate}-{on}",
        phase=phase,
        annotations={INPUTS_ANNOTATION: v.inputs(ctx, on, obs.pods)},
        **kw,
    )


def labels_after(n: NodeInfo, plan: Plan) -> dict[str, str]:
    out = dict(n.labels)
    patch = plan.node_patches.get(n.name)
    if patch:
        for k, v in patch.labels.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
    return out


def with_labels(n: NodeInfo, plan: Plan) -> NodeInfo:
    patch = plan.node_patches.get(n.name)
    ann = dict(n.annotations)
    if patch:
        for k, v in patch.annotations.items():
            if v is None:
                ann.pop(k, None)
            else:
                ann[k] = v
    return replace(n, labels=labels_after(n, plan), annotations=ann)


def cond(plan: Plan, ctype: str) -> Mapping[str, Any]:
    return next(c for c in plan.status["conditions"] if c["type"] == ctype)


def daemonsets(plan: Plan) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in plan.apply if o["kind"] == "DaemonSet"}


def affinity_terms(ds: Mapping[str, Any]) -> list[dict[str, Any]]:
    aff = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    return list(aff["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"])


# ---- a fresh cluster -----------------------------------------------------------------------------
def test_fresh_cluster_deploys_every_state_gated_on_the_previous_label() -> None:
    plan = reconcile(observed([node("a"), node("b"), node("cpu", opt_in=False)]), NS, NOW)
    ds = daemonsets(plan)
    assert set(ds) == {f"sro-{SR}-runtime", f"sro-{SR}-device-plugin", f"sro-{SR}-monitoring"} | {
        n for n in ds if n.startswith(f"sro-{SR}-driver-")
    }
    driver = next(v for k, v in ds.items() if k.startswith(f"sro-{SR}-driver-"))
    assert driver["spec"]["updateStrategy"]["type"] == "OnDelete"
    exprs = affinity_terms(driver)[0]["matchExpressions"]
    assert {"key": OPT_IN, "operator": "In", "values": ["true"]} in exprs
    assert {"key": KERNEL_LABEL, "operator": "In", "values": ["6.1.0-13-amd64"]} in exprs
    # runtime waits for driver-validation, the plugin for runtime (ready, or revalidating after a
    # driver upgrade: sro.operator.upgrade.rewalk keeps the later states running)
    assert affinity_terms(ds[f"sro-{SR}-runtime"]) == [
        {
            "matchExpressions": [
                {
                    "key": state_label(SR, DRIVER_VALIDATION),
                    "operator": "In",
                    "values": ["ready", "revalidating"],
                }
            ]
        }
    ]
    assert affinity_terms(ds[f"sro-{SR}-device-plugin"])[0]["matchExpressions"][0]["key"] == state_label(
        SR, RUNTIME
    )
    for obj in plan.apply:
        assert obj["metadata"]["namespace"] == NS
        assert obj["metadata"]["ownerReferences"][0]["uid"] == f"uid-{SR}"
        assert obj["metadata"]["labels"]["sro.dev/specialresource"] == SR
        assert obj["kind"] not in ("ServiceAccount", "ClusterRole", "Namespace")  # sro install owns those
    # no node is ready yet: rows for the two matching nodes only, waiting on the driver
    assert [r.name for r in plan.rows] == ["a", "b"]
    assert all(r.failing == DRIVER and not r.validated for r in plan.rows)
    assert plan.status["nodeCount"] == 2 and plan.status["validatedCount"] == 0
    assert cond(plan, "Ready")["status"] == "False" and cond(plan, "Progressing")["status"] == "True"
    assert cond(plan, "Degraded")["status"] == "False"
    assert plan.status["states"]["monitoring"] == "enabled"
    # the exporter waits for the validation workload
    assert affinity_terms(ds[f"sro-{SR}-monitoring"])[0]["matchExpressions"][0]["key"] == state_label(
        SR, DEVICE_PLUGIN_VALIDATION
    )
    assert not plan.create_pods
    # the nodes get their first-seen time, nothing else
    assert set(plan.node_patches) == {"a", "b"}
    assert plan.node_patches["a"].labels == {}
    assert "selected=" in (plan.node_patches["a"].annotations[reached_annotation(SR)] or "")


def test_one_driver_daemonset_per_kernel() -> None:
    plan = reconcile(observed([node("a", "5.10.0-1"), node("b", "6.1.0-13"), node("c", "6.1.0-13")]), NS, NOW)
    drivers = [d for n, d in daemonsets(plan).items() if n.startswith(f"sro-{SR}-driver-")]
    kernels = sorted(
        next(e["values"][0] for e in affinity_terms(d)[0]["matchExpressions"] if e["key"] == KERNEL_LABEL)
        for d in drivers
    )
    assert kernels == ["5.10.0-1", "6.1.0-13"]


def test_node_without_kernel_label_waits_for_discovery() -> None:
    bare = NodeInfo("new", labels={OPT_IN: "true"})
    plan = reconcile(observed([bare]), NS, NOW)
    row = plan.rows[0]
    assert row.failing == DRIVER and row.reason == "NoKernelLabel"
    assert not [n for n in daemonsets(plan) if n.startswith(f"sro-{SR}-driver-")]


# ---- walking the states on one node ----------------------------------------------------------------
def test_driver_ready_sets_the_label_and_starts_its_validation() -> None:
    a = node("a")
    obs = observed([a], [ready_pod(DRIVER, "a")])
    plan = reconcile(obs, NS, NOW)
    assert plan.node_patches["a"].labels == {state_label(SR, DRIVER): "ready"}
    [pod] = plan.create_pods
    assert pod["kind"] == "Pod" and pod["spec"]["nodeName"] == "a"
    assert pod["metadata"]["labels"]["sro.dev/state"] == DRIVER_VALIDATION
    assert pod["metadata"]["annotations"][INPUTS_ANNOTATION]
    assert plan.rows[0].failing == DRIVER_VALIDATION


def test_full_walk_to_validated_in_order() -> None:
    a = node("a", **{COUNT: "8"})
    pods = [ready_pod(DRIVER, "a")]
    obs = observed([a], pods)
    pods.append(validation_pod(obs, DRIVER_VALIDATION, "a"))
    pods += [ready_pod(RUNTIME, "a"), ready_pod(DEVICE_PLUGIN, "a")]
    obs = observed([a], pods)
    pods.append(validation_pod(obs, DEVICE_PLUGIN_VALIDATION, "a"))
    pods.append(ready_pod(MONITORING, "a"))
    plan = reconcile(observed([a], pods), NS, NOW)
    got = labels_after(a, plan)
    for s in (
        DRIVER,
        DRIVER_VALIDATION,
        RUNTIME,
        DEVICE_PLUGIN,
        DEVICE_PLUGIN_VALIDATION,
        MONITORING,
        FEATURE_DISCOVERY,
    ):
        assert got[state_label(SR, s)] == "ready", s
    assert got[validated_label(SR)] == "true"
    assert plan.rows[0].validated
    assert plan.status["validatedCount"] == 1 and cond(plan, "Ready")["status"] == "True"
    assert plan.status["nodes"] == [{"name": "a", "state": "validated", "since": "2026-11-22T12:00:00Z"}]
    assert plan.requeue > 10 or plan.node_patches  # settled passes back off


def test_a_node_that_is_not_ready_keeps_its_states_until_it_reports_again() -> None:
    """Its pods were marked not Ready by the node lifecycle controller, not by their containers:
    nothing is taken away, no pod is made or deleted, and the row says why."""
    a = node("a", **{COUNT: "8"})
    pods = [ready_pod(DRIVER, "a")]
    pods.append(validation_pod(observed([a], pods), DRIVER_VALIDATION, "a"))
    pods += [ready_pod(RUNTIME, "a"), ready_pod(DEVICE_PLUGIN, "a")]
    settled = reconcile(observed([a], pods), NS, NOW)
    a = with_labels(a, settled)
    unknown = [replace(p, ready=False, reason="") for p in pods]
    plan = reconcile(observed([replace(a, ready=False)], unknown), NS, NOW + timedelta(seconds=40))
    assert "a" not in plan.node_patches and not plan.create_pods and not plan.delete_pods
    row = plan.rows[0]
    assert row.reason == "NodeNotReady" and not row.validated
    assert row.ready_states == (DRIVER, DRIVER_VALIDATION, RUNTIME, DEVICE_PLUGIN)
    assert plan.status["nodes"][0]["state"] == DEVICE_PLUGIN and plan.status["validatedCount"] == 0
    # it reports again: judged as before, and it walks on
    back = reconcile(observed([a], pods), NS, NOW + timedelta(seconds=60))
    assert [c["metadata"]["labels"]["sro.dev/state"] for c in back.create_pods] == [DEVICE_PLUGIN_VALIDATION]


def test_the_workload_validation_waits_for_a_device_in_the_nodes_allocatable() -> None:
    """The device plugin is ready before the kubelet has posted its devices: a pod asking one would
    be refused by the scheduler and retried after its back-off, so none is made until the node's
    allocatable shows one; the row says what it waits for. Only the creation waits: a pod that
    already passed keeps its verdict while the devices are unhealthy."""
    a = replace(node("a", **{COUNT: "8"}), allocatable={"cpu": "2", RESOURCE: "0"})
    pods = [ready_pod(DRIVER, "a")]
    pods.append(validation_pod(observed([a], pods), DRIVER_VALIDATION, "a"))
    pods += [ready_pod(RUNTIME, "a"), ready_pod(DEVICE_PLUGIN, "a")]
    plan = reconcile(observed([a], pods), NS, NOW)
    assert not plan.create_pods
    row = plan.rows[0]
    assert row.failing == DEVICE_PLUGIN_VALIDATION and row.reason == "WaitingForDevices"
    assert RESOURCE in row.message
    posted = replace(a, allocatable={"cpu": "2", RESOURCE: "8"})
    plan = reconcile(observed([posted], pods), NS, NOW + timedelta(seconds=1))
    assert [c["metadata"]["labels"]["sro.dev/state"] for c in plan.create_pods] == [DEVICE_PLUGIN_VALIDATION]
    pods.append(validation_pod(observed([posted], pods), DEVICE_PLUGIN_VALIDATION, "a"))
    pods.append(ready_pod(MONITORING, "a"))
    unhealthy = replace(posted, allocatable={"cpu": "2", RESOURCE: "0"})
    plan = reconcile(observed([unhealthy], pods), NS, NOW + timedelta(seconds=2))
    assert plan.rows[0].validated and not plan.create_pods and not plan.delete_pods


def test_feature_discovery_waits_for_the_device_count_label() -> None:
    a = node("a")  # no count label
    pods = [ready_pod(DRIVER, "a")]
    obs = observed([a], pods)
    pods.append(validation_pod(obs, DRIVER_VALIDATION, "a"))
    pods += [ready_pod(RUNTIME, "a"), ready_pod(DEVICE_PLUGIN, "a")]
    pods.append(validation_pod(observed([a], pods), DEVICE_PLUGIN_VALIDATION, "a"))
    pods.append(ready_pod(MONITORING, "a"))
    plan = reconcile(observed([a], pods), NS, NOW)
    assert plan.rows[0].failing == FEATURE_DISCOVERY and COUNT in plan.rows[0].message


def test_a_new_driver_pod_makes_the_later_states_go_and_their_validation_rerun() -> None:
    a = node("a", **{COUNT: "8"})
    pods = [ready_pod(DRIVER, "a")]
    pods.append(validation_pod(observed([a], pods), DRIVER_VALIDATION, "a"))
    pods += [ready_pod(RUNTIME, "a"), ready_pod(DEVICE_PLUGIN, "a")]
    pods.append(validation_pod(observed([a], pods), DEVICE_PLUGIN_VALIDATION, "a"))
    settled = reconcile(observed([a], pods), NS, NOW)
    a = with_labels(a, settled)
    # the driver pod was killed and the DaemonSet made a new one (new uid), already Ready
    pods[0] = ready_pod(DRIVER, "a", uid="driver-a-new")
    plan = reconcile(observed([a], pods), NS, NOW + timedelta(seconds=5))
    got = labels_after(a, plan)
    assert got[state_label(SR, DRIVER)] == "ready"
    for s in (DRIVER_VALIDATION, RUNTIME, DEVICE_PLUGIN, DEVICE_PLUGIN_VALIDATION, FEATURE_DISCOVERY):
        assert state_label(SR, s) not in got, s
    assert validated_label(SR) not in got
    assert plan.delete_pods == (pods[1].name,)  # the stale validation goes; a new one follows
    assert plan.rows[0].failing == DRIVER_VALIDATION
    # reached times of the lost states are dropped, the driver's kept
    reached = plan.node_patches["a"].annotations[reached_annotation(SR)] or ""
    assert "driver=" in reached and "runtime=" not in reached


def test_failed_validation_is_shown_with_its_log_and_retried_after_a_pause() -> None:
    a, b = node("a"), node("b")
    pods = [ready_pod(DRIVER, "a"), ready_pod(DRIVER, "b")]
    obs = observed([a, b], pods)
    log = "simgpu-smi lists 7 devices, the driver has 8\nvalidation failed\n"
    bad = validation_pod(
        obs,
        DRIVER_VALIDATION,
        "a",
        phase="Failed",
        reason="Error",
        log=log,
        finished_at=NOW - timedelta(seconds=5),
    )
    good = validation_pod(obs, DRIVER_VALIDATION, "b")
    plan = reconcile(observed([a, b], [*pods, bad, good]), NS, NOW)
    rows = {r.name: r for r in plan.rows}
    assert rows["a"].failed and rows["a"].failing == DRIVER_VALIDATION
    assert rows["a"].message.startswith("simgpu-smi lists 7")
    assert rows["b"].ready_states == (DRIVER, DRIVER_VALIDATION)  # the other node proceeds
    assert (
        cond(plan, "Degraded")["status"] == "True"
        and "a at driver-validation" in cond(plan, "Degraded")["message"]
    )
    status_row = next(r for r in plan.status["nodes"] if r["name"] == "a")
    assert status_row["log"].endswith("validation failed\n") and len(status_row["log"].encode()) <= 1024
    assert not plan.delete_pods  # too soon to retry
    later = reconcile(observed([a, b], [*pods, bad, good]), NS, NOW + timedelta(seconds=40))
    assert later.delete_pods == (bad.name,)


def test_crash_looping_driver_fails_only_its_node() -> None:
    a, b = node("a"), node("b")
    crash = PodInfo(
        "driver-a",
        "a",
        DRIVER,
        uid="x",
        phase="Running",
        reason="CrashLoopBackOff",
        message="back-off 40s restarting failed container",
        restarts=4,
        log="modprobe: FATAL\n",
        revision=REV,
    )
    plan = reconcile(observed([a, b], [crash, ready_pod(DRIVER, "b")]), NS, NOW)
    rows = {r.name: r for r in plan.rows}
    assert (
        rows["a"].failed and rows["a"].reason == "CrashLoopBackOff" and rows["a"].log == "modprobe: FATAL\n"
    )
    assert state_label(SR, DRIVER) in labels_after(b, plan)


# ---- nodes coming and going -----------------------------------------------------------------------
def test_a_node_that_stops_matching_loses_every_label_and_its_validation_pods() -> None:
    a = node("a", opt_in=False, **{state_label(SR, DRIVER): "ready", "sro.dev/other.driver": "ready"})
    a = replace(a, annotations={reached_annotation(SR): "selected=x"})
    leftover = PodInfo(name="old", node="gone", state=DRIVER_VALIDATION, phase="Succeeded")
    plan = reconcile(observed([a], [leftover]), NS, NOW)
    assert plan.node_patches["a"].labels == {state_label(SR, DRIVER): None}  # not other SRs' labels
    assert plan.node_patches["a"].annotations == {reached_annotation(SR): None}
    assert plan.delete_pods == ("old",)
    assert plan.rows == () and cond(plan, "Ready")["reason"] == "NoMatchingNodes"


def test_startup_taint_until_validated() -> None:
    spec = {"recipe": "simulated-gpu", "startupTaint": True}
    a = node("a")
    plan = reconcile(observed([a], the_sr=sr(spec)), NS, NOW)
    assert plan.node_patches["a"].add_taints == (
        {"key": not_ready_taint(SR), "value": "true", "effect": "NoSchedule"},
    )
    tainted = replace(a, taints=({"key": not_ready_taint(SR), "value": "true", "effect": "NoSchedule"},))
    again = reconcile(observed([tainted], the_sr=sr(spec)), NS, NOW).node_patches.get("a")
    assert again is None or not again.changes_taints
    # operands tolerate it
    for obj in plan.apply:
        if obj["kind"] == "DaemonSet":
            keys = [t.get("key") for t in obj["spec"]["template"]["spec"]["tolerations"]]
            assert not_ready_taint(SR) in keys
    # without startupTaint, a leftover taint is removed
    plain = reconcile(observed([tainted]), NS, NOW)
    assert plain.node_patches["a"].remove_taints == ((not_ready_taint(SR), None),)


# ---- spec choices ------------------------------------------------------------------------------------
def test_disabled_state_is_skipped_in_the_chain_and_its_objects_go() -> None:
    spec = {"recipe": "simulated-gpu", "runtime": {"enabled": False}}
    obs = observed([node("a")], the_sr=sr(spec), owned=(("DaemonSet", f"sro-{SR}-runtime"),))
    plan = reconcile(obs, NS, NOW)
    ds = daemonsets(plan)
    assert f"sro-{SR}-runtime" not in ds
    assert affinity_terms(ds[f"sro-{SR}-device-plugin"])[0]["matchExpressions"][0]["key"] == state_label(
        SR, DRIVER_VALIDATION
    )
    assert plan.delete == (("DaemonSet", f"sro-{SR}-runtime"),)
    assert plan.status["states"][RUNTIME] == "disabled"


def test_host_driver_deploys_no_driver_and_validates_the_host() -> None:
    spec = {"recipe": "nvidia-gpu", "driver": {"mode": "host"}}
    gpu = NodeInfo(
        "g", labels={"feature.node.kubernetes.io/pci-0302_10de.present": "true", KERNEL_LABEL: "6.1"}
    )
    plan = reconcile(observed([gpu, node("cpu", opt_in=False)], the_sr=sr(spec)), NS, NOW)
    assert not [n for n in daemonsets(plan) if "-driver-" in n]
    assert [r.name for r in plan.rows] == ["g"]
    [pod] = plan.create_pods  # the driver-validation pod runs first
    assert pod["metadata"]["labels"]["sro.dev/state"] == DRIVER_VALIDATION


def test_nvidia_default_selector_is_either_pci_class() -> None:
    spec = {
        "recipe": "nvidia-gpu",
        "driver": {"version": "550.54", "imageTemplate": "reg/driver:{version}-{kernel}"},
    }
    nodes = [
        NodeInfo(
            "a", labels={"feature.node.kubernetes.io/pci-0302_10de.present": "true", KERNEL_LABEL: "6.1"}
        ),
        NodeInfo(
            "b", labels={"feature.node.kubernetes.io/pci-0300_10de.present": "true", KERNEL_LABEL: "6.1"}
        ),
        NodeInfo(
            "c", labels={"feature.node.kubernetes.io/pci-0300_1002.present": "true", KERNEL_LABEL: "6.1"}
        ),
    ]
    plan = reconcile(observed(nodes, the_sr=sr(spec)), NS, NOW)
    assert [r.name for r in plan.rows] == ["a", "b"]
    [driver] = [d for n, d in daemonsets(plan).items() if "-driver-" in n]
    assert len(affinity_terms(driver)) == 2
    images = [c["image"] for c in driver["spec"]["template"]["spec"]["containers"]]
    assert "reg/driver:550.54-6.1" in images


def test_state_overrides_reach_the_container() -> None:
    spec = {
        "recipe": "simulated-gpu",
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
        "priorityClassName": "system-node-critical",
        "devicePlugin": {
            "image": "reg/sro:1",
            "args": ["--extra"],
            "env": [{"name": "X", "value": "1"}],
            "resources": {"limits": {"memory": "99Mi"}},
        },
    }
    ds = daemonsets(reconcile(observed([node("a")], the_sr=sr(spec)), NS, NOW))[f"sro-{SR}-device-plugin"]
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"] == "reg/sro:1" and c["imagePullPolicy"] == "IfNotPresent"
    assert c["args"][-1] == "--extra" and {"name": "X", "value": "1"} in c["env"]
    assert c["resources"] == {"limits": {"memory": "99Mi"}}
    assert pod["priorityClassName"] == "system-node-critical"
    assert {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]


# ---- bad input: Degraded, nothing deployed, the field named ------------------------------------------
@pytest.mark.parametrize(
    ("spec", "name", "reason", "words"),
    [
        ({"recipe": "tpu"}, SR, "SpecInvalid", "spec.recipe: unknown recipe 'tpu'"),
        (
            {"recipe": "nvidia-gpu", "driver": {"imageTemplate": "r/d:{kernal}"}},
            SR,
            "SpecInvalid",
            "spec.driver.imageTemplate: unknown variable(s) {kernal}",
        ),
        (
            {"recipe": "simulated-gpu"},
            "a-very-long-special-resource-name-for-labels",
            "SpecInvalid",
            "metadata.name",
        ),
        (
            {"recipe": "simulated-gpu", "customManifests": "mine"},
            SR,
            "CustomManifestsMissing",
            "spec.customManifests",
        ),
        ({"recipe": "nvidia-gpu"}, SR, "SpecInvalid", "spec.driver.imageTemplate: required"),
    ],
)
def test_unworkable_specs_are_degraded_with_the_field_named(
    spec: dict[str, Any], name: str, reason: str, words: str
) -> None:
    plan = reconcile(observed([node("a")], the_sr=sr(spec, name=name)), NS, NOW)
    assert not plan.deployable and not plan.apply and not plan.node_patches and not plan.create_pods
    degraded = cond(plan, "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == reason
    assert words in degraded["message"]


def test_a_custom_template_that_fails_to_render_is_degraded() -> None:
    spec = {"recipe": "simulated-gpu", "customManifests": "mine"}
    bad = {"device-plugin.0600_extra.yaml": "kind: ConfigMap\nmetadata: {name: {{ nope }}}\n"}
    plan = reconcile(observed([node("a")], the_sr=sr(spec), custom_manifests=bad), NS, NOW)
    assert cond(plan, "Degraded")["reason"] == "RenderFailed"
    assert "device-plugin/0600_extra.yaml (custom)" in cond(plan, "Degraded")["message"]
    assert "nope" in cond(plan, "Degraded")["message"]


def test_custom_manifests_add_and_replace() -> None:
    spec = {"recipe": "simulated-gpu", "customManifests": "mine"}
    extra = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra-{{ sr }}\ndata: {a: b}\n"
    plan = reconcile(
        observed([node("a")], the_sr=sr(spec), custom_manifests={"runtime.0600_extra.yaml": extra}), NS, NOW
    )
    cm = next(o for o in plan.apply if o["metadata"]["name"] == f"extra-{SR}")
    assert cm["metadata"]["labels"]["sro.dev/state"] == RUNTIME and cm["metadata"]["namespace"] == NS


def test_second_special_resource_for_the_same_resource_is_refused() -> None:
    older = sr(name="first", created="2026-11-22T09:00:00Z")
    plan = reconcile(observed([node("a")], others=(older,)), NS, NOW)
    assert cond(plan, "Degraded")["reason"] == "ResourceConflict"
    assert "'first' already manages sro.dev/simulated-gpu" in cond(plan, "Degraded")["message"]
    # and the older one is not disturbed by the newer
    mine = reconcile(observed([node("a")], the_sr=older, others=(sr(),)), NS, NOW)
    assert mine.deployable


def test_conditions_keep_their_transition_time() -> None:
    first = reconcile(observed([node("a")]), NS, NOW)
    again = reconcile(
        observed([node("a")], the_sr=replace(sr(), status=first.status)), NS, NOW + timedelta(minutes=5)
    )
    assert cond(again, "Ready")["lastTransitionTime"] == cond(first, "Ready")["lastTransitionTime"]


def test_status_stays_small_at_a_thousand_validated_nodes() -> None:
    import json

    nodes = []
    for i in range(1000):
        n = node(f"node-{i:04d}", **{COUNT: "8"})
        labels = dict(n.labels)
        labels.update({state_label(SR, s.name): "ready" for s in STATES})
        nodes.append(replace(n, labels=labels))
    pods: list[PodInfo] = []
    for n in nodes:
        pods += [ready_pod(s, n.name) for s in (DRIVER, RUNTIME, DEVICE_PLUGIN, MONITORING)]
    obs = observed(nodes, pods)
    extra = [validation_pod(obs, DRIVER_VALIDATION, n.name) for n in nodes]
    extra += [validation_pod(obs, DEVICE_PLUGIN_VALIDATION, n.name) for n in nodes]
    plan = reconcile(observed(nodes, pods + extra), NS, NOW)
    assert plan.status["validatedCount"] == 1000
    assert len(json.dumps(plan.status)) < 100_000


def test_a_special_resource_named_like_its_recipe_never_touches_the_recipes_labels() -> None:
    """`sro.dev/simulated-gpu.` is both the SpecialResource's and the recipe's label namespace."""
    a = node("a", **{COUNT: "8", "sro.dev/simulated-gpu.product": "SRO-Simulated-H100-80GB"})
    mine = sr(name="simulated-gpu")
    plan = reconcile(observed([a], the_sr=mine), NS, NOW)
    assert [r.name for r in plan.rows] == ["a"]
    assert set(plan.node_patches["a"].labels) == {driver_revision_label("simulated-gpu")}
    gone = reconcile(observed([node("b", opt_in=False, **{COUNT: "8"})], the_sr=mine), NS, NOW)
    assert "b" not in gone.node_patches


def test_a_validation_pods_inputs_and_name_are_the_digests_written_before_the_per_pass_memo() -> None:
    """The inputs annotation and a per-node pod's name are now computed with the node-independent
    part made once per pass (Context.memo, rendering.node_suffix): they must stay the very digests
    an older operator wrote, or an upgrade of sro would recreate every validation pod."""
    from sro.operator.rendering import hash_prefix, short_hash, short_hash_after, slug

    ctx = context()
    pods = [ready_pod(s, "node-7", uid=f"uid-{s}") for s in (DRIVER, RUNTIME, DEVICE_PLUGIN)]
    for state in (s for s in STATES if isinstance(s, ValidationState)):
        st = ctx.spec.state(state.name)
        uids = sorted(p.uid for p in pods if p.state in state.after)
        old = short_hash(
            state.check, ctx.state_image(state.name), ctx.recipe, st, ctx.spec.cuda_sample, uids, length=12
        )
        assert state.inputs(ctx, "node-7", pods) == old
        assert state.inputs(ctx, "node-7", pods) == old  # the memo's second use
        assert state.pod_name(ctx, "Node_7.example") == (
            f"sro-{SR}-{state.name}-{slug('Node_7.example', 20)}-{short_hash('Node_7.example', length=5)}"
        )
    assert short_hash_after(hash_prefix("a", 1), ["x"], length=12) == short_hash("a", 1, ["x"], length=12)
    with pytest.raises(ValueError):  # "(" + "x)" is not a 1-tuple's repr: refused, not a wrong digest
        hash_prefix()
    # a replaced Context (another spec) never reuses the memo of the one it came from
    assert replace(ctx, custom={"x": "y"})._memo == {}


# ---- when the next pass comes ---------------------------------------------------------------------
def settled(nodes: list[NodeInfo], pods: list[PodInfo], now: datetime = NOW) -> Plan:
    """The plan once the passes' own patches are on the nodes: the pass that changes nothing."""
    for _ in range(5):
        plan = reconcile(observed(nodes, pods), NS, now)
        if not plan.node_patches:
            return plan
        nodes = [
            replace(with_labels(n, plan), taints=(*n.taints, *plan.node_patches[n.name].add_taints))
            if n.name in plan.node_patches
            else n
            for n in nodes
        ]
    raise AssertionError(f"the passes never settle: {plan.node_patches}")


def test_a_pass_that_changed_something_looks_again_soon() -> None:
    plan = reconcile(observed([node("a")], []), NS, NOW)
    assert plan.apply and plan.node_patches
    assert plan.requeue == ACTING_REQUEUE


def test_a_node_that_stays_broken_is_not_polled() -> None:
    """Its pods' and its node's changes come as watch events; a timer every few seconds would keep
    the pass and its API reads running for as long as it is broken, at 1,000 nodes too."""
    crash = replace(
        ready_pod(DRIVER, "a"), ready=False, phase="Running", reason="CrashLoopBackOff", restarts=4
    )
    plan = settled([node("a")], [crash])
    assert plan.rows[0].failing == DRIVER and not plan.rows[0].validated
    assert not plan.create_pods and not plan.delete_pods
    assert plan.requeue == SETTLED_REQUEUE


def test_a_failed_validation_wakes_the_pass_when_its_pause_is_over() -> None:
    a = node("a")
    pods = [ready_pod(DRIVER, "a")]
    bad = validation_pod(
        observed([a], pods), DRIVER_VALIDATION, "a", phase="Failed", finished_at=NOW - timedelta(seconds=5)
    )
    plan = settled([a], [*pods, bad])
    assert not plan.delete_pods and not plan.create_pods  # too soon to retry
    assert plan.requeue == pytest.approx((VALIDATION_RETRY - timedelta(seconds=5)).total_seconds())
    due = settled([a], [*pods, bad], NOW + VALIDATION_RETRY)
    assert due.delete_pods == (bad.name,) and due.requeue == ACTING_REQUEUE
