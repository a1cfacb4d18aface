"""After a driver upgrade only what the new driver invalidates is walked again (recorded states).

Each test writes one node just after the driver label moved (`driver-replaced`): every state was
ready on the old driver, the runtime, device plugin and exporter pods still run; the pass's plan
says which labels become `revalidating`, which pods are restarted or (re)created and in what order.
The per-node order promise is checked step by step: driver → driver validation → device plugin →
device-plugin validation, while the runtime, monitoring and feature discovery keep running, ready.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sro.api.names import (
    DEVICE_PLUGIN,
    DEVICE_PLUGIN_VALIDATION,
    DRIVER,
    DRIVER_VALIDATION,
    FEATURE_DISCOVERY,
    MONITORING,
    READY,
    REVALIDATING,
    RUNTIME,
    STATE_NAMES,
    driver_revision_label,
    state_label,
    upgrade_annotation,
    upgrade_state_label,
    validated_label,
)
from sro.api.specparsing import parse_spec
from sro.operator.admission import resolve_recipe
from sro.operator.observed import NodeInfo, Observed, PodInfo, SpecialResourceInfo
from sro.operator.plan import Plan
from sro.operator.reconcile import reconcile
from sro.operator.rendering import Context
from sro.operator.states import INPUTS_ANNOTATION, KERNEL_LABEL, STATES, ValidationState
from sro.operator.upgrade.machine import Machine, NodeFacts
from sro.operator.upgrade.record import DONE, DRIVER_REPLACED, PODS_EVICTED, UPGRADE_REQUIRED, Record
from sro.operator.upgrade.revision import driver_revision
from sro.operator.upgrade.rewalk import AFTER, invalidated, rewalk_of, stale_pods
from sro.operator.upgrade.scan import scan_pod_name

NS = "sro-system"
SR = "gpus"
IMAGE = "localhost/sro:test"
NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
STAMP = "2026-11-22T12:00:00Z"
OPT_IN = "sro.dev/simulated-gpu.enabled"
COUNT = "sro.dev/simulated-gpu.count"


def sr(version: str = "555.0-sim", recipe: str = "simulated-gpu", **driver: Any) -> SpecialResourceInfo:
    return SpecialResourceInfo(SR, "uid-gpus", {"recipe": recipe, "driver": {"version": version, **driver}})


def ctx_of(the_sr: SpecialResourceInfo) -> Context:
    spec = parse_spec(the_sr.name, the_sr.spec)
    return Context(the_sr.name, the_sr.uid, spec, resolve_recipe(spec, None), NS, IMAGE)


OLD = driver_revision(ctx_of(sr("550.0-sim")))
NEW = driver_revision(ctx_of(sr()))
PLUGIN_UID = "plugin-old"


def replaced_node(state: str = DRIVER_REPLACED, **labels: str) -> NodeInfo:
    """Node `a` on the new revision, every state labelled as it was on the old driver."""
    record = Record(
        state, OLD, NEW, {UPGRADE_REQUIRED: STAMP, state: STAMP}, cordoned=True, stale=(PLUGIN_UID,)
    )
    all_labels = {
        "kubernetes.io/hostname": "a", KERNEL_LABEL: "6.1", OPT_IN: "true", COUNT: "2",
        driver_revision_label(SR): NEW, upgrade_state_label(SR): state, validated_label(SR): "true",
        **{state_label(SR, s): READY for s in STATE_NAMES}, **labels,
    }  # fmt: skip
    return NodeInfo("a", uid="uid-a", labels=all_labels, annotations={upgrade_annotation(SR): record.to_json()},
                    unschedulable=True)  # fmt: skip


def pod(state: str, uid: str, revision: str = "", ready: bool = True, **kw: Any) -> PodInfo:
    return PodInfo(
        f"{state}-{uid}", "a", state, uid=uid, phase="Running", ready=ready, revision=revision, **kw
    )


def vname(name: str) -> str:
    v = next(s for s in STATES if s.name == name)
    assert isinstance(v, ValidationState)
    return v.pod_name(ctx_of(sr()), "a")


def validation(obs: Observed, name: str, phase: str = "Succeeded", inputs: str = "") -> PodInfo:
    """The validation pod the operator made for the current inputs (or `inputs`), in `phase`."""
    ctx = ctx_of(obs.sr)
    v = next(s for s in STATES if s.name == name)
    assert isinstance(v, ValidationState)
    live = [p for p in obs.pods if p.uid != PLUGIN_UID]
    annotations = {INPUTS_ANNOTATION: inputs or v.inputs(ctx, "a", live)}
    return PodInfo(v.pod_name(ctx, "a"), "a", name, uid=f"{name}-uid", phase=phase, annotations=annotations)


OPERANDS = [pod(RUNTIME, "runtime-1"), pod(DEVICE_PLUGIN, PLUGIN_UID), pod(MONITORING, "exporter-1")]
OLD_CHECKS = [  # the validations that passed on the old driver
    PodInfo(vname(s), "a", s, uid=f"{s}-old", phase="Succeeded", annotations={INPUTS_ANNOTATION: "old"})
    for s in (DRIVER_VALIDATION, DEVICE_PLUGIN_VALIDATION)
]  # fmt: skip


def observe(
    pods: list[PodInfo], n: NodeInfo | None = None, the_sr: SpecialResourceInfo | None = None
) -> Observed:
    return Observed(sr=the_sr or sr(), nodes=(n or replaced_node(),), pods=tuple(pods), image=IMAGE)


def labels(plan: Plan, n: NodeInfo | None = None) -> dict[str, str]:
    out = dict((n or replaced_node()).labels)
    for k, v in plan.node_patches["a"].labels.items() if "a" in plan.node_patches else ():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return {s: out.get(state_label(SR, s), "") for s in STATE_NAMES}


KEPT = {RUNTIME: READY, MONITORING: READY, FEATURE_DISCOVERY: READY}


# ---- the rules -------------------------------------------------------------------------------------
def test_what_a_new_driver_invalidates_depends_on_the_backend() -> None:
    bound = {DRIVER, DRIVER_VALIDATION, DEVICE_PLUGIN, DEVICE_PLUGIN_VALIDATION}
    assert invalidated(ctx_of(sr())) == bound  # the simulated exporter re-reads its inventory
    # a real NVIDIA driver: the exporter maps the old libnvidia-ml, so it is restarted too
    assert invalidated(ctx_of(sr("555.0", recipe="nvidia-gpu"))) == bound | {MONITORING}
    assert invalidated(ctx_of(sr("555.0", recipe="nvidia-gpu", mode="simulated"))) == bound
    # the runtime's hook and CDI specs follow the driver's files by themselves; discovery is a label
    assert RUNTIME not in invalidated(ctx_of(sr("555.0", recipe="nvidia-gpu")))


def test_the_order_promise_is_kept_for_what_is_walked_again() -> None:
    order = [DRIVER, DRIVER_VALIDATION, DEVICE_PLUGIN, DEVICE_PLUGIN_VALIDATION]
    for i, s in enumerate(order[1:], 1):
        assert set(order[:i]) <= set(AFTER[s]), s  # each waits for every one before it
    assert DEVICE_PLUGIN not in AFTER[MONITORING]  # the exporter's restart runs beside the plugin's


def test_only_a_node_whose_driver_was_just_replaced_walks_the_smaller_chain() -> None:
    ctx = ctx_of(sr())
    again = rewalk_of(ctx, replaced_node())
    assert again is not None and again.stale == {PLUGIN_UID}
    for state in (PODS_EVICTED, DONE):
        assert rewalk_of(ctx, replaced_node(state)) is None
    assert rewalk_of(ctx, replace(replaced_node(), annotations={})) is None


def test_the_record_keeps_the_stale_pods_and_reads_old_records() -> None:
    rec = Record(DRIVER_REPLACED, OLD, NEW, {DRIVER_REPLACED: STAMP}, stale=("u1", "u2"))
    back = Record.from_json(rec.to_json())
    assert back is not None and back.stale == ("u1", "u2")
    old = Record.from_json('{"state": "driver-replaced", "from": "a", "to": "b"}')
    assert old is not None and old.stale == ()


def test_the_driver_label_moves_with_the_plugin_pods_of_before_recorded() -> None:
    ctx = ctx_of(sr())
    n = replace(
        replaced_node(PODS_EVICTED),
        labels={**replaced_node(PODS_EVICTED).labels, driver_revision_label(SR): OLD},
    )
    pods = [*OPERANDS, pod(DRIVER, "driver-old", revision=OLD)]
    stale = stale_pods(ctx, "a", pods)
    assert stale == (PLUGIN_UID,)  # not the runtime's, not the exporter's (simulated), not the driver's
    machine = Machine(ctx, NEW, NOW, STAMP)
    made = machine.run([NodeFacts(n, validated=True, workloads=(), stale=stale)]).nodes["a"].create_pods
    inputs = made[0]["metadata"]["annotations"][INPUTS_ANNOTATION]
    scan = PodInfo(
        scan_pod_name(ctx, "a"),
        "a",
        "upgrade-scan",
        phase="Succeeded",
        annotations={INPUTS_ANNOTATION: inputs},
    )
    step = machine.run([NodeFacts(n, validated=True, workloads=(), scan=scan, stale=stale)]).nodes["a"]
    assert step.record is not None and step.record.state == DRIVER_REPLACED
    assert step.record.stale == (PLUGIN_UID,) and step.labels[driver_revision_label(SR)] == NEW


# ---- the walk, step by step --------------------------------------------------------------------------
def test_while_the_new_driver_starts_the_other_operands_keep_running() -> None:
    old_driver = pod(DRIVER, "driver-old", revision=OLD, deleting=True)
    plan = reconcile(observe([old_driver, *OPERANDS, *OLD_CHECKS]), NS, NOW)
    after = labels(plan)
    assert {s: after[s] for s in KEPT} == KEPT  # their DaemonSets keep their pods
    assert {after[s] for s in (DRIVER, DRIVER_VALIDATION, DEVICE_PLUGIN, DEVICE_PLUGIN_VALIDATION)} == {
        REVALIDATING
    }
    assert plan.node_patches["a"].labels[validated_label(SR)] is None  # not validated meanwhile
    assert not plan.create_pods  # nothing walked before the driver is Ready,
    # but the verdicts on the old driver go now: each new validation starts as soon as it may
    assert set(plan.delete_pods) == {vname(DRIVER_VALIDATION), vname(DEVICE_PLUGIN_VALIDATION)}
    assert all(p.name not in plan.delete_pods for p in OPERANDS)
    [row] = plan.rows
    assert not row.validated and row.failing == DRIVER


def test_the_new_driver_ready_runs_its_validation_first() -> None:
    obs = observe([pod(DRIVER, "driver-new", revision=NEW), *OPERANDS, *OLD_CHECKS])
    plan = reconcile(obs, NS, NOW)
    # the old validation (other inputs) is deleted; its new one follows once it is gone
    assert set(plan.delete_pods) == {vname(DRIVER_VALIDATION), vname(DEVICE_PLUGIN_VALIDATION)}
    assert PLUGIN_UID not in {p for p in plan.delete_pods}  # the plugin waits for the validation
    after = labels(plan)
    assert after[DRIVER] == READY and after[DEVICE_PLUGIN] == REVALIDATING and after[RUNTIME] == READY
    gone = observe([pod(DRIVER, "driver-new", revision=NEW), *OPERANDS, OLD_CHECKS[1]])
    made = reconcile(gone, NS, NOW).create_pods
    assert [p["metadata"]["labels"]["sro.dev/state"] for p in made] == [DRIVER_VALIDATION]


def test_the_driver_validated_restarts_the_plugin_of_before_and_nothing_else() -> None:
    pods = [pod(DRIVER, "driver-new", revision=NEW), *OPERANDS, OLD_CHECKS[1]]
    pods.append(validation(observe(pods), DRIVER_VALIDATION))
    plan = reconcile(observe(pods), NS, NOW)
    # the plugin of before restarts (with the old workload verdict); the runtime and exporter stay
    assert set(plan.delete_pods) == {f"{DEVICE_PLUGIN}-{PLUGIN_UID}", vname(DEVICE_PLUGIN_VALIDATION)}
    after = labels(plan)
    assert after[DRIVER_VALIDATION] == READY and after[DEVICE_PLUGIN] == REVALIDATING
    assert after[DEVICE_PLUGIN_VALIDATION] == REVALIDATING and after[MONITORING] == READY
    assert not plan.create_pods  # the workload validation waits for the new plugin


def test_the_new_plugin_ready_runs_the_workload_validation_then_the_node_is_validated() -> None:
    base = [pod(DRIVER, "driver-new", revision=NEW), pod(RUNTIME, "runtime-1"), pod(MONITORING, "exporter-1")]
    base.append(validation(observe(base), DRIVER_VALIDATION))
    pods = [
        *base,
        pod(DEVICE_PLUGIN, PLUGIN_UID, deleting=True),
        pod(DEVICE_PLUGIN, "plugin-new"),
        OLD_CHECKS[1],
    ]
    plan = reconcile(observe(pods), NS, NOW)
    assert plan.delete_pods == (vname(DEVICE_PLUGIN_VALIDATION),)  # stale inputs: made again
    assert labels(plan)[DEVICE_PLUGIN] == READY
    done = [*pods[:-1]]
    done.append(validation(observe(done), DEVICE_PLUGIN_VALIDATION))
    final = reconcile(observe(done), NS, NOW)
    assert set(labels(final).values()) == {READY}
    assert final.node_patches["a"].labels.get(validated_label(SR)) is None  # kept: "true" as before
    [row] = final.rows
    assert row.validated
    assert (row.upgrade or {}).get("state") != DRIVER_REPLACED  # the machine moves on


def test_on_a_real_driver_the_exporter_restarts_beside_the_plugin() -> None:
    nv = sr("555.0", recipe="nvidia-gpu")
    ctx = ctx_of(nv)
    stale = ("plugin-old", "exporter-old")
    rec = Record(DRIVER_REPLACED, "550.0-x", driver_revision(ctx), {DRIVER_REPLACED: STAMP}, stale=stale)
    n = NodeInfo("a", labels={state_label(SR, s): READY for s in STATE_NAMES},
                 annotations={upgrade_annotation(SR): rec.to_json()})  # fmt: skip
    again = rewalk_of(ctx, n)
    assert again is not None and MONITORING in again.states
    assert not again.waits(MONITORING, {DRIVER, DRIVER_VALIDATION}, list(STATE_NAMES))
    assert again.waits(DEVICE_PLUGIN_VALIDATION, {DRIVER, DRIVER_VALIDATION}, list(STATE_NAMES))
    pods = [pod(DEVICE_PLUGIN, "plugin-old"), pod(MONITORING, "exporter-old"), pod(RUNTIME, "r")]
    assert stale_pods(ctx, "a", pods) == ("exporter-old", "plugin-old")


def test_a_failing_new_driver_tears_down_as_the_first_walk_does() -> None:
    crashing = pod(DRIVER, "driver-new", revision=NEW, ready=False, restarts=5, reason="CrashLoopBackOff")
    plan = reconcile(observe([crashing, *OPERANDS, *OLD_CHECKS]), NS, NOW)
    after = labels(plan)
    assert all(v == "" for v in after.values()), after  # every later DaemonSet leaves the node
    assert plan.rows[0].failed


def test_without_an_upgrade_a_driver_not_ready_still_stops_the_whole_chain() -> None:
    n = replace(replaced_node(), annotations={})
    plan = reconcile(observe([pod(DRIVER, "driver-new", revision=NEW, ready=False), *OPERANDS], n), NS, NOW)
    assert labels(plan, n)[RUNTIME] == "" and labels(plan, n)[MONITORING] == ""
