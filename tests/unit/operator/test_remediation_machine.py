"""The remediation machine over simulated fleets: faults in, cordons, evictions, resets and events out.

Each test writes the nodes (their record, cordon, upgrade), the pods and devices' holders, and each
node's fault reports as the operator would read them, runs passes of the machine — applying its node
patches between passes as the wiring would — and checks what it decides. Nothing talks to a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sro.api.names import upgrade_annotation
from sro.api.specialresource import RemediationSpec
from sro.api.timestamps import stamp
from sro.devices.faultclasses import GPU_LOST, Fault, fault_of
from sro.operator.observed import NodeInfo, WorkloadPod
from sro.operator.remediation.machine import Machine, NodeFacts, NodeRemediation, RemediationPlan, release
from sro.operator.remediation.record import (
    ACTIVE,
    DONE,
    EVICTING,
    FAILED,
    LIMIT,
    REBOOTING,
    RESETTING,
    VALIDATING,
    WAITING,
    Record,
    read,
    remediating,
    remediation_annotation,
)
from sro.operator.upgrade.record import PODS_EVICTED
from sro.operator.upgrade.record import Record as UpgradeRecord

SR = "gpus"
RESOURCE = "sro.dev/gpu"
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
KEY = remediation_annotation(SR)
LOST = Fault("3", GPU_LOST, 79)


def spec(**kw: Any) -> RemediationSpec:
    return RemediationSpec(**kw)


def run(s: RemediationSpec, *fs: NodeFacts, now: datetime = NOW) -> RemediationPlan:
    return Machine(s, SR, RESOURCE, now).run(fs)


def apply(n: NodeInfo, step: NodeRemediation) -> NodeInfo:
    """The node after the wiring carried out the step's node patch."""
    ann = dict(n.annotations)
    for k, v in step.annotations.items():
        if v is None:
            ann.pop(k, None)
        else:
            ann[k] = v
    cordon = n.unschedulable if step.unschedulable is None else step.unschedulable
    return replace(n, annotations=ann, unschedulable=cordon)


def pod(name: str, **kw: Any) -> WorkloadPod:
    base: dict[str, Any] = {"controller": "ReplicaSet", "resources": frozenset({RESOURCE})}
    return WorkloadPod("default", name, "n1", **{**base, **kw})


def test_a_lost_gpu_under_reset_device_walks_cordon_evict_reset_validate_uncordon() -> None:
    s = spec()
    n = NodeInfo("n1")
    on3, on5 = pod("on-3"), pod("on-5")
    holders = {"3": ("default/on-3",), "5": ("default/on-5",)}
    f = NodeFacts(n, faults=(LOST,), holders=holders)
    step = run(s, f).nodes["n1"]
    assert step.unschedulable is True and step.record is not None
    assert step.record.state == EVICTING and step.record.cordoned
    assert step.condition is not None and step.condition["status"] == "False"
    assert step.condition["reason"] == GPU_LOST and "device 3 (Xid 79)" in step.condition["message"]
    f = replace(f, condition=step.condition)  # what the node shows from now on
    assert run(s, f).nodes["n1"].condition is None  # unchanged: nothing to write
    assert [e[1] for e in step.events] == ["RemediationStarted", "RemediationEvicting"]
    assert step.evict == ()  # its pods are read from the next pass on
    n = apply(n, step)
    # the pods are read: only the pod on device 3 is evicted, never the one on device 5
    step = run(s, replace(f, node=n, workloads=(on3, on5))).nodes["n1"]
    assert step.evict == (("default", "on-3"),)
    n = apply(n, step)
    # on its way out: not asked again
    step = run(s, replace(f, node=n, workloads=(replace(on3, deleting=True), on5))).nodes["n1"]
    assert step.evict == () and step.record is not None and step.record.state == EVICTING
    n = apply(n, step)
    # gone: the device is reset (asked every pass until the node reports it, with one token)
    step = run(s, replace(f, node=n, workloads=(on5,)), now=NOW + timedelta(seconds=5)).nodes["n1"]
    assert step.record is not None and step.record.state == RESETTING
    assert step.reset == ("3",) and step.token
    n = apply(n, step)
    reset_at = NOW + timedelta(seconds=8)
    step = run(
        s, replace(f, node=n, faults=(), resets={"3": reset_at}), now=NOW + timedelta(seconds=9)
    ).nodes["n1"]
    assert step.record is not None and step.record.state == VALIDATING and step.revalidate
    n = apply(n, step)
    # validations from before the reset do not count
    stale = replace(f, node=n, faults=(), resets={"3": reset_at}, validated_at=NOW)
    step = run(s, stale, now=NOW + timedelta(seconds=10)).nodes["n1"]
    assert step.record is not None and step.record.state == VALIDATING and step.unschedulable is None
    fresh = replace(stale, validated_at=NOW + timedelta(seconds=20))
    step = run(s, fresh, now=NOW + timedelta(seconds=21)).nodes["n1"]
    assert step.unschedulable is False  # sro cordoned it: sro uncordons it
    assert step.record is not None and step.record.state == DONE and not step.record.cordoned
    assert "RemediationSucceeded" in [e[1] for e in step.events]
    assert step.condition is not None and step.condition["status"] == "True"


