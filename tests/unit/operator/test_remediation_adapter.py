"""The remediation wired into the reconcile, over recorded cluster states: one node's repair pass by pass.

Each pass observes the cluster as the operator would (the node with what the previous pass wrote,
its pods, the health report its NodeFeature carries) and checks the plan: the GpuHealthy condition,
the cordon and the record, which pod is evicted (the faulty device's holder only), the reset pod
and its token, the revalidation, the uncordon — and that a SpecialResource without
`spec.remediation` gets nothing of it. The cache's NodeFeature decoding and the upgrade's yield to
a node under repair are checked here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sro.api.names import (
    DEVICE_PLUGIN,
    DEVICE_PLUGIN_VALIDATION,
    DRIVER,
    DRIVER_VALIDATION,
    MONITORING,
    RUNTIME,
    STATE_NAMES,
    state_label,
    upgrade_annotation,
    validated_label,
)
from sro.api.nfd_crds import NODE_NAME_LABEL
from sro.api.timestamps import stamp
from sro.devices.faultclasses import CONDITION
from sro.devices.healthreport import DeviceFault, HealthReport, to_features
from sro.operator.cluster.cache import ClusterCache
from sro.operator.observed import NodeInfo, Observed, PodInfo, SpecialResourceInfo, WorkloadPod, pod_from_json
from sro.operator.plan import Plan
from sro.operator.reconcile import reconcile
from sro.operator.remediation.pods import TOKEN_ANNOTATION, action_pod_name
from sro.operator.remediation.record import (
    CORDONED,
    DONE,
    EVICTING,
    RESETTING,
    VALIDATING,
    Record,
    read,
    remediation_annotation,
)
from sro.operator.teardown import Remains
from sro.operator.teardown import plan as teardown_plan
from sro.operator.upgrade.machine import Machine as UpgradeMachine
from sro.operator.upgrade.machine import NodeFacts as UpgradeFacts
from sro.operator.upgrade.record import UPGRADE_REQUIRED
from sro.operator.upgrade.record import Record as UpgradeRecord
from tests.unit.operator.test_reconcile import (
    COUNT,
    NOW,
    NS,
    REV,
    SR,
    context,
    node,
    observed,
    ready_pod,
    sr,
    validation_pod,
)

RECIPE = "simulated-gpu"
RESOURCE = "sro.dev/simulated-gpu"
ANN = remediation_annotation(SR)
REMEDY = {"recipe": RECIPE, "remediation": {}}  # the defaults: GpuLost (Xid 79) -> reset-device


def report(*faults: DeviceFault, boot: str = "boot-1", updated: str = "2026-11-22T12:00:00Z") -> HealthReport:
    return HealthReport(
        recipe=RECIPE,
        resource=RESOURCE,
        node="a",
        boot_id=boot,
        updated=updated,
        devices=tuple(str(i) for i in range(8)),
        faults=faults,
        holders={"3": ("team/train-3",), "5": ("team/train-5",)},
    )


FAULT = DeviceFault("3", (79,), "GPU has fallen off the bus")


def workload(name: str, deleting: bool = False) -> WorkloadPod:
    return WorkloadPod(
        "team", name, "a", resources=frozenset({RESOURCE}), controller="ReplicaSet", deleting=deleting
    )


class Cluster:
    """One validated node `a` and what the passes wrote to it; the test moves pods and reports."""

    def __init__(self, spec: Mapping[str, Any] = REMEDY) -> None:
        self.sr = sr(dict(spec))
        n = node("a", **{COUNT: "8"})
        labels = {
            **n.labels,
            **{state_label(SR, s): "ready" for s in STATE_NAMES},
            validated_label(SR): "true",
        }
        self.node = replace(n, uid="uid-a", labels=labels)
        self.pods = [ready_pod(s, "a") for s in (DRIVER, RUNTIME, DEVICE_PLUGIN, MONITORING)]
        obs = self.observe()
        before = NOW - timedelta(hours=1)
        self.pods.append(validation_pod(obs, DRIVER_VALIDATION, "a", finished_at=before))
        obs = self.observe()
        self.pods.append(validation_pod(obs, DEVICE_PLUGIN_VALIDATION, "a", finished_at=before))
        self.health: HealthReport | None = None
        self.workloads: list[WorkloadPod] | None = None
        self.now = NOW
        self.run(0)  # settled: the walk's own annotation written
        self.health = report()

    def observe(self) -> Observed:
        health = {"a": {RECIPE: self.health}} if getattr(self, "health", None) else {}
        extra: dict[str, Any] = {"health": health}
        if getattr(self, "workloads", None) is not None:
            extra.update(workloads=tuple(self.workloads or ()), workload_nodes=("a",))
        return observed([self.node], list(self.pods), self.sr, **extra)

    def run(self, seconds: int = 5) -> Plan:
        """One pass, `seconds` after the last; what it writes to the node and its pods is applied."""
        self.now += timedelta(seconds=seconds)
        plan = reconcile(self.observe(), NS, self.now)
        patch = plan.node_patches.get("a")
        if patch is not None:
            ann = {**self.node.annotations}
            for k, v in patch.annotations.items():
                if v is None:
                    ann.pop(k, None)
                else:
                    ann[k] = v
            labels = {k: v for k, v in {**self.node.labels, **patch.labels}.items() if v is not None}
            cordon = self.node.unschedulable if patch.unschedulable is None else patch.unschedulable
            self.node = replace(self.node, annotations=ann, labels=labels, unschedulable=cordon)
        if "a" in plan.node_conditions:
            self.node = replace(self.node, gpu_condition=dict(plan.node_conditions["a"]))
        self.pods = [p for p in self.pods if p.name not in plan.delete_pods]
        for doc in plan.create_pods:
            md = doc["metadata"]
            self.pods.append(
                PodInfo(md["name"], "a", md["labels"].get("sro.dev/state", ""), annotations=md["annotations"])
            )
        return plan

    @property
    def record(self) -> Record | None:
        return read(self.node, SR)

    def finish(self, name: str, phase: str = "Succeeded") -> None:
        self.pods = [
            replace(p, phase=phase, finished_at=self.now + timedelta(seconds=1)) if p.name == name else p
            for p in self.pods
        ]


def reasons(plan: Plan) -> list[str]:
    return [e.reason for e in plan.events]


def test_a_reported_fault_is_repaired_pass_by_pass() -> None:
    c = Cluster()
    c.health = report(FAULT)
    plan = c.run()
    # the fact first: the condition names the class and the device
    cond = plan.node_conditions["a"]
    assert (cond["type"], cond["status"], cond["reason"]) == (CONDITION, "False", "GpuLost")
    assert "3" in cond["message"] and "79" in cond["message"]
    # then the repair: cordoned, its record written, started and evicting (its pods read next pass)
    assert plan.node_patches["a"].unschedulable is True
    assert c.record is not None and c.record.state == EVICTING and c.record.cordoned
    assert c.record.steps.keys() >= {CORDONED, EVICTING}
    assert "RemediationStarted" in reasons(plan) and plan.events[0].uid == "uid-a"
    assert plan.evict == ()
    assert plan.status["remediation"]["nodes"] == {EVICTING: 1}
    assert plan.status["nodes"][0]["remediation"]["step"] == EVICTING
    assert plan.requeue == 3.0

    c.workloads = [workload("train-3"), workload("train-5")]
    plan = c.run()
    assert plan.evict == (("team", "train-3"),)  # the faulty device's holder, not device 5's
    assert "a" not in plan.node_conditions  # written once: the node has it now
    assert c.record is not None and c.record.state == EVICTING

    c.workloads = [workload("train-3", deleting=True), workload("train-5")]
    assert c.run().evict == ()  # on its way out: never asked twice

    c.workloads = [workload("train-5")]
    plan = c.run()
    assert c.record is not None and c.record.state == RESETTING
    token = c.record.steps[RESETTING]
    name = action_pod_name(context(c.sr), "a", token)
    [created] = [p for p in plan.create_pods if p["metadata"]["name"] == name]
    assert created["metadata"]["annotations"][TOKEN_ANNOTATION] == token
    assert created["spec"]["nodeName"] == "a"
    assert created["metadata"]["annotations"]["sro.dev/remediation-devices"] == "3"

    plan = c.run()  # the pod is there, still running: not made twice
    assert not [p for p in plan.create_pods if p["metadata"]["name"] == name]

    c.finish(name)
    old_validation = next(p.name for p in c.pods if p.state == DEVICE_PLUGIN_VALIDATION)
    plan = c.run()
    assert c.record is not None and c.record.state == VALIDATING
    assert name in plan.delete_pods  # its step is over
    assert old_validation in plan.delete_pods  # validated again, after the reset
    assert not any(p.state == DRIVER_VALIDATION for p in c.pods if p.name in plan.delete_pods)
    assert plan.node_patches["a"].unschedulable is None  # still cordoned

    # the walk makes the validation pod again; it passes; the report no longer has the fault
    c.health = report()
    plan = c.run()
    cond = plan.node_conditions["a"]  # the fact follows the report at once
    assert (cond["status"], cond["reason"]) == ("True", "NoGpuFault")
    assert any(p.state == DEVICE_PLUGIN_VALIDATION for p in c.pods)
    assert c.record is not None and c.record.state == VALIDATING  # not validated since the reset yet
    c.pods = [p for p in c.pods if p.state != DEVICE_PLUGIN_VALIDATION]
    c.pods.append(validation_pod(c.observe(), DEVICE_PLUGIN_VALIDATION, "a", finished_at=c.now))
    plan = c.run()
    assert plan.node_patches["a"].unschedulable is False  # what sro cordoned it uncordons
    assert "RemediationSucceeded" in reasons(plan)
    assert plan.node_conditions == {}  # said once
    assert "remediation" not in plan.status["nodes"][0]
    assert c.node.unschedulable is False


def test_a_special_resource_without_remediation_gets_nothing_of_it() -> None:
    c = Cluster({"recipe": RECIPE})
    c.health = report(FAULT)
    with_fault = reconcile(c.observe(), NS, NOW)
    c.health = None
    without = reconcile(c.observe(), NS, NOW)
    assert with_fault == without
    assert with_fault.node_conditions == {} and with_fault.remediation is None
    assert "remediation" not in with_fault.status
    assert "a" not in with_fault.node_patches


def test_a_dry_run_writes_the_condition_and_says_what_it_would_do() -> None:
    c = Cluster({"recipe": RECIPE, "remediation": {"dryRun": True}})
    c.health = report(FAULT)
    plan = c.run()
    assert plan.node_conditions["a"]["status"] == "False"  # the condition is a fact
    assert "a" not in plan.node_patches and plan.evict == () and plan.create_pods == ()
    [event] = plan.events
    assert event.reason == "RemediationDryRun" and "team/train-3" in event.message


def test_an_application_xid_changes_nothing() -> None:
    c = Cluster()
    c.health = report(DeviceFault("3", (13,), "graphics engine exception"))
    plan = c.run()
    assert plan.node_conditions == {} and "a" not in plan.node_patches and plan.events == ()


def _held(cordoned_by_sro: bool) -> NodeInfo:
    rec = Record(EVICTING, "GpuLost", "reset-device", ("3",), (79,), cordoned=cordoned_by_sro)
    return NodeInfo("a", uid="uid-a", annotations={ANN: rec.to_json()}, unschedulable=True)


def test_release_on_deletion_uncordons_only_what_sro_cordoned() -> None:
    the_sr = SpecialResourceInfo(SR, "uid-gpus", dict(REMEDY))
    admin = NodeInfo("b", unschedulable=True)  # an admin's cordon, no record
    ours, theirs = _held(True), replace(_held(False), name="c")
    plan = teardown_plan(the_sr, Remains(nodes=(ours, admin, theirs)))
    assert plan.node_patches["a"].unschedulable is False and plan.node_patches["a"].annotations == {ANN: None}
    assert "b" not in plan.node_patches
    assert plan.node_patches["c"].unschedulable is None and plan.node_patches["c"].annotations == {ANN: None}


def test_a_node_that_leaves_the_selection_is_released_and_its_action_pods_go() -> None:
    c = Cluster()
    left = replace(_held(True), labels={"kubernetes.io/hostname": "a"})
    stray = PodInfo("sro-gpus-remediation-a-x", "a", "remediation", annotations={TOKEN_ANNOTATION: "t"})
    plan = reconcile(observed([left], [stray], c.sr), NS, NOW)
    assert plan.node_patches["a"].unschedulable is False
    assert plan.node_patches["a"].annotations.get(ANN, "kept") is None
    assert stray.name in plan.delete_pods


def test_remediation_removed_from_the_spec_releases_its_nodes() -> None:
    c = Cluster({"recipe": RECIPE})
    c.node = replace(c.node, annotations={ANN: _held(True).annotations[ANN]}, unschedulable=True)
    plan = c.run()
    assert plan.node_patches["a"].unschedulable is False and plan.node_patches["a"].annotations[ANN] is None


def test_a_driver_upgrade_does_not_start_on_a_node_under_remediation() -> None:
    ctx = context(SpecialResourceInfo(SR, "uid-gpus", {"recipe": RECIPE, "driver": {"version": "999.0-sim"}}))
    up = UpgradeRecord(UPGRADE_REQUIRED, REV, "new", {UPGRADE_REQUIRED: "2026-11-22T11:00:00Z"})
    base = NodeInfo(
        "a", labels={"sro.dev/gpus.driver-revision": REV}, annotations={upgrade_annotation(SR): up.to_json()}
    )
    repairing = replace(base, annotations={**base.annotations, ANN: _held(True).annotations[ANN]})
    from sro.operator.upgrade.revision import driver_revision

    target = driver_revision(ctx)
    free = UpgradeMachine(ctx, target, NOW, "2026-11-22T12:00:00Z").run(
        [UpgradeFacts(base, True, driver_ready=True)]
    )
    held = UpgradeMachine(ctx, target, NOW, "2026-11-22T12:00:00Z").run(
        [UpgradeFacts(repairing, True, driver_ready=True)]
    )
    assert free.nodes["a"].record is not None and free.nodes["a"].record.state != UPGRADE_REQUIRED
    assert held.nodes["a"].record is not None and held.nodes["a"].record.state == UPGRADE_REQUIRED


def test_the_cache_decodes_health_reports_from_node_features_and_says_when_they_change() -> None:
    cache = ClusterCache.__new__(ClusterCache)
    cache.health, cache.health_listeners = {}, []
    told: list[int] = []
    cache.health_listeners.append(lambda: told.append(1))
    doc = {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {"name": "a", "namespace": NS, "labels": {NODE_NAME_LABEL: "a"}},
        "spec": {"features": to_features([report(FAULT)])},
    }
    other = {"metadata": {"name": "b", "labels": {NODE_NAME_LABEL: "b"}}, "spec": {"features": {}}}
    cache.set_node_features([doc, other, {"garbage": True}])
    assert cache.health["a"][RECIPE].faults == (FAULT,) and "b" not in cache.health
    assert told == [1]
    cache.set_node_features([doc, other])
    assert told == [1]  # nothing changed: no pass woken
    cache.set_node_features([other])
    assert cache.health == {} and told == [1, 1]


def test_the_status_fits_the_crd_and_sro_status_shows_the_node_under_remediation() -> None:
    from sro.api.crd import status_schema
    from sro.operator.status_table import node_rows
    from tests.unit.operator.test_status_schema import empty_strings, fits

    c = Cluster()
    c.health = report(FAULT)
    plan = c.run()
    assert fits(status_schema(), plan.status) == [] and empty_strings(plan.status) == []
    assert plan.status["remediation"]["breaker"]["limit"] == 1
    shown = replace(c.sr, status=plan.status)
    [row] = node_rows(shown, [c.node])
    assert "remediation GpuLost on device(s) 3: evicting" in row[-1]


def test_the_condition_counts_every_recipes_report_on_the_node() -> None:
    """Two SpecialResources on one node write the same condition, not each its own in turn."""
    c = Cluster()
    other = replace(report(DeviceFault("f0", (79,), "lost")), recipe="my-fpga", devices=("f0",), holders={})
    c.health = report()  # this recipe's devices are fine; the other recipe's are not
    obs = c.observe()
    obs = replace(obs, health={"a": {RECIPE: report(), "my-fpga": other}})
    plan = reconcile(obs, NS, NOW)
    assert plan.node_conditions["a"]["status"] == "False" and "f0" in plan.node_conditions["a"]["message"]
    assert "a" not in plan.node_patches or plan.node_patches["a"].unschedulable is None  # not its to repair


def test_the_teardown_of_a_remediating_special_resource_takes_its_condition_away() -> None:
    cond = {"type": CONDITION, "status": "False", "reason": "GpuLost"}
    a, b = replace(_held(True), gpu_condition=cond), NodeInfo("b")
    plan = teardown_plan(SpecialResourceInfo(SR, "uid-gpus", dict(REMEDY)), Remains(nodes=(a, b)))
    assert plan.node_conditions == {"a": {"type": CONDITION, "$patch": "delete"}}  # merged away by type
    other = teardown_plan(SpecialResourceInfo(SR, "uid-gpus", {"recipe": RECIPE}), Remains(nodes=(a, b)))
    assert other.node_conditions == {}  # not its condition


def plugin_started(c: Cluster, at: datetime | None) -> None:
    """The node's device plugin (re)started at `at` (None: its container is not running)."""
    c.pods = [replace(p, running_since=at) if p.state == DEVICE_PLUGIN else p for p in c.pods]


