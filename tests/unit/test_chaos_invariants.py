"""The fault campaign's invariants (issue 25), each rule on recorded facts: one case that holds and
one that breaks it, so a rule that never fires (or always does) fails here, not in a 10-minute run."""

from __future__ import annotations

import json
from typing import Any

from benchmarks.chaos.invariants import (
    KINDS,
    PDB_LAG_S,
    PDB_SETTLE_S,
    ContainerLook,
    Disruption,
    PdbSample,
    cordon_facts,
    device_checks,
    devices_changed,
    double_evictions,
    foreign_device,
    is_ready,
    memory,
    node_leftovers,
    not_converged,
    object_leftovers,
    operator_restarts,
    pdb_broken,
    ready_at,
    selects,
    stale_cordons,
    step_key,
    tracebacks,
)

SR = "simulated-gpu"
G0, G1 = "/dev/sro-simgpu0", "/dev/sro-simgpu1"


def look(seen: set[str], allocated: set[str], cid: str = "c1", at: float = 1.0) -> ContainerLook:
    return ContainerLook(at, "apps/w-1", "main", cid, frozenset(seen), frozenset(allocated))


# ---- devices ---------------------------------------------------------------------------------------
def test_a_container_seeing_only_its_allocated_device_is_fine() -> None:
    assert foreign_device(look({G0}, {G0})) is None
    assert foreign_device(look(set(), {G0})) is None  # not (yet) seen is no foreign device


def test_a_device_never_allocated_is_a_foreign_device() -> None:
    v = foreign_device(look({G0, G1}, {G0}))
    assert v is not None and v.kind == "foreign-device"
    assert G1 in v.detail and "apps/w-1/main" in v.detail


def test_the_same_container_seeing_another_device_set_is_devices_changed() -> None:
    assert devices_changed(look({G0}, {G0}), look({G0}, {G0}, at=3.0)) is None
    v = devices_changed(look({G0}, {G0}), look({G1}, {G1}, at=3.0))
    assert v is not None and v.kind == "devices-changed" and v.at == 3.0


def test_a_restarted_container_with_other_devices_is_not_a_change() -> None:
    assert devices_changed(look({G0}, {G0}, cid="c1"), look({G1}, {G1}, cid="c2")) is None


def test_device_checks_keep_the_last_look_per_container_and_drop_gone_ones() -> None:
    out, kept = device_checks({}, [look({G0}, {G0})])
    assert out == [] and set(kept) == {"c1"}
    out, kept = device_checks(kept, [look({G0, G1}, {G0}, at=2.0)])
    assert [v.kind for v in out] == ["foreign-device", "devices-changed"]
    out, kept = device_checks(kept, [look({G1}, {G1}, cid="c2")])
    assert out == [] and set(kept) == {"c2"}


# ---- cordons ---------------------------------------------------------------------------------------
def rem(state: str, cordoned: bool) -> str:
    return json.dumps({"state": state, "cordoned": cordoned, "steps": {}})


def upg(state: str, cordoned: bool) -> str:
    return json.dumps({"state": state, "from": "a", "to": "b", "steps": {}, "cordoned": cordoned})


def test_cordon_facts_read_sros_records() -> None:
    key_r, key_u = f"sro.dev/{SR}.remediation", f"sro.dev/{SR}.upgrade"
    f = cordon_facts("n", True, {key_r: rem("evicting", True)}, SR)
    assert f.sro_cordoned and f.in_step
    f = cordon_facts("n", True, {key_r: rem("done", True)}, SR)  # done, not yet uncordoned
    assert f.sro_cordoned and not f.in_step
    f = cordon_facts("n", True, {key_r: rem("limit", True)}, SR)  # held for a person on purpose
    assert f.in_step
    f = cordon_facts("n", True, {key_u: upg("done", True)}, SR)  # a finished upgrade's history
    assert not f.sro_cordoned
    f = cordon_facts("n", True, {key_u: upg("pods-evicted", True)}, SR)
    assert f.sro_cordoned and f.in_step
    f = cordon_facts("n", True, {}, SR)  # an admin's cordon
    assert not f.sro_cordoned
    assert not cordon_facts("n", True, {"sro.dev/other.remediation": rem("done", True)}, SR).sro_cordoned


