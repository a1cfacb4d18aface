"""The driver-upgrade state machine over recorded cluster states with several nodes.

Each test writes the nodes (their revision label, upgrade record, cordon), the pods on them and the
scan pod as the operator would observe them, runs one pass, and checks what it decides: which nodes
start (the limits, the order), what is evicted (and what never), when the driver label moves, when
a node fails and what that stops. Nothing here talks to a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sro.api.names import driver_revision_label, upgrade_annotation, upgrade_state_label
from sro.api.specparsing import parse_spec
from sro.operator.admission import resolve_recipe
from sro.operator.observed import NodeInfo, PodInfo, SpecialResourceInfo, WorkloadPod, workload_from_json
from sro.operator.reconcile import reconcile
from sro.operator.release import release
from sro.operator.rendering import Context
from sro.operator.upgrade.machine import Machine, NodeFacts, UpgradePlan, max_unavailable
from sro.operator.upgrade.record import (
    CORDONED,
    DONE,
    DRIVER_REPLACED,
    FAILED,
    PODS_EVICTED,
    UNCORDONED,
    UPGRADE_REQUIRED,
    WAITING_FOR_JOBS,
    Record,
)
from sro.operator.upgrade.revision import driver_revision
from sro.operator.upgrade.scan import SCAN_RETRY, scan_pod_name

NS = "sro-system"
SR = "gpus"
IMAGE = "localhost/sro:test"
NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
STAMP = "2026-11-22T12:00:00Z"
REV_KEY = driver_revision_label(SR)
STATE_KEY = upgrade_state_label(SR)
ANN = upgrade_annotation(SR)
GPU = "sro.dev/simulated-gpu"


def sr(version: str = "555.0-sim", **policy: Any) -> SpecialResourceInfo:
    spec = {"recipe": "simulated-gpu", "driver": {"version": version, "upgradePolicy": policy}}
    return SpecialResourceInfo(name=SR, uid="uid-gpus", spec=spec)


def ctx_of(the_sr: SpecialResourceInfo) -> Context:
    spec = parse_spec(the_sr.name, the_sr.spec)
    return Context(the_sr.name, the_sr.uid, spec, resolve_recipe(spec, None), NS, IMAGE)


OLD = driver_revision(ctx_of(sr("550.0-sim")))
NEW = driver_revision(ctx_of(sr()))


def node(name: str, rev: str = OLD, record: Record | None = None, cordoned: bool = False) -> NodeInfo:
    labels = {REV_KEY: rev}
    annotations = {}
    if record is not None:
        labels[STATE_KEY] = record.state
        annotations[ANN] = record.to_json()
    return NodeInfo(name, uid=f"uid-{name}", labels=labels, annotations=annotations, unschedulable=cordoned)


def rec(state: str, ago: int = 0, **kw: Any) -> Record:
    when = (NOW - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Record(state, OLD, NEW, {UPGRADE_REQUIRED: when, state: when}, **{"cordoned": True, **kw})


def facts(n: NodeInfo, validated: bool = True, **kw: Any) -> NodeFacts:
    return NodeFacts(node=n, validated=validated, driver_ready=validated, **kw)


def run(the_sr: SpecialResourceInfo, *fs: NodeFacts, now: datetime = NOW) -> UpgradePlan:
    return Machine(
        ctx_of(the_sr), NEW if the_sr.spec["driver"]["version"] == "555.0-sim" else OLD, now, STAMP
    ).run(fs)


def state_of(plan: UpgradePlan, name: str) -> str:
    record = plan.nodes[name].record
    return record.state if record else ""


def workload(name: str, device: bool = True, **kw: Any) -> WorkloadPod:
    kw = {"controller": "ReplicaSet", **kw}
    return WorkloadPod("apps", name, "a", resources=frozenset({GPU} if device else {"cpu"}), **kw)


# ---- starting: order, limits, pause, autoUpgrade -------------------------------------------------
def test_a_version_change_starts_one_node_in_name_order_and_cordons_it() -> None:
    plan = run(sr(), facts(node("c")), facts(node("a")), facts(node("b")))
    assert [state_of(plan, n) for n in "abc"] == [CORDONED, UPGRADE_REQUIRED, UPGRADE_REQUIRED]
    a = plan.nodes["a"]
    assert a.unschedulable is True and a.record is not None and a.record.cordoned
    assert a.labels[STATE_KEY] == CORDONED and ANN in a.annotations
    assert (
        a.events[0][1] == "UpgradeStarted" and "550.0-sim" in a.events[0][2] and "555.0-sim" in a.events[0][2]
    )
    assert "waiting for its turn" in (plan.nodes["b"].record or rec(DONE)).reason
    assert plan.summary["nodes"] == {CORDONED: 1, UPGRADE_REQUIRED: 2}
    assert {OLD, NEW} <= plan.pinned  # the old driver's DaemonSets stay while nodes run it


def test_an_already_cordoned_node_is_left_cordoned_at_the_end() -> None:
    plan = run(sr(), facts(node("a", cordoned=True), validated=True))
    a = plan.nodes["a"]
    assert state_of(plan, "a") == CORDONED and a.unschedulable is None and a.record and not a.record.cordoned


@pytest.mark.parametrize(
    ("policy", "nodes", "unvalidated", "started"),
    [
        ({"maxParallelUpgrades": 0, "maxUnavailable": 2}, "abcd", "", "ab"),
        ({"maxParallelUpgrades": 0, "maxUnavailable": 2}, "abcd", "d", "ad"),  # d is out already: free
        ({"maxParallelUpgrades": 3, "maxUnavailable": "50%"}, "abcd", "", "ab"),
        ({"maxParallelUpgrades": 1, "maxUnavailable": "100%"}, "abcd", "", "a"),
        ({"maxParallelUpgrades": 0, "maxUnavailable": 1}, "abcd", "c", "c"),  # a and b would be a second
    ],
)
def test_max_unavailable_and_max_parallel_are_honoured(
    policy: Mapping[str, Any], nodes: str, unvalidated: str, started: str
) -> None:
    plan = run(sr(**policy), *(facts(node(n), validated=n not in unvalidated) for n in nodes))
    assert "".join(n for n in nodes if state_of(plan, n) == CORDONED) == started


def test_max_unavailable_percentages_round_up() -> None:
    policy = parse_spec(SR, sr(maxUnavailable="10%").spec).driver.upgrade_policy
    assert max_unavailable(policy, 3) == 1 and max_unavailable(policy, 11) == 2


def test_nodes_in_progress_count_against_the_limits() -> None:
    plan = run(sr(), facts(node("a", record=rec(PODS_EVICTED))), facts(node("b")))
    assert state_of(plan, "b") == UPGRADE_REQUIRED


def test_paused_starts_nothing_holds_nodes_before_eviction_and_finishes_the_rest() -> None:
    the_sr = sr(paused=True)
    plan = run(
        the_sr,
        facts(node("a")),
        facts(node("b", record=rec(WAITING_FOR_JOBS)), workloads=()),
        facts(node("c", rev=NEW, record=rec(DRIVER_REPLACED))),
    )
    assert state_of(plan, "a") == UPGRADE_REQUIRED and "paused" in plan.summary["blocked"]
    assert (
        state_of(plan, "b") == WAITING_FOR_JOBS and "paused" in (plan.nodes["b"].record or rec(DONE)).reason
    )
    assert state_of(plan, "c") == DONE and plan.nodes["c"].unschedulable is False
    # resumed: the next pass starts a
    plan = run(sr(), facts(node("a")), facts(node("b", record=rec(WAITING_FOR_JOBS)), workloads=()))
    assert state_of(plan, "b") == PODS_EVICTED and state_of(plan, "a") == UPGRADE_REQUIRED


def test_auto_upgrade_off_leaves_nodes_on_their_driver() -> None:
    plan = run(sr(autoUpgrade=False), facts(node("a")))
    assert state_of(plan, "a") == UPGRADE_REQUIRED and "autoUpgrade" in plan.summary["blocked"]
    assert REV_KEY not in plan.nodes["a"].labels


def test_a_new_node_gets_the_new_driver_without_an_upgrade() -> None:
    bare = NodeInfo("new", labels={})
    plan = run(sr(), facts(bare, validated=False))
    assert plan.nodes["new"].labels == {REV_KEY: NEW} and plan.nodes["new"].record is None


# ---- a node's steps --------------------------------------------------------------------------------
def test_waiting_for_jobs_then_evicting_only_what_uses_the_device() -> None:
    the_sr = sr(waitForCompletion={"podSelector": "app=train"})
    job = workload("job", device=False, labels={"app": "train"}, controller="Job")
    n = node("a", record=rec(WAITING_FOR_JOBS))
    plan = run(the_sr, facts(n, workloads=(job,)))
    assert (
        state_of(plan, "a") == WAITING_FOR_JOBS and "apps/job" in (plan.nodes["a"].record or rec(DONE)).reason
    )
    pods = (
        replace(job, phase="Succeeded"),
        workload("infer"),  # uses the device: evicted
        workload("web", device=False),  # does not: stays (no drain asked)
        workload("plugin-like", controller="DaemonSet"),  # DaemonSet pods never
        workload("leaving", deleting=True),  # evicted already: not asked again
    )
    plan = run(the_sr, facts(n, workloads=pods))
    assert state_of(plan, "a") == PODS_EVICTED
    assert plan.nodes["a"].evict == (("apps", "infer"),)
    record = plan.nodes["a"].record
    assert record is not None and record.evicted == ("apps/infer",) and "apps/leaving" in record.reason
    assert not plan.nodes["a"].create_pods  # no scan while pods are still there


def test_wait_for_completion_timeout_goes_on() -> None:
    the_sr = sr(waitForCompletion={"podSelector": "app=train", "timeoutSeconds": 60})
    job = workload("job", labels={"app": "train"}, controller="Job")
    plan = run(the_sr, facts(node("a", record=rec(WAITING_FOR_JOBS, ago=61)), workloads=(job,)))
    assert state_of(plan, "a") == PODS_EVICTED and plan.nodes["a"].evict == (("apps", "job"),)


def test_drain_selector_bare_pods_and_empty_dirs() -> None:
    the_sr = sr(drain={"enable": True, "podSelector": "tier!=system"})
    pods = (
        workload("web", device=False),
        workload("sys", device=False, labels={"tier": "system"}),
        workload("bare", controller=""),
        workload("scratch", empty_dir=True),
    )
    plan = run(the_sr, facts(node("a", record=rec(PODS_EVICTED)), workloads=pods))
    assert plan.nodes["a"].evict == (("apps", "web"),)
    reason = (plan.nodes["a"].record or rec(DONE)).reason
    assert "apps/bare (no controller would recreate it: set drain.force)" in reason
    assert "apps/scratch (it has an emptyDir volume: set drain.deleteEmptyDir)" in reason
    forced = sr(drain={"enable": True, "podSelector": "tier!=system", "force": True, "deleteEmptyDir": True})
    plan = run(forced, facts(node("a", record=rec(PODS_EVICTED)), workloads=pods))
    assert set(plan.nodes["a"].evict) == {("apps", "web"), ("apps", "bare"), ("apps", "scratch")}


def test_evictions_that_do_not_finish_fail_the_node_and_stop_the_rollout() -> None:
    plan = run(
        sr(drain={"timeoutSeconds": 30}),
        facts(node("a", record=rec(PODS_EVICTED, ago=31)), workloads=(workload("infer"),)),
        facts(node("b")),
    )
    assert state_of(plan, "a") == FAILED and state_of(plan, "b") == UPGRADE_REQUIRED
    record = plan.nodes["a"].record
    assert record is not None and "apps/infer" in record.reason and "PodDisruptionBudget" in record.reason
    assert plan.nodes["a"].unschedulable is None  # left cordoned
    assert plan.nodes["a"].events[-1][:2] == ("Warning", "UpgradeFailed")
    assert "node a failed" in plan.summary["blocked"]


def test_pods_not_read_yet_means_wait() -> None:
    plan = run(sr(), facts(node("a", record=rec(CORDONED))))  # workloads=None: not listed this pass
    assert state_of(plan, "a") == CORDONED and not plan.nodes["a"].evict


def scan(the_sr: SpecialResourceInfo, n: NodeInfo, phase: str, inputs: str = "", **kw: Any) -> PodInfo:
    """The scan pod the machine asked for on node `n` (its inputs copied from a pass that created it)."""
    if not inputs:
        made = run(the_sr, facts(n, workloads=())).nodes[n.name].create_pods
        inputs = made[0]["metadata"]["annotations"]["sro.dev/inputs"]
    return PodInfo(
        scan_pod_name(ctx_of(the_sr), n.name), n.name, "upgrade-scan", phase=phase,
        annotations={"sro.dev/inputs": inputs}, **kw,
    )  # fmt: skip


def test_no_pods_left_runs_the_holder_scan_on_the_node() -> None:
    n = node("a", record=rec(PODS_EVICTED))
    plan = run(sr(), facts(n, workloads=()))
    [pod] = plan.nodes["a"].create_pods
    spec = pod["spec"]
    assert spec["nodeName"] == "a" and spec["hostPID"] is True
    caps = spec["containers"][0]["securityContext"]["capabilities"]
    assert "SYS_PTRACE" in caps["add"] and caps["drop"] == ["ALL"]
    assert pod["metadata"]["labels"]["sro.dev/state"] == "upgrade-scan"
    assert {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]


def test_a_process_holding_the_device_blocks_with_its_pid_until_it_exits() -> None:
    n = node("a", record=rec(PODS_EVICTED))
    message = '{"holders":[{"pid":4242,"exe":"python3","holds":"/dev/sro-simgpu0"}]}'
    held = scan(sr(), n, "Failed", message=message, finished_at=NOW - timedelta(seconds=1))
    plan = run(sr(), facts(n, workloads=(), scan=held))
    record = plan.nodes["a"].record
    assert record is not None and record.state == PODS_EVICTED
    assert "process 4242 (python3) holds /dev/sro-simgpu0" in record.reason
    assert plan.nodes["a"].events[-1][1] == "UpgradeBlocked"
    assert not plan.nodes["a"].delete_pods  # looked at again after a pause
    later = run(sr(), facts(n, workloads=(), scan=held), now=NOW + SCAN_RETRY)
    assert later.nodes["a"].delete_pods == (held.name,)
    assert REV_KEY not in later.nodes["a"].labels


def test_a_clean_scan_moves_the_driver_label_to_the_new_revision() -> None:
    n = node("a", record=rec(PODS_EVICTED))
    plan = run(sr(), facts(n, workloads=(), scan=scan(sr(), n, "Succeeded")))
    assert state_of(plan, "a") == DRIVER_REPLACED
    assert plan.nodes["a"].labels[REV_KEY] == NEW and plan.nodes["a"].delete_pods


def test_a_scan_from_another_attempt_is_replaced() -> None:
    n = node("a", record=rec(PODS_EVICTED))
    plan = run(sr(), facts(n, workloads=(), scan=scan(sr(), n, "Succeeded", inputs="stale")))
    assert state_of(plan, "a") == PODS_EVICTED and plan.nodes["a"].delete_pods
    assert REV_KEY not in plan.nodes["a"].labels


def test_validated_on_the_new_driver_uncordons_and_is_done() -> None:
    n = node("a", rev=NEW, record=rec(DRIVER_REPLACED))
    waiting = run(sr(), facts(n, validated=False, failing="driver-validation: Validating"))
    assert state_of(waiting, "a") == DRIVER_REPLACED
    assert "driver-validation" in (waiting.nodes["a"].record or rec(DONE)).reason
    plan = run(sr(), facts(n))
    assert state_of(plan, "a") == DONE and plan.nodes["a"].unschedulable is False
    record = plan.nodes["a"].record
    assert record is not None and {"validated", UNCORDONED, DONE} <= set(record.steps)
    assert not plan.busy


def test_a_driver_that_never_validates_fails_goes_back_and_stops_the_rollout() -> None:
    n = node("a", rev=NEW, record=rec(DRIVER_REPLACED, ago=601))
    plan = run(sr(), facts(n, validated=False, failing="driver: ErrImageNeverPull"), facts(node("b")))
    assert state_of(plan, "a") == FAILED and plan.nodes["a"].labels[REV_KEY] == OLD
    assert "ErrImageNeverPull" in (plan.nodes["a"].record or rec(DONE)).reason
    assert state_of(plan, "b") == UPGRADE_REQUIRED and OLD in plan.pinned
    # still failed on the next pass: nothing starts
    failed = plan.nodes["a"].record
    assert failed is not None
    again = run(sr(), facts(node("a", rev=OLD, record=failed, cordoned=True)), facts(node("b")))
    assert state_of(again, "a") == FAILED and state_of(again, "b") == UPGRADE_REQUIRED
    # retried (what `sro upgrade retry a` writes): a starts again, still cordoned by us
    retried = replace(failed, state=UPGRADE_REQUIRED, steps={UPGRADE_REQUIRED: STAMP})
    plan = run(sr(), facts(node("a", rev=OLD, record=retried, cordoned=True)), facts(node("b")))
    record = plan.nodes["a"].record
    assert record is not None and record.state == CORDONED and record.cordoned


def test_a_new_version_after_a_failure_starts_over() -> None:
    failed = Record(FAILED, OLD, "555.0-sim-broken0", {FAILED: STAMP}, cordoned=True, reason="x")
    plan = run(sr(), facts(node("a", rev=OLD, record=failed, cordoned=True)))
    record = plan.nodes["a"].record
    assert record is not None and record.state == CORDONED and record.to_rev == NEW and record.cordoned


def test_the_spec_going_back_mid_upgrade_uncordons() -> None:
    midway = rec(WAITING_FOR_JOBS)  # to NEW, but the admin set the old version back
    plan = run(sr("550.0-sim"), facts(node("a", rev=OLD, record=midway, cordoned=True), workloads=()))
    assert state_of(plan, "a") == DONE and plan.nodes["a"].unschedulable is False


def test_an_unreadable_record_starts_afresh() -> None:
    n = replace(node("a"), annotations={ANN: "{not json"})
    assert Record.from_json("{not json") is None and Record.from_json('{"state": "bogus"}') is None
    assert state_of(run(sr(), facts(n)), "a") == CORDONED


# ---- the whole reconcile ---------------------------------------------------------------------------
def test_reconcile_keeps_the_old_driver_daemonset_while_a_node_runs_it() -> None:
    opt_in = {
        "sro.dev/simulated-gpu.enabled": "true",
        "feature.node.kubernetes.io/kernel-version.full": "6.1",
    }
    a = replace(node("a"), labels={**node("a").labels, **opt_in})
    old_ds = ("DaemonSet", "sro-gpus-driver-6-1-old00")
    gone_ds = ("DaemonSet", "sro-gpus-driver-6-1-gone0")
    obs = reconcile_obs([a], owned=(old_ds, gone_ds), revisions={old_ds: OLD, gone_ds: "gone-000000"})
    plan = reconcile(obs, NS, NOW)
    assert old_ds not in plan.delete and gone_ds in plan.delete
    new = [o for o in plan.apply if o["kind"] == "DaemonSet" and "-driver-" in o["metadata"]["name"]]
    assert [o["metadata"]["labels"]["sro.dev/driver-revision"] for o in new] == [NEW]
    terms = new[0]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    exprs = terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"
    ]
    assert {"key": REV_KEY, "operator": "In", "values": [NEW]} in exprs
    assert "--driver-version=555.0-sim" in new[0]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert plan.node_patches["a"].labels[STATE_KEY] in (UPGRADE_REQUIRED, CORDONED)
    assert plan.status["driverUpgrade"]["target"] == "555.0-sim"


def reconcile_obs(nodes: list[NodeInfo], **kw: Any) -> Any:
    from sro.operator.observed import Observed

    return Observed(sr=sr(), nodes=tuple(nodes), image=IMAGE, **kw)


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"maxUnavailable": 0}, "maxUnavailable"),
        ({"maxUnavailable": "150%"}, "maxUnavailable"),
        ({"maxUnavailable": -2}, "maxUnavailable"),
        ({"maxParallelUpgrades": -1}, "maxParallelUpgrades"),
        ({"drain": {"timeoutSeconds": 0}}, "drain.timeoutSeconds"),
        ({"drain": {"podSelector": "app in (a,b)"}}, "drain.podSelector"),
        ({"paused": "yes"}, "paused"),
    ],
)
def test_bad_upgrade_policies_are_degraded_naming_the_field(policy: Mapping[str, Any], field: str) -> None:
    plan = reconcile(reconcile_obs([]).__class__(sr=sr(**policy), nodes=(), image=IMAGE), NS, NOW)
    degraded = next(c for c in plan.status["conditions"] if c["type"] == "Degraded")
    assert not plan.deployable and f"spec.driver.upgradePolicy.{field}" in degraded["message"]


def test_release_uncordons_a_node_sro_cordoned() -> None:
    n = node("a", record=rec(PODS_EVICTED), cordoned=True)
    patch = release(SR, GPU, n)
    assert patch is not None and patch.unschedulable is False
    assert patch.labels == {REV_KEY: None, STATE_KEY: None} and patch.annotations == {ANN: None}
    theirs = node("b", record=rec(PODS_EVICTED, cordoned=False), cordoned=True)
    patch = release(SR, GPU, theirs)
    assert patch is not None and patch.unschedulable is None


def test_workload_records_from_pod_json() -> None:
    doc = {
        "metadata": {
            "name": "w",
            "namespace": "apps",
            "labels": {"app": "x"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "w-1", "controller": True}],
        },
        "spec": {
            "nodeName": "a",
            "containers": [{"name": "c", "resources": {"limits": {GPU: "1"}}}],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        },
        "status": {"phase": "Running"},
    }
    w = workload_from_json(doc)
    assert (w.key, w.node, w.controller, w.empty_dir, GPU in w.resources) == (
        "apps/w",
        "a",
        "ReplicaSet",
        True,
        True,
    )


def test_processes_the_scan_could_not_inspect_do_not_block_but_are_said() -> None:
    n = node("a", record=rec(PODS_EVICTED))
    partial = scan(sr(), n, "Failed", message='{"holders":[],"unreadable":[1]}', finished_at=NOW)
    plan = run(sr(), facts(n, workloads=(), scan=partial))
    assert state_of(plan, "a") == DRIVER_REPLACED
    assert any("could not be inspected (pid 1)" in e[2] for e in plan.nodes["a"].events)
    broken = scan(sr(), n, "Failed", message="Traceback: boom", finished_at=NOW)
    plan = run(sr(), facts(n, workloads=(), scan=broken))
    assert (
        state_of(plan, "a") == PODS_EVICTED
        and "the holder scan failed: Traceback: boom" in (plan.nodes["a"].record or rec(DONE)).reason
    )


def test_upgrade_metrics_follow_the_counts_and_go_with_the_special_resource() -> None:
    from sro.operator import metrics

    def value(state: str) -> float | None:
        return metrics.REGISTRY.get_sample_value(
            "sro_operator_driver_upgrade_nodes", {"specialresource": "m", "state": state}
        )

    metrics.record_upgrades("m", {CORDONED: 1, UPGRADE_REQUIRED: 2})
    metrics.record_upgrades("m", {DONE: 3})
    assert (value(CORDONED), value(UPGRADE_REQUIRED), value(DONE)) == (0.0, 0.0, 3.0)
    metrics.forget("m")
    assert value(DONE) is None


def _deleted_pod(*states: str) -> dict[str, Any]:
    """A deleted pod's JSON with one container status per state (`running`/`terminated`)."""
    return {
        "metadata": {"name": "w", "namespace": "apps", "deletionTimestamp": STAMP},
        "spec": {"nodeName": "a", "containers": [{"name": f"c{i}"} for i in range(len(states))]},
        "status": {
            "phase": "Running",
            "initContainerStatuses": [{"name": "init", "state": {"terminated": {"exitCode": 0}}}],
            "containerStatuses": [{"name": f"c{i}", "state": {s: {}}} for i, s in enumerate(states)],
        },
    }


def test_a_deleted_pod_is_finished_once_every_container_stopped_not_when_its_object_goes() -> None:
    assert workload_from_json(_deleted_pod("terminated", "terminated")).finished
    assert not workload_from_json(_deleted_pod("terminated", "running")).finished
    alive = _deleted_pod("terminated")
    del alive["metadata"]["deletionTimestamp"]  # a crash-looping pod is not leaving
    assert not workload_from_json(alive).finished
    unreported = _deleted_pod()
    unreported["status"] = {"phase": "Running"}  # deleted before the kubelet reported a container
    assert not workload_from_json(unreported).finished


def test_the_holder_scan_starts_while_a_stopped_evicted_pod_object_is_still_there() -> None:
    n = node("a", record=rec(PODS_EVICTED))
    left = workload("infer", deleting=True, stopped=True)
    plan = run(sr(), facts(n, workloads=(left,)))
    [pod] = plan.nodes["a"].create_pods
    assert pod["metadata"]["labels"]["sro.dev/state"] == "upgrade-scan" and not plan.nodes["a"].evict
    still = run(sr(), facts(n, workloads=(workload("infer", deleting=True),)))
    assert not still.nodes["a"].create_pods and "evicting 1 pod" in still.nodes["a"].record.reason