def test_a_fault_a_stopped_plugin_reported_starts_no_repair_until_the_running_one_reports_it() -> None:
    c = Cluster()
    plugin_started(c, c.now + timedelta(seconds=30))  # a new plugin, after the report was written
    c.health = report(FAULT)
    for _ in range(3):
        plan = c.run()
        assert "a" not in plan.node_patches or plan.node_patches["a"].unschedulable is None
        assert c.record is None and plan.evict == () and "RemediationStarted" not in reasons(plan)
    # no plugin running on the node at all: its last report is believed no more
    plugin_started(c, None)
    plan = c.run()
    assert c.record is None and "RemediationStarted" not in reasons(plan)
    c.pods = [p for p in c.pods if p.state != DEVICE_PLUGIN]
    assert c.run().evict == () and c.record is None
    # the running plugin's own report of the same fault: repaired as any other
    c.pods.append(replace(ready_pod(DEVICE_PLUGIN, "a"), running_since=c.now))
    c.health = report(FAULT, updated=stamp(c.now + timedelta(seconds=1)))
    plan = c.run()
    assert plan.node_patches["a"].unschedulable is True
    assert c.record is not None and c.record.state == EVICTING and "RemediationStarted" in reasons(plan)


def test_a_stopped_plugins_report_neither_ends_a_revalidation_nor_clears_a_fault() -> None:
    c = Cluster()
    c.health = report(FAULT)
    c.run()
    c.workloads = [workload("train-5")]
    c.run()
    name = action_pod_name(context(c.sr), "a", c.record.steps[RESETTING] if c.record else "")
    c.finish(name)
    c.run()
    assert c.record is not None and c.record.state == VALIDATING
    # the validations pass again, but the report on the node is the plugin's before it restarted
    c.health = report()
    plugin_started(c, c.now + timedelta(seconds=10))
    c.pods = [p for p in c.pods if p.state != DEVICE_PLUGIN_VALIDATION]
    c.pods.append(
        validation_pod(c.observe(), DEVICE_PLUGIN_VALIDATION, "a", finished_at=c.now + timedelta(seconds=12))
    )
    plan = c.run(15)
    assert c.record is not None and c.record.state == VALIDATING and c.node.unschedulable
    assert "health report" in c.record.reason
    # the running plugin's report: the device is healthy, the node goes back into service
    c.health = report(updated=stamp(c.now + timedelta(seconds=1)))
    plan = c.run()
    assert plan.node_patches["a"].unschedulable is False and "RemediationSucceeded" in reasons(plan)