def test_a_fault_storm_on_40_percent_of_50_nodes_remediates_at_most_25_percent() -> None:
    s = spec(max_concurrent_nodes=50)  # the default breaker (25 %) is the only limit
    nodes = [NodeInfo(f"n{i:02d}") for i in range(50)]
    faulty = {n.name for n in nodes[::5]} | {n.name for n in nodes[1::5]}
    assert len(faulty) == 20

    def facts(ns: Sequence[NodeInfo]) -> list[NodeFacts]:
        return [NodeFacts(n, faults=(LOST,) if n.name in faulty else (), workloads=()) for n in ns]

    for i in range(3):  # the next passes start no more while the first 13 are under way
        plan = run(s, *facts(nodes), now=NOW + timedelta(seconds=i))
        states = {name: step.record.state for name, step in plan.nodes.items() if step.record is not None}
        under_way = sorted(n for n, st in states.items() if st in ACTIVE)
        assert len(under_way) == 13, states  # ceil(50 * 25 %)
        assert sorted(n for n, st in states.items() if st == WAITING) == sorted(faulty - set(under_way))
        assert sum(1 for st in plan.nodes.values() if st.unschedulable) <= 13 if i == 0 else True
        assert plan.summary["breaker"] == {"limit": 13, "unavailable": 13, "tripped": True}
        waiting = plan.nodes[sorted(faulty - set(under_way))[0]].record
        assert waiting is not None and "circuit breaker" in waiting.reason
        nodes = [apply(n, plan.nodes[n.name]) for n in nodes]
    assert sum(1 for n in nodes if n.unschedulable) == 13


def test_nodes_cordoned_by_sro_for_an_upgrade_count_against_the_breaker() -> None:
    up = UpgradeRecord(PODS_EVICTED, "a", "b", cordoned=True).to_json()
    nodes = [NodeInfo(f"n{i}") for i in range(8)]  # 25 % of 8: 2
    nodes[7] = replace(nodes[7], annotations={upgrade_annotation(SR): up}, unschedulable=True)
    fs = [NodeFacts(n, faults=(LOST,) if i < 4 else ()) for i, n in enumerate(nodes)]
    plan = run(spec(max_concurrent_nodes=8), *fs)
    started = [n for n, st in plan.nodes.items() if st.record is not None and st.record.state in ACTIVE]
    assert started == ["n0"]


def test_max_concurrent_nodes_holds_the_rest_waiting_for_their_turn() -> None:
    fs = [NodeFacts(NodeInfo(f"n{i}"), faults=(LOST,)) for i in range(4)]
    plan = run(spec(), *fs)  # maxConcurrentNodes 1
    states = {n: st.record.state for n, st in plan.nodes.items() if st.record is not None}
    assert [n for n, st in states.items() if st in ACTIVE] == ["n0"]
    rec = plan.nodes["n1"].record
    assert rec is not None and rec.state == WAITING and "maxConcurrentNodes" in rec.reason
    assert not plan.summary["breaker"]["tripped"]


