"""The fault campaign's observer (issue 25) sees real violations on the real cluster, and none on an
idle, healthy SpecialResource.

1. Violations made by hand, for a SpecialResource that does not exist (no operator acts on its
   records, so what is made stays): the node cordoned with sro's remediation record saying sro
   cordoned it and no step under way (stale-cordon, the grace shortened to 3 s); a pod evicted twice
   and a PDB-guarded pod deleted while its PDB allows nothing, both with an operator replica's user
   agent, so the API server's audit log shows them as sro's (double-eviction, pdb-broken).
2. sro installed, the simulated-gpu SpecialResource Ready and a Deployment holding one device: 20 s
   of the observer see no violation (its device looks did run), it has converged, the final checks
   (memory, tracebacks) pass; deleting the SpecialResource leaves nothing (`leftovers`).
Each case removes what it made; run under the cluster lock (it cordons the node).
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from benchmarks.chaos.observer import Observer, leftovers
from sro.api.recipes import SIMULATED_GPU
from sro.local.cluster import LocalCluster
from sro.local.layout import BUSYBOX_IMAGE, Layout
from sro.operator.remediation.record import remediation_annotation
from tests.e2e.helpers import condition, get_json, sr_doc, sro, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(600)]

NS = "sro-e2e-observer"
GHOST = "chaos-ghost"  # a SpecialResource that does not exist: nothing undoes what the test makes
PDB = "guarded"
SR = SIMULATED_GPU.name
AGENT = "sro-operator/e2e (sro-operator-e2e-observer)"  # what an operator replica sends


def pod_spec(resources: dict[str, Any] | None = None, grace: int = 60) -> dict[str, Any]:
    return {
        "terminationGracePeriodSeconds": grace,
        "containers": [
            {
                "name": "main",
                "image": BUSYBOX_IMAGE,
                "imagePullPolicy": "Never",
                # it ignores SIGTERM: it stays (terminating) after its first eviction
                "command": ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"],
                "resources": resources or {},
            }
        ],
    }


def pod(name: str, app: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": NS, "labels": {"app": app}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec()}


def as_sro() -> httpx.Client:
    """The admin's credentials with an operator replica's user agent (the audit log's `userAgent`)."""
    pki = Layout().pki
    tls = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    tls.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return httpx.Client(
        base_url="https://127.0.0.1:6443", verify=tls, headers={"User-Agent": AGENT}, timeout=10
    )


def evict(client: httpx.Client, name: str) -> int:
    body = {"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}}
    return client.post(f"/api/v1/namespaces/{NS}/pods/{name}/eviction", json=body).status_code


def running(cluster: LocalCluster, name: str) -> bool:
    out = cluster.kubectl("get", "pod", "-n", NS, name, "-o", "jsonpath={.status.phase}", check=False)
    return out.stdout == "Running"


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[None]:
    cluster.kubectl("create", "namespace", NS, check=False)
    yield
    cluster.kubectl("delete", "pods", "--all", "-n", NS, "--force", "--grace-period=0", check=False)
    cluster.kubectl("delete", "namespace", NS, "--ignore-not-found", "--timeout=120s", check=False)


def kinds(observer: Observer) -> set[str]:
    return {v.kind for v in observer.violations()}


def test_the_observer_sees_a_stale_cordon_a_double_eviction_and_a_broken_pdb(
    cluster: LocalCluster, namespace: None
) -> None:
    audit_log = Layout().audit_log
    assert audit_log.exists(), f"no API server audit log at {audit_log}: the local cluster predates it"
    node = cluster.node_name
    assert not get_json(cluster, "node", node)["spec"].get("unschedulable"), "the node is cordoned already"
    for name in ("victim", "guarded"):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(pod(name, name)))
    pdb = {
        "apiVersion": "policy/v1beta1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": PDB, "namespace": NS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pdb))
    wait_for("both pods running", lambda: running(cluster, "victim") and running(cluster, "guarded"), 60)
    wait_for(
        "the PDB allowing no disruption",
        lambda: get_json(cluster, "pdb", "-n", NS, PDB).get("status", {}).get("currentHealthy") == 1,
        30,
    )
    # no operator in its namespace: the real one's log and memory are the other case's
    observer = Observer(sr=GHOST, workload_ns=NS, pdb=PDB, audit_log=audit_log, operator_ns=NS)
    observer.stale_grace_s = 3.0
    key = remediation_annotation(GHOST)
    record = {"state": "done", "cordoned": True, "steps": {}, "started": "", "updated": ""}
    observer.start()
    try:
        cluster.kubectl("annotate", "node", node, f"{key}={json.dumps(record)}", "--overwrite")
        cluster.kubectl("cordon", node)
        time.sleep(2 * 1.0 + 0.5)  # the PDB's 0 settles in the observer's samples (PDB_SETTLE_S)
        with as_sro() as client:
            assert evict(client, "victim") == 201
            assert evict(client, "victim") == 201, "a terminating pod's second eviction was refused"
            assert evict(client, "guarded") == 429  # refused by the PDB: expected, no violation
            gone = client.delete(f"/api/v1/namespaces/{NS}/pods/guarded")
            assert gone.status_code == 200, gone.text
        want = {"stale-cordon", "double-eviction", "pdb-broken"}
        wait_for(
            f"the observer to see {sorted(want)}",
            lambda: want <= kinds(observer),
            40,
            why=lambda: f"seen: {observer.violations()}; errors: {observer.errors[-5:]}",
        )
    finally:
        cluster.kubectl("uncordon", node, check=False)
        cluster.kubectl("annotate", "node", node, f"{key}-", check=False)
        found = observer.stop()
    by_kind = {v.kind: v for v in found}
    assert f"node {node}" in by_kind["stale-cordon"].detail
    assert f"{NS}/victim" in by_kind["double-eviction"].detail
    assert f"delete of {NS}/guarded" in by_kind["pdb-broken"].detail
    # the refused eviction was no disruption, and no other rule fired but two-writers: with sro
    # installed, "our" replica wrote while the real one held the Lease
    assert kinds(observer) - want <= {"two-writers"}, found


