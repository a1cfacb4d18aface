"""Remediation on a fleet: 50 hollow nodes, a fault on 40 % of them, the default breaker (25 %), then
one node faulting again and again until it is held with `RemediationLimit`.

Hollow nodes run no device plugin, so each fault is injected as what the operator reads: the node's
NodeFeature carrying the health report (`sro.devices.healthreport.to_features`), written here per
node. This tests the breaker and the machine on many real Node objects, never a device.

Why `restart-workload` for the class of Xid 79 (GpuLost) and not its default `reset-device`: a reset
finishes when the node's reset pod Succeeds, and a hollow node's fake runtime runs any container
forever (only an httpGet probe can end one), so every reset would time out and fail the node. The
breaker counts a node under `restart-workload` as under way all the same (its evicting step is
active), and the attempts and the limit are the same for every action.

Why `maxConcurrentNodes: 50`: its default (1) would let one node start at a time, a test of the turn
rather than of the breaker; with it out of the way the default breaker (`maxUnavailable: 25%`, 13 of
50 nodes) is the only limit, as in the unit case
tests/unit/operator/test_remediation_machine.py::
test_a_fault_storm_on_40_percent_of_50_nodes_remediates_at_most_25_percent.

Why a pod and a PodDisruptionBudget on each faulty node: the report names the pod as the faulty
device's holder, so the remediation must evict it, and the budget (maxUnavailable 0) refuses that
until the test deletes it. So the first 13 nodes stay under way while the test checks that exactly
13 are and the 7 others wait for the breaker; then the budget goes, the 13 finish and the 7 start.
A thread polls the nodes' records and the status rows every 0.5 s for the whole test: never more
than 13 under way.

The SpecialResource selects only hollow nodes (their label) and tolerates their taint, as
test_hollow_nodes.py does, so nothing real is cordoned. At the end the SpecialResource (its release
removes the records and sro's cordons), the NodeFeatures, the pods, the namespace, the hollow nodes
and sro are gone.

Not yet run on the cluster (the full e2e suite held it while this was written).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from sro.api.nfd_crds import NODE_NAME_LABEL
from sro.api.recipes import SIMULATED_GPU
from sro.api.specialresource import STATE_FIELDS
from sro.devices.healthreport import DeviceFault, HealthReport, to_features
from sro.local.cluster import LocalCluster
from sro.local.hollowconfig import HOLLOW_LABEL, probe
from sro.local.layout import BUSYBOX_IMAGE
from sro.operator.remediation.breaker import BREAKER_REASON
from sro.operator.remediation.record import ACTIVE, DONE, LIMIT, WAITING, Record, remediation_annotation
from tests.e2e.helpers import figure, get_json, sr_doc, sro, wait_for
from tests.e2e.remediation_support import events

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

NS = "sro-system"
SR = "fleet-gpus"
APPS = "sro-e2e-fleet"
PREFIX = "fleet"
NODES = 50
FAULTY = 20  # 40 % of the nodes
LIMIT_NODES = 13  # the default breaker: ceil(50 * 25 %)
NAMES = [f"{PREFIX}-{i}" for i in range(NODES)]
STORM = NAMES[:FAULTY]
FLAPPER = NAMES[-1]  # faulted again and again (not one of the storm's nodes)
DEVICES = tuple(str(i) for i in range(8))
XID = 79  # GPU has fallen off the bus: GpuLost
KEY = remediation_annotation(SR)
CONFIG = {
    "namePrefix": PREFIX,
    "labels": {"sro.dev/simulated-gpu.count": "8"},
    "taints": [f"{HOLLOW_LABEL}=true:NoExecute"],
    "capacity": {SIMULATED_GPU.resource: "8"},
    "systems": [{"kernel": "6.1.0-18-amd64", "osId": "debian", "osVersion": "12"}],
    "failures": [],
}


def special_resource(port: int) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "recipe": SIMULATED_GPU.name,
        "nodeSelector": {HOLLOW_LABEL: "true"},
        "tolerations": [{"key": HOLLOW_LABEL, "operator": "Exists"}],
        "monitoring": {"enabled": False},
        "remediation": {"maxConcurrentNodes": NODES, "actions": {"gpuLost": "restart-workload"}},
    }
    for state, fld in STATE_FIELDS.items():
        spec[fld] = probe(state, port, period=1)
    for fld in ("driverValidation", "devicePluginValidation"):
        spec[fld]["timeoutSeconds"] = 120
    return {
        "apiVersion": "sro.dev/v1alpha1",
        "kind": "SpecialResource",
        "metadata": {"name": SR},
        "spec": spec,
    }


# ---- the reports: one NodeFeature per node, as a device plugin would write it -------------------
def pod_name(node: str) -> str:
    return f"work-{node}"


def nodefeature(node: str, faulty: bool) -> dict[str, Any]:
    """Node `node`'s NodeFeature with the simulated GPUs' report: device 0 lost (Xid 79) and held
    by the node's pod, or every device healthy."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    report = HealthReport(
        recipe=SIMULATED_GPU.name,
        resource=SIMULATED_GPU.resource,
        node=node,
        boot_id=f"boot-{node}",
        updated=now,
        devices=DEVICES,
        faults=(DeviceFault("0", (XID,), "GPU has fallen off the bus (injected)"),) if faulty else (),
        holders={"0": (f"{APPS}/{pod_name(node)}",)},
    )
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {
            "name": f"{node}-sro-fleet",
            "namespace": NS,
            "labels": {NODE_NAME_LABEL: node, "sro.dev/e2e": "fleet"},
        },
        "spec": {"features": to_features([report])},
    }