def test_a_stopped_plugins_report_neither_cancels_a_waiting_node_nor_writes_the_condition() -> None:
    fs = [NodeFacts(NodeInfo(f"n{i}"), faults=(LOST,)) for i in range(2)]
    plan = run(spec(), *fs)
    n0 = replace(fs[0], node=apply(fs[0].node, plan.nodes["n0"]))  # under way
    n1 = apply(NodeInfo("n1"), plan.nodes["n1"])
    assert plan.nodes["n1"].record is not None and plan.nodes["n1"].record.state == WAITING
    # n1's plugin restarted: its report (the fault) is its predecessor's, so no fault is known
    stale = NodeFacts(n1, faults=(), report_current=False, condition=plan.nodes["n1"].condition)
    step = run(spec(), n0, stale).nodes["n1"]
    assert step.record is not None and step.record.state == WAITING  # not "the fault cleared"
    assert step.condition is None and step.events == ()
    # the running plugin reports no fault: now it cleared (and nothing is left to remember)
    step = run(spec(), n0, replace(stale, report_current=True)).nodes["n1"]
    assert step.record is None and [e[1] for e in step.events] == ["RemediationCancelled"]
    assert step.condition is not None and step.condition["status"] == "True"


def flap(s: RemediationSpec, n: NodeInfo, now: datetime) -> tuple[NodeInfo, NodeRemediation]:
    """One fault (restart-workload: evict and done in two passes), then its clearing."""
    step = run(s, NodeFacts(n, faults=(LOST,), workloads=()), now=now).nodes["n1"]
    n = apply(n, step)
    step = run(s, NodeFacts(n, faults=(), workloads=()), now=now + timedelta(seconds=1)).nodes["n1"]
    return apply(n, step), step


def test_a_flapping_node_counts_each_attempt_and_stops_at_the_limit() -> None:
    s = spec(actions={GPU_LOST: "restart-workload"})
    n = NodeInfo("n1")
    for i in range(3):
        n, step = flap(s, n, NOW + timedelta(minutes=i))
        rec = read(n, SR)
        assert rec is not None and rec.state == DONE and len(rec.attempts) == i + 1
        assert not n.unschedulable  # restart-workload never cordons
    step = run(s, NodeFacts(n, faults=(LOST,)), now=NOW + timedelta(minutes=5)).nodes["n1"]
    assert step.record is not None and step.record.state == LIMIT
    assert step.unschedulable is True and step.record.cordoned
    assert [e[:2] for e in step.events] == [("Warning", "RemediationLimit")]
    assert "maxAttempts" in step.record.reason and "sro remediation retry n1" in step.record.reason
    n = apply(n, step)
    # held: the fault clearing does not uncordon it; nothing more starts
    step = run(s, NodeFacts(n, faults=()), now=NOW + timedelta(minutes=6)).nodes["n1"]
    assert step.unschedulable is None and step.record is not None and step.record.state == LIMIT
    # a person retries it: uncordoned, the fault still there starts afresh next pass
    n = replace(n, annotations={KEY: step.record.retried(stamp(NOW)).to_json()})
    step = run(s, NodeFacts(n, faults=()), now=NOW + timedelta(minutes=7)).nodes["n1"]
    assert step.unschedulable is False


def test_attempts_older_than_the_window_are_forgotten() -> None:
    s = spec(actions={GPU_LOST: "restart-workload"}, window_seconds=600)
    n = NodeInfo("n1")
    for i in range(3):
        n, _ = flap(s, n, NOW + timedelta(minutes=i))
    step = run(s, NodeFacts(n, faults=(LOST,)), now=NOW + timedelta(minutes=20)).nodes["n1"]
    assert step.record is not None and step.record.state == EVICTING and len(step.record.attempts) == 1


def test_an_application_xid_changes_nothing() -> None:
    assert fault_of("3", 13) is None  # the health report carries no fault for it
    n = NodeInfo("n1")
    plan = run(spec(), NodeFacts(n, faults=(), workloads=(pod("on-3"),), holders={"3": ("default/on-3",)}))
    step = plan.nodes["n1"]
    assert step == NodeRemediation(record=None)


def test_a_dry_run_only_says_what_would_happen() -> None:
    n = NodeInfo("n1")
    f = NodeFacts(n, faults=(LOST,), workloads=(pod("on-3"),), holders={"3": ("default/on-3",)})
    step = run(spec(dry_run=True), f).nodes["n1"]
    assert step.record is None and step.annotations == {}
    assert step.unschedulable is None and step.evict == () and step.reset == () and not step.reboot
    ((kind, reason, message),) = step.events
    assert (kind, reason) == ("Normal", "RemediationDryRun")
    assert "would cordon the node, evict default/on-3, reset device(s) 3" in message
    assert step.condition is not None and step.condition["status"] == "False"  # the fact is reported