def test_a_finished_repairs_fault_a_restarted_plugin_reports_again_is_not_a_new_one() -> None:
    # restart-workload leaves the device unhealthy: the fault stays in the report after the repair
    c = Cluster({"recipe": RECIPE, "remediation": {"actions": {"gpuLost": "restart-workload"}}})
    c.health = report(FAULT)
    c.run()
    c.workloads = [workload("train-5")]
    for _ in range(6):
        c.run()
        if c.record is not None and c.record.state == VALIDATING:
            c.pods = [p for p in c.pods if p.state != DEVICE_PLUGIN_VALIDATION]
            c.pods.append(validation_pod(c.observe(), DEVICE_PLUGIN_VALIDATION, "a", finished_at=c.now))
    assert c.record is not None and c.record.state == DONE and c.record.devices == ("3",)
    # the plugin restarts: for a second the node carries its predecessor's report, then its own
    plugin_started(c, c.now + timedelta(seconds=10))
    c.run(5)
    assert c.record is not None and c.record.devices == ("3",)  # not taken as cleared
    c.health = report(FAULT, updated=stamp(c.now + timedelta(seconds=10)))
    plan = c.run(10)
    assert "RemediationStarted" not in reasons(plan) and not c.node.unschedulable


def test_a_pods_running_since_is_its_newest_container_start_while_all_run() -> None:
    def pod(*states: dict[str, Any]) -> PodInfo:
        statuses = [{"name": f"c{i}", "state": s} for i, s in enumerate(states)]
        return pod_from_json({"metadata": {"name": "p"}, "spec": {"nodeName": "a"},
                              "status": {"phase": "Running", "containerStatuses": statuses}})  # fmt: skip

    early, late = "2026-11-22T11:00:00Z", "2026-11-22T11:30:05Z"
    assert pod({"running": {"startedAt": early}}, {"running": {"startedAt": late}}).running_since == datetime(
        2026, 11, 22, 11, 30, 5, tzinfo=UTC
    )
    assert (
        pod({"running": {"startedAt": early}}, {"waiting": {"reason": "CrashLoopBackOff"}}).running_since
        is None
    )
    assert pod().running_since is None