def write_reports(cluster: LocalCluster, faulty: dict[str, bool]) -> None:
    items = [nodefeature(n, f) for n, f in faulty.items()]
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )


def holder_pod(node: str) -> dict[str, Any]:
    """A pod on `node` (placed by name: the scheduler is not what is tested) that the report names as
    device 0's holder; the budget below keeps it from being evicted until the test allows it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name(node), "namespace": APPS, "labels": {"app": "fleet-work"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"key": HOLLOW_LABEL, "operator": "Exists"}],
            "containers": [
                {
                    "name": "work",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                }
            ],
        },
    }


BUDGET = {
    "apiVersion": "policy/v1",
    "kind": "PodDisruptionBudget",
    "metadata": {"name": "fleet-work", "namespace": APPS},
    "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "fleet-work"}}},
}


# ---- what the nodes say -----------------------------------------------------------------------------
def records(cluster: LocalCluster) -> dict[str, Record | None]:
    out: dict[str, Record | None] = {}
    for n in get_json(cluster, "nodes", "-l", f"{HOLLOW_LABEL}=true")["items"]:
        text = (n["metadata"].get("annotations") or {}).get(KEY, "")
        out[n["metadata"]["name"]] = Record.from_json(text)
    return out


def state_of(rec: Record | None) -> str:
    return rec.state if rec is not None else ""


def rows(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    """node -> its status row's remediation entry (only the nodes that have one)."""
    nodes = sr_doc(cluster, SR).get("status", {}).get("nodes", [])
    return {r["name"]: dict(r["remediation"]) for r in nodes if r.get("remediation")}


def debug(cluster: LocalCluster) -> str:
    recs = {n: (state_of(r), r.reason[:80] if r else "") for n, r in records(cluster).items() if r}
    logs = cluster.kubectl(
        "-n", NS, "logs", "-l", "app.kubernetes.io/name=sro-operator", "--tail=30", check=False
    ).stdout
    status = sr_doc(cluster, SR).get("status", {})
    return f"records: {recs}\nstatus.remediation: {status.get('remediation')}\noperator:\n{logs}"


@dataclass
class Watch:
    """The poll that runs for the whole test: the most nodes ever seen under way at once."""

    most: int = 0
    polls: int = 0
    over: list[str] = field(default_factory=list)  # what was seen when more than the breaker's share
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, cluster: LocalCluster) -> None:
        while not self.stop.is_set():
            try:
                recs = records(cluster)
                under = {n for n, r in recs.items() if state_of(r) in ACTIVE}
                shown = {n for n, e in rows(cluster).items() if e.get("step") in ACTIVE}
                for seen, how in ((under, "records"), (shown, "status rows")):
                    self.most = max(self.most, len(seen))
                    if len(seen) > LIMIT_NODES:
                        self.over.append(f"{how}: {sorted(seen)}")
                self.polls += 1
            except Exception as e:  # a kubectl hiccup: one look lost, noted, not the test's failure
                self.errors.append(str(e)[:200])
            self.stop.wait(0.5)