def test_paused_starts_nothing_new_but_a_node_under_way_finishes() -> None:
    s = spec(paused=True, max_concurrent_nodes=5)
    under_way = Record(
        EVICTING, GPU_LOST, "reset-device", ("3",), (79,), {EVICTING: stamp(NOW)}, cordoned=True
    )
    busy = NodeInfo("n0", annotations={KEY: under_way.to_json()}, unschedulable=True)
    plan = run(s, NodeFacts(busy, faults=(LOST,), workloads=()), NodeFacts(NodeInfo("n1"), faults=(LOST,)))
    rec = plan.nodes["n1"].record
    assert rec is not None and rec.state == WAITING and "paused" in rec.reason
    assert plan.nodes["n1"].unschedulable is None
    assert plan.nodes["n0"].record is not None and plan.nodes["n0"].record.state == RESETTING


def test_a_fault_clearing_before_the_node_starts_leaves_nothing() -> None:
    fs = [NodeFacts(NodeInfo(f"n{i}"), faults=(LOST,)) for i in range(2)]
    plan = run(spec(), *fs)
    n1 = apply(fs[1].node, plan.nodes["n1"])
    assert read(n1, SR) is not None
    step = run(spec(), NodeFacts(n1, faults=())).nodes["n1"]
    assert step.annotations == {KEY: None} and step.unschedulable is None
    assert [e[1] for e in step.events] == ["RemediationCancelled"]


def test_resuming_from_a_record_mid_eviction_repeats_no_eviction_and_uncordons() -> None:
    # the operator died after asking for on-3's eviction and writing the record
    mid = Record(
        EVICTING,
        GPU_LOST,
        "reset-device",
        ("3",),
        (79,),
        {EVICTING: stamp(NOW)},
        attempts=(stamp(NOW),),
        cordoned=True,
        evicted=("default/on-3",),
    )
    n = NodeInfo("n1", annotations={KEY: mid.to_json()}, unschedulable=True)
    terminating = pod("on-3", deleting=True)
    f = NodeFacts(n, faults=(LOST,), workloads=(terminating,), holders={"3": ("default/on-3",)})
    step = run(spec(), f, now=NOW + timedelta(seconds=30)).nodes["n1"]
    assert step.evict == () and step.events == ()
    assert step.record is not None and step.record.attempts == (stamp(NOW),)  # no new attempt
    n = apply(n, step)
    step = run(spec(), replace(f, node=n, workloads=()), now=NOW + timedelta(seconds=31)).nodes["n1"]
    assert step.record is not None and step.record.state == RESETTING
    n = apply(n, step)
    later = NOW + timedelta(seconds=40)
    done = replace(f, node=n, faults=(), workloads=(), resets={"3": later}, validated_at=later)
    for i in range(2):
        step = run(spec(), done, now=later + timedelta(seconds=i)).nodes["n1"]
        n = apply(n, step)
        done = replace(done, node=n, validated_at=later + timedelta(seconds=i))
    assert not n.unschedulable and read(n, SR) is not None and read(n, SR).state == DONE  # type: ignore[union-attr]


def test_an_admins_cordon_is_never_lifted() -> None:
    n = NodeInfo("n1", unschedulable=True)  # the admin's own maintenance
    f = NodeFacts(n, faults=(LOST,), workloads=())
    step = run(spec(), f).nodes["n1"]
    assert step.record is not None and not step.record.cordoned and step.unschedulable is None
    n = apply(n, step)
    t = NOW + timedelta(seconds=1)
    for i in range(4):
        now = t + timedelta(seconds=i)
        step = run(spec(), replace(f, node=n, faults=(), resets={"3": now}, validated_at=now), now=now).nodes[
            "n1"
        ]
        assert step.unschedulable is None
        n = apply(n, step)
    assert read(n, SR) is not None and read(n, SR).state == DONE  # type: ignore[union-attr]
    assert n.unschedulable


def test_it_yields_to_a_driver_upgrade_in_progress_and_the_upgrade_to_it() -> None:
    up = UpgradeRecord(PODS_EVICTED, "a", "b", cordoned=True).to_json()
    n = NodeInfo("n1", annotations={upgrade_annotation(SR): up}, unschedulable=True)
    step = run(spec(), NodeFacts(n, faults=(LOST,), workloads=())).nodes["n1"]
    assert step.record is not None and step.record.state == WAITING and "upgrade" in step.record.reason
    assert step.unschedulable is None and step.evict == ()
    assert not remediating(apply(n, step), SR)
    # the other way round: a node under remediation is what the upgrade machine waits for
    started = apply(NodeInfo("n2"), run(spec(), NodeFacts(NodeInfo("n2"), faults=(LOST,))).nodes["n2"])
    assert remediating(started, SR)