def test_a_cordon_with_a_step_or_within_the_grace_is_fine() -> None:
    key = f"sro.dev/{SR}.remediation"
    busy = cordon_facts("n", True, {key: rem("resetting", True)}, SR)
    out, clock = stale_cordons([busy], {}, 100.0, 30.0)
    assert out == [] and clock == {}
    stale = cordon_facts("n", True, {key: rem("done", True)}, SR)
    out, clock = stale_cordons([stale], {}, 100.0, 30.0)
    out, clock = stale_cordons([stale], clock, 129.0, 30.0)
    assert out == []
    uncordoned = cordon_facts("n", False, {key: rem("done", True)}, SR)
    out, clock = stale_cordons([uncordoned], clock, 200.0, 30.0)
    assert out == [] and clock == {}


def test_sros_cordon_without_a_step_past_the_grace_is_stale_once() -> None:
    stale = cordon_facts("n", True, {f"sro.dev/{SR}.remediation": rem("done", True)}, SR)
    _, clock = stale_cordons([stale], {}, 100.0, 30.0)
    out, clock = stale_cordons([stale], clock, 131.0, 30.0)
    assert [v.kind for v in out] == ["stale-cordon"] and "node n" in out[0].detail
    out, clock = stale_cordons([stale], clock, 140.0, 30.0)
    assert out == []  # one violation per episode


# ---- evictions and the PDB -------------------------------------------------------------------------
def ev(at: float, name: str = "w-1", uid: str = "u1", step: str = "s1", verb: str = "evict") -> Disruption:
    return Disruption(at, "apps", name, uid, step, verb)


def test_one_accepted_eviction_per_pod_and_step_is_fine() -> None:
    assert double_evictions([ev(1.0), ev(2.0, name="w-2", uid="u2"), ev(3.0, step="s2")]) == []
    assert double_evictions([ev(1.0, verb="delete"), ev(2.0)]) == []


def test_a_second_accepted_eviction_of_the_same_pod_and_step_is_a_violation() -> None:
    out = double_evictions([ev(5.0), ev(1.0)])
    assert [v.kind for v in out] == ["double-eviction"] and out[0].at == 5.0
    assert "apps/w-1" in out[0].detail and "4.0 s" in out[0].detail


def pdb(at: float, allowed: int) -> PdbSample:
    return PdbSample(at, allowed, 2 if allowed else 1, 1)


def test_an_eviction_while_the_pdb_allowed_one_is_fine() -> None:
    samples = [pdb(0.0, 1), pdb(10.3, 0)]  # the eviction at 10 makes it 0: the controller's update
    assert pdb_broken([ev(10.0)], samples, "apps") == []
    # allowed only just before the eviction (the watch late): not a violation
    assert pdb_broken([ev(10.0)], [pdb(0.0, 0), pdb(9.8, 1)], "apps") == []
    # another namespace, or no sample before it: nothing said
    assert pdb_broken([ev(10.0)], [pdb(0.0, 0)], "other") == []
    assert pdb_broken([ev(10.0)], [pdb(9.9, 0)], "apps") == []


def test_a_disruption_while_the_pdb_allowed_none_breaks_it() -> None:
    samples = [pdb(0.0, 1), pdb(5.0, 0)]
    out = pdb_broken([ev(5.0 + PDB_SETTLE_S + 1, verb="delete")], samples, "apps")
    assert [v.kind for v in out] == ["pdb-broken"] and "delete of apps/w-1" in out[0].detail