@pytest.fixture(scope="module")
def fleet(cluster: LocalCluster, sro_image: str) -> Iterator[LocalCluster]:
    """sro installed, 50 hollow nodes Ready, the SpecialResource on them validated; at the end
    everything this module made is gone again."""
    cluster.kubectl("delete", "sr", SR, "--ignore-not-found", "--timeout=120s", check=False)
    t0 = time.monotonic()
    try:
        names = cluster.scale_hollow(NODES, yaml.safe_dump(CONFIG))
        assert names == NAMES, names
        figure(f"{NODES} hollow nodes Ready: {time.monotonic() - t0:.1f} s")
        out = sro(cluster, "install", "--image", sro_image, "--timeout", "240")
        assert out.returncode == 0, out.stdout + out.stderr
        cluster.kubectl("create", "namespace", APPS, check=False)
        t1 = time.monotonic()
        cluster.kubectl("apply", "-f", "-", input=json.dumps(special_resource(cluster.hollow().rules_port())))

        def validated() -> bool:
            return bool(sr_doc(cluster, SR).get("status", {}).get("validatedCount") == NODES)

        wait_for(f"{NODES} hollow nodes validated", validated, 900, 2, why=lambda: debug(cluster))
        figure(f"kubectl apply -> {NODES} hollow nodes validated: {time.monotonic() - t1:.1f} s")
        yield cluster
    finally:
        # the SpecialResource first: its release takes the records and sro's cordons off the nodes
        cluster.kubectl("delete", "sr", SR, "--ignore-not-found", "--timeout=300s", check=False)
        cluster.kubectl("delete", "nodefeatures", "-n", NS, "-l", "sro.dev/e2e=fleet", check=False)
        cluster.kubectl("delete", "namespace", APPS, "--ignore-not-found", "--timeout=180s", check=False)
        try:
            left = [n for n, r in records(cluster).items() if r is not None]
            cordons = [
                n["metadata"]["name"]
                for n in get_json(cluster, "nodes", "-l", f"{HOLLOW_LABEL}=true")["items"]
                if n["spec"].get("unschedulable")
            ]
        except Exception as e:  # the cluster's own trouble: the hollow nodes and sro still go
            left, cordons = [f"<unread: {str(e)[:100]}>"], []
        cluster.hollow().stop()
        out = sro(cluster, "uninstall", "--timeout", "180")
        assert out.returncode == 0, out.stdout + out.stderr
        assert not left and not cordons, f"records left: {left}; cordons left: {cordons}"
        assert not get_json(cluster, "nodes", "-l", f"{HOLLOW_LABEL}=true")["items"]
        assert not get_json(cluster, "nodefeatures", "-n", NS, "-l", "sro.dev/e2e=fleet")["items"]


@pytest.fixture(scope="module")
def watch(fleet: LocalCluster) -> Iterator[Watch]:
    w = Watch()
    thread = threading.Thread(target=w.run, args=(fleet,), daemon=True)
    thread.start()
    yield w
    w.stop.set()
    thread.join(30)