def test_evictions_blocked_past_the_timeout_fail_the_node_cordoned() -> None:
    mid = Record(EVICTING, GPU_LOST, "reset-device", ("3",), (79,), {EVICTING: stamp(NOW)}, cordoned=True)
    n = NodeInfo("n1", annotations={KEY: mid.to_json()}, unschedulable=True)
    f = NodeFacts(n, faults=(LOST,), workloads=(pod("on-3"),), holders={"3": ("default/on-3",)})
    step = run(spec(), f, now=NOW + timedelta(seconds=301)).nodes["n1"]
    assert step.record is not None and step.record.state == FAILED and step.unschedulable is None
    assert [e[:2] for e in step.events] == [("Warning", "RemediationFailed")]


def test_drain_and_reset_evicts_every_pod_using_the_resource_and_reboot_drains_the_node() -> None:
    pods = (
        pod("on-3"),
        pod("on-5"),
        pod("web", resources=frozenset({"cpu"})),
        pod("ds", controller="DaemonSet"),
    )
    holders = {"3": ("default/on-3",)}

    def evicted(action: str) -> set[str]:
        s = spec(actions={GPU_LOST: action})
        n = apply(NodeInfo("n1"), run(s, NodeFacts(NodeInfo("n1"), faults=(LOST,))).nodes["n1"])
        step = run(s, NodeFacts(n, faults=(LOST,), workloads=pods, holders=holders)).nodes["n1"]
        return {name for _, name in step.evict}

    assert evicted("restart-workload") == {"on-3"}
    assert evicted("reset-device") == {"on-3"}
    assert evicted("drain-and-reset") == {"on-3", "on-5"}
    assert evicted("reboot") == {"on-3", "on-5", "web"}


def test_a_reboot_is_asked_for_until_the_node_boots_again() -> None:
    s = spec(actions={GPU_LOST: "reboot"})
    n = apply(NodeInfo("n1"), run(s, NodeFacts(NodeInfo("n1"), faults=(LOST,))).nodes["n1"])
    f = NodeFacts(n, faults=(LOST,), workloads=(), boot_id="boot-1")
    step = run(s, f).nodes["n1"]
    assert step.record is not None and step.record.state == REBOOTING and step.reboot and step.token
    n = apply(n, step)
    step = run(s, replace(f, node=n)).nodes["n1"]
    assert step.reboot and step.record is not None and step.record.state == REBOOTING
    n = apply(n, step)
    step = run(s, replace(f, node=n, boot_id="boot-2", faults=())).nodes["n1"]
    assert not step.reboot and step.record is not None and step.record.state == VALIDATING


def status_of(step: NodeRemediation) -> Mapping[str, Any] | None:
    return step.to_status()


def test_the_status_row_entry_names_class_devices_action_step_and_attempts() -> None:
    step = run(spec(), NodeFacts(NodeInfo("n1"), faults=(LOST,))).nodes["n1"]
    entry = status_of(step)
    assert entry is not None
    assert {k: entry[k] for k in ("class", "devices", "action", "step", "attempts")} == {
        "class": GPU_LOST,
        "devices": ["3"],
        "action": "reset-device",
        "step": EVICTING,
        "attempts": 1,
    }


def test_release_takes_the_record_off_and_uncordons_only_what_sro_cordoned() -> None:
    held = Record(LIMIT, GPU_LOST, "reset-device", ("3",), cordoned=True).to_json()
    ours = release(NodeInfo("n1", annotations={KEY: held}, unschedulable=True), SR)
    assert ours.annotations == {KEY: None} and ours.unschedulable is False
    admins = Record(LIMIT, GPU_LOST, "reset-device", ("3",), cordoned=False).to_json()
    theirs = release(NodeInfo("n1", annotations={KEY: admins}, unschedulable=True), SR)
    assert theirs.annotations == {KEY: None} and theirs.unschedulable is None
    assert release(NodeInfo("n2"), SR) == NodeRemediation(record=None)