# ---- an idle, healthy SpecialResource --------------------------------------------------------------
@pytest.fixture
def ready(cluster: LocalCluster, sro_image: str) -> Iterator[None]:
    out = cluster.kubectl("get", "sr", "-o", "json", check=False)
    for item in json.loads(out.stdout)["items"] if out.returncode == 0 else []:
        if item["spec"].get("recipe") == SIMULATED_GPU.name and item["metadata"]["name"] != SR:
            cluster.kubectl("delete", "sr", item["metadata"]["name"], "--timeout=180s", check=False)
    installed = cluster.kubectl("get", "deployment", "-n", "sro-system", "sro-operator", check=False)
    if installed.returncode != 0:
        out = sro(cluster, "install", "--image", sro_image, "--timeout", "240")
        assert out.returncode == 0, out.stdout + out.stderr
    cluster.kubectl("apply", "-f", "examples/simulated-gpu.yaml")
    wait_for(
        "the SpecialResource Ready",
        lambda: condition(sr_doc(cluster, SR), "Ready").get("status") == "True",
        300,
    )
    yield
    cluster.kubectl("delete", "sr", SR, "--ignore-not-found", "--timeout=180s", check=False)
    if installed.returncode != 0:
        out = sro(cluster, "uninstall", "--timeout", "180")
        assert out.returncode == 0, out.stdout + out.stderr


def test_an_idle_healthy_specialresource_gives_no_violation(
    cluster: LocalCluster, ready: None, namespace: None
) -> None:
    holds_one = pod_spec({"limits": {SIMULATED_GPU.resource: "1"}}, grace=1)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "holder", "namespace": NS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "holder"}},
            "template": {"metadata": {"labels": {"app": "holder"}}, "spec": holds_one},
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(deployment))
    pdb = {
        "apiVersion": "policy/v1beta1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": PDB, "namespace": NS},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "holder"}}},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pdb))
    wait_for(
        "the holder running",
        lambda: any(
            p["status"].get("phase") == "Running" for p in get_json(cluster, "pods", "-n", NS)["items"]
        ),
        90,
    )
    observer = Observer(sr=SR, workload_ns=NS, pdb=PDB, audit_log=Layout().audit_log)
    observer.start()
    try:
        time.sleep(20)
        assert observer.converged(), observer.why_not_converged()
        final = observer.final_checks()
    finally:
        found = observer.stop()
    assert found == [] and final == [], found + final
    assert observer.containers_looked > 0, f"no device look was made: {observer.errors[-5:]}"
    assert 0 < observer.rss_peak_mib < 150, observer.rss_peak_mib
    assert observer.operator_restarts == 0
    cluster.kubectl("delete", "namespace", NS, "--timeout=120s", check=False)
    cluster.kubectl("delete", "sr", SR, "--timeout=180s")
    assert leftovers(SR) == []