def test_a_fault_on_40_percent_of_50_nodes_remediates_at_most_25_percent_at_once(
    fleet: LocalCluster, watch: Watch
) -> None:
    fleet.kubectl("apply", "-f", "-", input=json.dumps(BUDGET))
    for node in STORM:
        fleet.kubectl("apply", "-f", "-", input=json.dumps(holder_pod(node)))

    def pods_running() -> bool:
        pods: list[dict[str, Any]] = get_json(fleet, "pods", "-n", APPS, "-l", "app=fleet-work")["items"]
        return bool(sum(p.get("status", {}).get("phase") == "Running" for p in pods) == FAULTY)

    wait_for(f"the {FAULTY} holders running", pods_running, 180, 1, why=lambda: debug(fleet))
    t0 = time.monotonic()
    write_reports(fleet, {n: True for n in STORM})

    def split() -> bool:
        states = {n: state_of(r) for n, r in records(fleet).items()}
        under = [n for n in STORM if states.get(n) in ACTIVE]
        waiting = [n for n in STORM if states.get(n) == WAITING]
        return len(under) == LIMIT_NODES and len(waiting) == FAULTY - LIMIT_NODES

    wait_for("13 nodes under way and 7 waiting", split, 120, 1, why=lambda: debug(fleet))
    figure(f"{FAULTY} faulty of {NODES} -> 13 under way, 7 waiting: {time.monotonic() - t0:.1f} s")
    time.sleep(5)  # some passes later the split is the same: the breaker holds, it is not a moment
    recs = records(fleet)
    assert [n for n in NAMES if n not in STORM and recs[n] is not None] == []  # no fault, no record
    under = [n for n in STORM if state_of(recs[n]) in ACTIVE]
    waiting = [n for n in STORM if state_of(recs[n]) == WAITING]
    assert len(under) == LIMIT_NODES and len(waiting) == FAULTY - LIMIT_NODES, debug(fleet)
    why = BREAKER_REASON.format(limit=LIMIT_NODES, nodes=NODES)
    for n in waiting:
        rec = recs[n]
        assert rec is not None and rec.reason == why, (n, rec)
    shown = rows(fleet)
    assert {n: shown[n]["step"] for n in waiting} == dict.fromkeys(waiting, WAITING), shown
    assert all(shown[n].get("reason") == why for n in waiting), shown
    breaker = sr_doc(fleet, SR)["status"]["remediation"]["breaker"]
    assert breaker["limit"] == LIMIT_NODES and breaker["tripped"] is True, breaker
    assert not any(
        n["spec"].get("unschedulable")
        for n in get_json(fleet, "nodes", "-l", f"{HOLLOW_LABEL}=true")["items"]
    )

    # the budget goes: the 13 finish, the 7 start in their place, all 20 end done
    fleet.kubectl("delete", "pdb", "-n", APPS, "fleet-work")

    def all_done() -> bool:
        recs = records(fleet)
        return all(state_of(recs[n]) == DONE for n in STORM)

    wait_for(f"all {FAULTY} remediations done", all_done, 300, 1, why=lambda: debug(fleet))
    figure(f"{FAULTY} faulty nodes, 13 at a time -> all done: {time.monotonic() - t0:.1f} s")
    recs = records(fleet)
    assert all(len(r.attempts) == 1 for n in STORM if (r := recs[n]) is not None)

    def evicted() -> bool:  # every holder evicted (a pod just terminating is gone in a moment)
        return not get_json(fleet, "pods", "-n", APPS, "-l", "app=fleet-work")["items"]

    wait_for("every holder evicted", evicted, 60, 1, why=lambda: debug(fleet))
    assert watch.polls > 5 and not watch.over, (watch.polls, watch.over[:3], watch.errors[:3])
    assert watch.most == LIMIT_NODES, watch.most


def test_a_node_past_3_attempts_in_the_window_stays_cordoned_with_remediation_limit(
    fleet: LocalCluster, watch: Watch
) -> None:
    """Fault, clear, fault ... on one node: three remediations (the default maxAttempts), then the
    fourth fault holds the node cordoned with `RemediationLimit` and a Warning event. Each clearing is
    waited for until the record forgets the fault: a fault the operator never saw clear is the same
    fault, not a new one."""
    since = time.time() - 1
    write_reports(fleet, {FLAPPER: False})
    for attempt in (1, 2, 3):
        write_reports(fleet, {FLAPPER: True})

        def repaired(k: int = attempt) -> bool:
            rec = records(fleet)[FLAPPER]
            return rec is not None and rec.state == DONE and len(rec.attempts) == k and bool(rec.devices)

        wait_for(f"{FLAPPER}'s remediation {attempt} done", repaired, 120, 0.5, why=lambda: debug(fleet))
        write_reports(fleet, {FLAPPER: False})

        def forgotten() -> bool:
            rec = records(fleet)[FLAPPER]
            return rec is not None and not rec.devices

        wait_for(f"{FLAPPER}'s fault {attempt} cleared", forgotten, 120, 0.5, why=lambda: debug(fleet))
    write_reports(fleet, {FLAPPER: True})

    def held() -> bool:
        return state_of(records(fleet)[FLAPPER]) == LIMIT

    wait_for(f"{FLAPPER} held at its limit", held, 120, 0.5, why=lambda: debug(fleet))
    rec = records(fleet)[FLAPPER]
    assert rec is not None and len(rec.attempts) == 3 and rec.cordoned, rec
    assert "maxAttempts" in rec.reason and f"sro remediation retry {FLAPPER}" in rec.reason, rec.reason
    assert get_json(fleet, "node", FLAPPER)["spec"].get("unschedulable") is True
    assert rows(fleet)[FLAPPER]["step"] == LIMIT

    def warned() -> bool:
        return any(
            e["type"] == "Warning" and e["reason"] == "RemediationLimit"
            for e in events(fleet, FLAPPER, since)
        )

    wait_for(f"a RemediationLimit Warning event on {FLAPPER}", warned, 60, 1, why=lambda: debug(fleet))
    time.sleep(3)  # passes later it is still held: the limit is not one pass's verdict
    assert state_of(records(fleet)[FLAPPER]) == LIMIT
    assert get_json(fleet, "node", FLAPPER)["spec"].get("unschedulable") is True
    assert not watch.over, watch.over[:3]