# ---- logs, memory, restarts ------------------------------------------------------------------------
TRACE = """INFO starting
Traceback (most recent call last):
  File "x.py", line 1, in <module>
    boom()
KeyError: 'nodes'
INFO going on
"""


def test_a_clean_log_has_no_traceback() -> None:
    assert (
        tracebacks({"op-1/operator": "INFO all fine\nERROR a handled error, logged in one line\n"}, 1.0) == []
    )


def test_a_traceback_in_a_previous_container_log_is_named() -> None:
    out = tracebacks({"op-1/operator": "fine\n", "op-2/operator (previous)": TRACE}, 1.0)
    assert [v.kind for v in out] == ["traceback"]
    assert out[0].detail == "op-2/operator (previous): KeyError: 'nodes'"


def test_memory_under_the_bound_is_fine_and_over_it_is_not() -> None:
    assert memory(149.9, 1.0) == []
    out = memory(151.0, 1.0)
    assert [v.kind for v in out] == ["memory"] and "151.0 MiB" in out[0].detail


def test_operator_restarts_count_container_restarts_and_replaced_pods() -> None:
    assert operator_restarts({"a": 0, "b": 0}, {"a": 0, "b": 0}) == 0
    assert (
        operator_restarts({"a": 2, "b": 0, "c": 1}, {"a": 0, "b": 0}) == 4
    )  # 2 + 1 restarts, c replaced one
    # restarts from before the observer started are not counted: a has restarted once since
    assert operator_restarts({"a": 5, "b": 2}, {"a": 4, "b": 2}) == 1


# ---- convergence and leftovers ---------------------------------------------------------------------
def sr_doc(ready: str = "True", state: str = "validated", generation: int = 3, **row: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": SR, "generation": 3},
        "status": {
            "observedGeneration": generation,
            "conditions": [{"type": "Ready", "status": ready}],
            "nodes": [{"name": "vm", "state": state, **row}],
        },
    }


def node(name: str = "vm", validated: str | None = "true", **extra: Any) -> dict[str, Any]:
    labels = {f"sro.dev/{SR}.validated": validated} if validated else {}
    return {"metadata": {"name": name, "labels": labels, **extra.pop("meta", {})}, **extra}


def test_a_ready_sr_whose_status_agrees_with_the_labels_has_converged() -> None:
    assert not_converged(sr_doc(), [node(), node("other", validated=None)], SR) == []


def test_not_converged_says_why() -> None:
    assert not_converged(None, [node()], SR) == [f"SpecialResource {SR} not found"]
    assert "Ready is not True" in not_converged(sr_doc(ready="False"), [node()], SR)
    assert any("generation" in w for w in not_converged(sr_doc(generation=2), [node()], SR))
    assert any("driver" in w for w in not_converged(sr_doc(state="driver"), [node()], SR))
    assert any("label" in w for w in not_converged(sr_doc(), [node(validated=None)], SR))
    assert any("not in the status" in w for w in not_converged(sr_doc(), [node(), node("x")], SR))
    assert any(
        "remediation under way" in w for w in not_converged(sr_doc(remediation={"step": "x"}), [node()], SR)
    )


def test_a_clean_node_has_no_leftovers() -> None:
    clean = node(
        validated=None,
        meta={"labels": {f"sro.dev/{SR}.enabled": "true"}},  # the node's opt-in: the admin's
        spec={"taints": [{"key": "other/x"}]},
        status={"conditions": [{"type": "Ready"}]},
    )
    assert node_leftovers(SR, [clean], 1.0, "GpuHealthy") == []
    assert object_leftovers([], 1.0, SR) == []


