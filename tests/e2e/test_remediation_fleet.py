"""Remediation on a fleet: 50 simulated nodes, a fault on 40 % of them under the default breaker
(25 %), then one node faulting again and again until it is held with `RemediationLimit` (issue 24).

Why simulated nodes (`benchmarks.simnodes`, KWOK-style: one process plays every kubelet) and not
hollow ones: on a 2-core machine 50 hollow kubelets never validated (their device-plugin pods
crash-looped); the simulator validates 50 nodes in seconds and gives every pod bound to them the
status a kubelet would — DaemonSet pods Running and Ready, restartPolicy-Never pods (validations, the
remediation's reset pod) Succeeded, a deleted pod gone at once. No device plugin runs there, so each
fault is injected as what the operator reads: the node's NodeFeature carrying the device plugin's
health report (`sro.devices.healthreport.to_features`), written here per node. This tests the
breaker and the machine on many real Node objects, never a device.

Why the default action (`reset-device` for GpuLost, Xid 79) works here: its reset finishes when the
node's reset pod Succeeds, which the simulator does at once; the node is then revalidated (its last
validation pod run again, Succeeded too) and is done once its report no longer names the fault. So
`FakePlugins` plays the device plugin after a reset: when a node's record reaches `validating` (the
reset pod has Succeeded) it writes that node's report healthy, as the real plugin does once the
reset cleared the device.

Why `maxConcurrentNodes: 50`: its default (1) lets one node start at a time, a test of the turn
rather than of the breaker; with it out of the way the default breaker (`maxUnavailable: 25%`, 13 of
50 nodes) is the only limit, as in the unit case tests/unit/operator/test_remediation_machine.py::
test_a_fault_storm_on_40_percent_of_50_nodes_remediates_at_most_25_percent.

Why a pod and a PodDisruptionBudget on each faulty node: the report names the pod as the faulty
device's holder, so the remediation must evict it, and the budget (maxUnavailable 0) refuses that
until the test deletes it. So the first 13 nodes stay under way (cordoned, evicting) while the test
checks that exactly 13 are and the 7 others wait for the breaker; then the budget goes, the 13 finish
and the 7 start. A thread (`Watch`) reads the nodes every 0.5 s for the whole module: never more than
13 under way or cordoned, and only faulted nodes ever.

At the end the SpecialResource (its release removes the records and sro's cordons), the
NodeFeatures, the pods, the namespace, the simulator (SIGTERM: its nodes and their pods go) and sro
are gone.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks.simnodes import SIM_LABEL
from sro.kube.client import sync_client
from sro.kube.objects import Objects
from sro.local.cluster import LocalCluster
from sro.operator.remediation.breaker import BREAKER_REASON
from sro.operator.remediation.record import ACTIVE, DONE, EVICTING, LIMIT, WAITING
from tests.e2e.fleet_support import (
    APPS,
    ATTEMPTS,
    BUDGET,
    FAULTY,
    FLAPPER,
    LIMIT_NODES,
    NAMES,
    NODES,
    NS,
    SR,
    STORM,
    Simulator,
    Watch,
    debug,
    holder_pod,
    look,
    pod_name,
    reasons,
    remediation_status,
    rows,
    special_resource,
    sr_status,
    table_cells,
    table_steps,
    write_reports,
)
from tests.e2e.helpers import figure, get_json, sro, wait_for
from tests.e2e.remediation_support import events

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


# ---- fixtures ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fleet(cluster: LocalCluster, sro_image: str) -> Iterator[Objects]:
    """sro installed, 50 simulated nodes Ready, the SpecialResource validated on them; at the end
    everything this module made is gone again."""
    cluster.kubectl("delete", "sr", SR, "--ignore-not-found", "--timeout=120s", check=False)
    objects = Objects(sync_client(cluster.kubeconfig))
    log = tempfile.NamedTemporaryFile("w+", prefix="sro-e2e-simnodes-", suffix=".log")  # noqa: SIM115
    sim: Simulator | None = None
    t0 = time.monotonic()
    try:
        out = sro(cluster, "install", "--image", sro_image, "--timeout", "240")
        assert out.returncode == 0, out.stdout + out.stderr
        figure(f"fleet: sro install: {time.monotonic() - t0:.1f} s")
        t1 = time.monotonic()
        sim = Simulator(cluster, log)
        sim.wait_ready(180)
        figure(f"fleet: {NODES} simulated nodes Ready: {time.monotonic() - t1:.1f} s")
        cluster.kubectl("create", "namespace", APPS, check=False)
        t2 = time.monotonic()
        cluster.kubectl("apply", "-f", "-", input=json.dumps(special_resource()))
        wait_for(
            f"{NODES} simulated nodes validated",
            lambda: sr_status(objects).get("validatedCount") == NODES,
            300,
            1,
            why=lambda: debug(cluster),
        )
        figure(f"fleet: kubectl apply -> {NODES} simulated nodes validated: {time.monotonic() - t2:.1f} s")
        yield objects
    finally:
        # the SpecialResource first: its release takes the records and sro's cordons off the nodes
        cluster.kubectl("delete", "sr", SR, "--ignore-not-found", "--timeout=300s", check=False)
        cluster.kubectl("delete", "nodefeatures", "-n", NS, "-l", "sro.dev/e2e=fleet", check=False)
        cluster.kubectl("delete", "namespace", APPS, "--ignore-not-found", "--timeout=180s", check=False)
        try:
            after = look(objects)
            left = sorted(n for n, r in after.records.items() if r is not None)
            cordons = sorted(after.cordoned)
        except Exception as e:  # the cluster's own trouble: the simulator and sro still go
            left, cordons = [f"<unread: {str(e)[:100]}>"], []
        objects.client.close()
        code = sim.stop() if sim is not None else 0
        log.seek(0)
        tail = log.read()[-2000:]
        log.close()
        out = sro(cluster, "uninstall", "--timeout", "180")
        assert out.returncode == 0, out.stdout + out.stderr
        assert code == 0, f"the simulator exited {code}:\n{tail}"
        assert not left and not cordons, f"records left: {left}; cordons left: {cordons}"
        assert not get_json(cluster, "nodes", "-l", f"{SIM_LABEL}=true")["items"]
        pods = get_json(cluster, "pods", "-A")["items"]
        assert not [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") in NAMES]


@pytest.fixture(scope="module")
def watch(cluster: LocalCluster, fleet: Objects) -> Iterator[Watch]:
    w = Watch(cluster)
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    yield w
    w.stop.set()
    thread.join(30)


# ---- the cases -----------------------------------------------------------------------------------------
def test_a_fault_on_40_percent_of_50_nodes_remediates_at_most_25_percent_at_once(
    cluster: LocalCluster, fleet: Objects, watch: Watch
) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(BUDGET))
    pods = [holder_pod(n) for n in STORM]
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))

    def holders_running() -> bool:
        found: list[dict[str, Any]] = get_json(cluster, "pods", "-n", APPS, "-l", "app=fleet-work")["items"]
        return bool(sum(p.get("status", {}).get("phase") == "Running" for p in found) == FAULTY)

    wait_for(f"the {FAULTY} holders running", holders_running, 120, 1, why=lambda: debug(cluster))
    write_reports(cluster, dict.fromkeys(NAMES, False))  # every node's plugin reports, healthy
    t0 = time.monotonic()
    watch.fault(STORM)

    def split() -> bool:
        now = look(fleet)
        evicting = [n for n in STORM if now.state(n) == EVICTING]
        waiting = [n for n in STORM if now.state(n) == WAITING]
        return len(evicting) == LIMIT_NODES and len(waiting) == FAULTY - LIMIT_NODES

    wait_for(
        "13 nodes evicting (the budgets hold) and 7 waiting", split, 120, 0.5, why=lambda: debug(cluster)
    )
    figure(
        f"fleet: {FAULTY} of {NODES} nodes faulted -> 13 under way, 7 waiting: {time.monotonic() - t0:.1f} s"
    )
    time.sleep(5)  # passes later the split is the same: the breaker holds, it is not a moment
    now = look(fleet)
    under = sorted(n for n in STORM if now.state(n) in ACTIVE)
    waiting = sorted(n for n in STORM if now.state(n) == WAITING)
    assert len(under) == LIMIT_NODES and len(waiting) == FAULTY - LIMIT_NODES, debug(cluster)
    assert now.under_way() == set(under)  # no fault, no remediation
    assert [n for n in NAMES if n not in STORM and now.records[n] is not None] == []
    assert now.cordoned == frozenset(under), (sorted(now.cordoned), under)  # reset-device cordons
    for n in under:
        rec = now.records[n]
        assert rec is not None and rec.state == EVICTING and rec.cordoned and rec.action == "reset-device", (
            rec
        )
        assert f"{APPS}/{pod_name(n)}" in rec.reason, rec.reason  # the budget holds its pod back
    why = BREAKER_REASON.format(limit=LIMIT_NODES, nodes=NODES)
    for n in waiting:
        rec = now.records[n]
        assert rec is not None and rec.reason == why and not rec.attempts, (n, rec)
    assert all(now.healthy[n] == "False" for n in STORM), now.healthy  # waiting or not, it is faulty
    assert all(now.healthy[n] in ("", "True") for n in NAMES if n not in STORM), now.healthy
    shown = rows(fleet)
    assert {n: shown[n]["step"] for n in waiting} == dict.fromkeys(waiting, WAITING), shown
    assert all(shown[n].get("reason") == why for n in waiting), shown
    assert {n: shown[n]["step"] for n in under} == dict.fromkeys(under, EVICTING), shown
    summary = sr_status(fleet)["remediation"]
    assert summary["breaker"] == {"limit": LIMIT_NODES, "unavailable": LIMIT_NODES, "tripped": True}, summary
    code, text = remediation_status(cluster)
    assert code == 0, text
    assert f"{SR}: evicting {LIMIT_NODES}, waiting {FAULTY - LIMIT_NODES}" in text, text
    assert f"breaker: {LIMIT_NODES} of at most {LIMIT_NODES} node(s) out of service" in text, text
    assert "tripped: yes" in text, text
    steps = table_steps(text)
    assert steps == {**dict.fromkeys(waiting, WAITING), **dict.fromkeys(under, EVICTING)}, text
    assert all("circuit breaker" in reasons(text)[n] for n in waiting), text

    # the budget goes: the 13 finish, the 7 start in their place, all 20 end done, uncordoned, healthy
    t1 = time.monotonic()
    cluster.kubectl("delete", "pdb", "-n", APPS, "fleet-work")

    def all_done() -> bool:
        now = look(fleet)
        return all(now.state(n) == DONE and n not in now.cordoned and now.healthy[n] == "True" for n in STORM)

    wait_for(f"all {FAULTY} remediations done", all_done, 240, 1, why=lambda: debug(cluster))
    figure(
        f"fleet: budgets deleted -> all {FAULTY} nodes repaired, 13 at a time: {time.monotonic() - t1:.1f} s"
    )
    now = look(fleet)
    assert all(len(r.attempts) == 1 for n in STORM if (r := now.records[n]) is not None), now.records
    assert not now.cordoned, sorted(now.cordoned)
    assert watch.cleared == dict.fromkeys(STORM, 1), watch.cleared  # each reset once
    assert not get_json(cluster, "pods", "-n", APPS, "-l", "app=fleet-work")["items"]  # evicted

    def shown_done() -> bool:  # the status is the next pass's
        code, text = remediation_status(cluster)
        return code == 0 and f"{SR}: done {FAULTY}\n" in text and "tripped: no" in text

    wait_for(
        "sro remediation status: all done", shown_done, 30, 1, why=lambda: remediation_status(cluster)[1]
    )
    assert watch.polls > 10 and not watch.over, (watch.polls, watch.over[:3], watch.errors[:3])
    assert watch.most == LIMIT_NODES and watch.most_cordoned == LIMIT_NODES, (watch.most, watch.most_cordoned)
    assert watch.ever == set(STORM), sorted(watch.ever)


def test_a_node_past_3_attempts_in_the_window_stays_cordoned_with_remediation_limit(
    cluster: LocalCluster, fleet: Objects, watch: Watch
) -> None:
    """Fault, repair, fault ... on one node: three remediations (the default maxAttempts), each a
    whole reset-device (cordon, reset, revalidate, uncordon), then the fourth fault holds the node
    cordoned with `RemediationLimit` and a Warning event. Each repair is waited for until the record
    forgets the fault: a fault the operator never saw clear is the same fault, not a new one."""
    since = time.time() - 1
    for attempt in range(1, ATTEMPTS + 1):
        watch.fault([FLAPPER])

        def repaired(k: int = attempt) -> bool:
            now = look(fleet)
            rec = now.records[FLAPPER]
            return (
                rec is not None
                and rec.state == DONE
                and len(rec.attempts) == k
                and not rec.devices  # the fault cleared and forgotten
                and FLAPPER not in now.cordoned
            )

        wait_for(f"{FLAPPER}'s remediation {attempt} done", repaired, 120, 0.5, why=lambda: debug(cluster))
    assert watch.cleared.get(FLAPPER) == ATTEMPTS, watch.cleared
    t0 = time.monotonic()
    watch.fault([FLAPPER])

    def held() -> bool:
        return look(fleet).state(FLAPPER) == LIMIT

    wait_for(f"{FLAPPER} held at its limit", held, 120, 0.5, why=lambda: debug(cluster))
    figure(f"fleet: 4th fault on one node -> RemediationLimit: {time.monotonic() - t0:.1f} s")
    now = look(fleet)
    rec = now.records[FLAPPER]
    assert rec is not None and len(rec.attempts) == ATTEMPTS and rec.cordoned, rec
    assert "maxAttempts" in rec.reason and f"sro remediation retry {FLAPPER}" in rec.reason, rec.reason
    assert FLAPPER in now.cordoned and now.healthy[FLAPPER] == "False"
    assert rows(fleet)[FLAPPER]["step"] == LIMIT

    def warned() -> bool:
        return any(
            e["type"] == "Warning" and e["reason"] == "RemediationLimit"
            for e in events(cluster, FLAPPER, since)
        )

    wait_for(f"a RemediationLimit Warning event on {FLAPPER}", warned, 60, 1, why=lambda: debug(cluster))
    code, text = remediation_status(cluster)
    assert code == 3, text  # a node held for a person
    row = next((c for c in table_cells(text) if c[0] == FLAPPER), [])
    assert row[1:5] == ["GpuLost", "0", "reset-device", LIMIT] and row[6] == str(ATTEMPTS), text
    time.sleep(3)  # passes later it is still held: the limit is not one pass's verdict
    now = look(fleet)
    assert now.state(FLAPPER) == LIMIT and FLAPPER in now.cordoned, debug(cluster)
    assert watch.cleared.get(FLAPPER) == ATTEMPTS  # no 4th reset: the limit started none
    assert not watch.over, watch.over[:3]
