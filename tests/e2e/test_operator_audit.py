"""Who wrote, from the API server's audit log: with sro installed (two replicas), the leader's writes
(its Lease renewals, a SpecialResource's status) are in the log under its own pod name
(`User-Agent: sro-operator/<version> (<pod>)`), the Lease writes carry the same name as
holderIdentity, and no other replica wrote in its term (`sro.local.audit.writers_per_term`)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from sro.local.audit import AuditEvent, end_of, follow, terms, writers_per_term
from sro.local.cluster import LocalCluster
from tests.e2e.helpers import figure, get_json, sro, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

NS = "sro-system"
SR = "sro-e2e-audit"
# a SpecialResource that selects no node: the operator still writes (its status, kopf's finalizer)
BODY = {
    "apiVersion": "sro.dev/v1alpha1",
    "kind": "SpecialResource",
    "metadata": {"name": SR},
    "spec": {"recipe": "simulated-gpu", "nodeSelector": {"sro-e2e/audit": "no-such-node"}},
}


@pytest.fixture(scope="module")
def installed(cluster: LocalCluster, sro_image: str) -> Iterator[None]:
    out = sro(cluster, "install", "--image", sro_image, "--timeout", "240")
    assert out.returncode == 0, out.stdout + out.stderr
    # a replica of an older build is rolled by the install: the lease changes hands until it is done
    cluster.kubectl("-n", NS, "rollout", "status", "deployment/sro-operator", "--timeout=240s")
    yield
    cluster.kubectl("delete", "sr", SR, "--ignore-not-found", "--timeout=120s", check=False)
    out = sro(cluster, "uninstall", "--timeout", "180")
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_leaders_writes_are_audited_under_its_pod_name(cluster: LocalCluster, installed: None) -> None:
    log = cluster.layout.audit_log
    cursor = end_of(log)  # from here on

    def holder() -> str:
        """The Lease's holder; "" while there is none (a fresh install creates the Lease only once a
        replica runs, seconds after `sro install` returns) or while it is a replica being deleted
        (`sro install` rolls replicas of an older build: the old leader hands over as it stops)."""
        out = cluster.kubectl("get", "lease", "sro-operator", "-n", NS, "-o", "json", check=False)
        name = json.loads(out.stdout)["spec"].get("holderIdentity") or "" if out.returncode == 0 else ""
        pods = get_json(cluster, "pods", "-n", NS, "-l", "app.kubernetes.io/name=sro-operator")["items"]
        stopping = {p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")}
        return "" if name in stopping else name

    wait_for("a replica that stays to hold the operator's lease", holder, 120)
    leader = holder()
    pods = get_json(cluster, "pods", "-n", NS, "-l", "app.kubernetes.io/name=sro-operator")["items"]
    assert leader in {p["metadata"]["name"] for p in pods}, leader
    cluster.kubectl("apply", "-f", "-", input=json.dumps(BODY))

    seen: list[AuditEvent] = []

    def read() -> list[AuditEvent]:
        """Every event since the cursor, the new ones read from the log."""
        nonlocal cursor
        events, cursor = follow(log, cursor)
        seen.extend(events)
        return seen

    def status_written() -> bool:
        return any(
            e.resource == "specialresources" and e.name == SR and e.replica is not None and e.accepted
            for e in read()
        )

    took = wait_for("the operator's write of the SpecialResource in the audit log", status_written, 120)
    figure(f"operator write of a new SpecialResource in the audit log after {took:.1f} s")

    def renewed() -> bool:
        """A Lease renewal in what was read: the status write can come well within the leader's 2 s
        renewal period of the cursor (0.5 s once), so the log is followed until one is there."""
        return any(e.resource == "leases" and e.name == "sro-operator" and e.is_write for e in read())

    wait_for("a Lease renewal in the audit log", renewed, 30)
    ours = [e for e in seen if e.replica is not None and e.is_write]
    writes = [e for e in ours if e.resource == "specialresources" and e.name == SR and e.accepted]
    assert {e.replica for e in writes} == {leader}, [(e.user_agent, e.verb, e.subresource) for e in writes]
    assert all(e.user == f"system:serviceaccount:{NS}:sro-operator" for e in writes)
    # the lease renewals: the leader's user agent, and the same name as holderIdentity in the request
    renewals = [e for e in ours if e.resource == "leases" and e.name == "sro-operator" and e.accepted]
    assert renewals, "no Lease renewal audited (every 2 s while leading)"
    assert {(e.replica, e.holder) for e in renewals} == {(leader, leader)}
    assert [t.holder for t in terms(seen)][-1] == leader
    assert writers_per_term(seen) == []
    # reads are not in the log, nor the nodes' heartbeats
    assert not [e for e in seen if e.verb in ("get", "list", "watch")]
    assert not [e for e in seen if e.namespace == "kube-node-lease"]