def test_labels_annotations_taints_and_the_condition_sr_left_are_leftovers() -> None:
    dirty = node(
        meta={"annotations": {f"sro.dev/{SR}.remediation": "{}"}},
        spec={"taints": [{"key": f"sro.dev/{SR}.not-ready"}]},
        status={"conditions": [{"type": "GpuHealthy", "status": "True"}]},
    )
    out = node_leftovers(SR, [dirty], 1.0, "GpuHealthy")
    assert [v.kind for v in out] == ["leftover"]
    for what in (f"sro.dev/{SR}.validated", f"sro.dev/{SR}.remediation", "taint", "condition GpuHealthy"):
        assert what in out[0].detail
    assert [v.detail for v in object_leftovers(["DaemonSet/sro-system/x"], 1.0, SR)] == [
        f"DaemonSet/sro-system/x of SpecialResource {SR} left"
    ]


def test_every_kind_is_named_once() -> None:
    assert len(set(KINDS)) == len(KINDS) == 9


def test_the_step_key_names_an_upgrade_or_remediation_under_way_and_nothing_else() -> None:
    key_r, key_u = f"sro.dev/{SR}.remediation", f"sro.dev/{SR}.upgrade"
    started = json.dumps({"state": "evicting", "cordoned": True, "started": "2026-01-01T00:00:00Z"})
    assert step_key({key_r: started}, SR) == "remediation 2026-01-01T00:00:00Z"
    assert step_key({key_u: upg("pods-evicted", True)}, SR) == "upgrade a->b"
    assert step_key({key_r: rem("done", False), key_u: upg("done", True)}, SR) == ""
    assert step_key({}, SR) == ""


def test_a_process_sees_the_device_nodes_under_its_dev_by_major_and_minor() -> None:
    import os

    from benchmarks.chaos.hostlooks import devices_seen

    null = os.stat("/dev/null").st_rdev
    assert devices_seen(os.getpid(), {null: "/dev/sro-simgpu9"}) == {"/dev/sro-simgpu9"}
    assert devices_seen(os.getpid(), {}) == set()
    assert devices_seen(2**22 + 7, {null: "x"}) is None  # no such process


def test_a_label_selector_selects_as_kubernetes_does() -> None:
    sel = {
        "matchLabels": {"app": "w"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}],
    }
    assert selects(sel, {"app": "w", "tier": "a"})
    assert not selects(sel, {"app": "w", "tier": "b"})
    assert not selects(sel, {"app": "x", "tier": "a"})
    assert selects({}, {"anything": "x"})
    assert not selects({"matchExpressions": [{"key": "k", "operator": "DoesNotExist"}]}, {"k": ""})


def test_a_disruption_of_a_pod_that_was_not_ready_never_breaks_it() -> None:
    """Seed 101: a pod bound 0.4 s before its eviction (Pending: the API server takes it whatever the
    budget) was flagged; the PDB counts only Ready pods, so taking it cannot break the budget."""
    pending = Disruption(10.0, "apps", "w-1", "u1", "", "evict", counted=False)
    assert pdb_broken([pending], [pdb(0.0, 0)], "apps") == []
    assert [v.kind for v in pdb_broken([ev(10.0)], [pdb(0.0, 0)], "apps")] == ["pdb-broken"]


def test_readiness_at_a_time_from_a_late_watch() -> None:
    history = [(1.0, False), (5.0, True), (9.0, False)]
    assert not ready_at(history, 2.0) and ready_at(history, 6.0) and not ready_at(history, 9.5)
    assert ready_at(history, 5.0 - PDB_LAG_S / 2)  # the watch showed it Ready just after: taken as Ready
    assert ready_at([], 3.0) and ready_at([(4.0, False)], 3.0)  # nothing seen before: unknown, strict
    running = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    assert is_ready(running)
    assert not is_ready({"status": {"phase": "Pending"}})
    assert not is_ready({**running, "metadata": {"deletionTimestamp": "2026-11-26T09:29:48Z"}})


def test_a_disruption_of_a_pod_the_pdb_does_not_guard_never_breaks_it() -> None:
    unguarded = Disruption(10.0, "apps", "w-1", "u1", "", "evict", guarded=False)
    assert pdb_broken([unguarded], [pdb(0.0, 0)], "apps") == []
