"""The operator on many nodes: hollow nodes (kubemark's real kubelet with a fake runtime) beside the
real one, on the real control plane, walked by a SpecialResource.

The module starts four hollow nodes itself (two kernels, hollow-2's driver failing by a failure
rule) and stops them at the end, so the shared cluster is left with no hollow node. The
SpecialResource selects only hollow nodes, tolerates their taint and points every state's probes
at the rules server (the spec's documented probe options). The tests run in file order: two kernels give two driver DaemonSets; hollow-2 is shown
failed in the per-node table while the others validate; a node added later walks the states in
order; a node removed leaves the table. Validation on hollow nodes proves the gating, never a device.
Then two SpecialResources of the one recipe: the example's on the real node deploys beside the
hollow one (disjoint nodes, no conflict), and a third selecting a hollow node is refused there,
naming the older one (a conflict is by resource and by node, never by recipe name).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sro.api.names import STATE_NAMES, reached_annotation, state_label, validated_label
from sro.api.specialresource import STATE_FIELDS
from sro.local.cluster import LocalCluster
from sro.local.hollowconfig import HOLLOW_LABEL, probe
from tests.e2e.helpers import condition, figure, get_json, sr_doc, sro, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

NS = "sro-system"
SR = "hollow-gpus"
KERNELS = ("6.1.0-18-amd64", "5.10.0-28-amd64")
FAILING = "hollow-2"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "simulated-gpu.yaml"
EXAMPLE_SR = "simulated-gpu"  # the example's, on the real node
LATE = "hollow-late"  # one hollow node, created after SR: refused there
CONFIG = {
    "namePrefix": "hollow",
    "labels": {"sro.dev/simulated-gpu.count": "8"},
    "taints": [f"{HOLLOW_LABEL}=true:NoExecute"],
    "capacity": {"sro.dev/simulated-gpu": "8"},
    "systems": [
        {"kernel": KERNELS[0], "osId": "debian", "osVersion": "12"},
        {"kernel": KERNELS[1], "osId": "debian", "osVersion": "11"},
    ],
    "failures": [{"node": FAILING, "state": "driver"}],
}


def special_resource(port: int) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "recipe": "simulated-gpu",
        "nodeSelector": {HOLLOW_LABEL: "true"},
        "tolerations": [{"key": HOLLOW_LABEL, "operator": "Exists"}],
    }
    for state, field in STATE_FIELDS.items():
        spec[field] = probe(state, port, period=1)
    for field in ("driverValidation", "devicePluginValidation"):
        spec[field]["timeoutSeconds"] = 60
    return {
        "apiVersion": "sro.dev/v1alpha1",
        "kind": "SpecialResource",
        "metadata": {"name": SR},
        "spec": spec,
    }


def status(cluster: LocalCluster) -> dict[str, Any]:
    out = cluster.kubectl("get", "sr", SR, "-o", "json", check=False)
    return dict(json.loads(out.stdout).get("status") or {}) if out.returncode == 0 else {}


def rows(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in status(cluster).get("nodes", [])}


def debug(cluster: LocalCluster) -> str:
    pods = cluster.kubectl("-n", NS, "get", "pods", "-o", "wide", check=False).stdout
    logs = cluster.kubectl(
        "-n", NS, "logs", "-l", "app.kubernetes.io/name=sro-operator", "--tail=30", check=False
    ).stdout
    return f"{pods}\n{json.dumps(status(cluster), indent=1)}\noperator:\n{logs}"


@pytest.fixture(scope="module")
def hollow(cluster: LocalCluster, sro_image: str) -> Iterator[LocalCluster]:
    """sro installed, four hollow nodes Ready; at the end the SpecialResource, the hollow nodes
    (their processes and Node objects) and sro are gone again."""
    cluster.kubectl("delete", "sr", SR, "--ignore-not-found", "--timeout=120s", check=False)
    t0 = time.monotonic()
    try:
        names = cluster.scale_hollow(4, yaml.safe_dump(CONFIG))
        figure(f"4 hollow nodes Ready: {time.monotonic() - t0:.1f} s")
        assert names == [f"hollow-{i}" for i in range(4)]
        out = sro(cluster, "install", "--image", sro_image, "--timeout", "240")
        assert out.returncode == 0, out.stdout + out.stderr
        yield cluster
    finally:
        # the pods on hollow nodes are finalized by their hollow kubelets: the SpecialResources and sro
        # (discovery runs on the hollow nodes too) go before the nodes; once a Node is deleted its pods
        # wait for the pod garbage collector, which kept the namespace's deletion 90 s more
        for name in (LATE, EXAMPLE_SR, SR):
            cluster.kubectl("delete", "sr", name, "--ignore-not-found", "--timeout=180s", check=False)
        out = sro(cluster, "uninstall", "--timeout", "180")
        cluster.hollow().stop()
        assert out.returncode == 0, out.stdout + out.stderr
        left = get_json(cluster, "nodes", "-l", f"{HOLLOW_LABEL}=true")["items"]
        assert not left, f"hollow Node objects left: {[n['metadata']['name'] for n in left]}"
        assert not cluster.hollow().nodes()


@pytest.fixture(scope="module")
def applied(hollow: LocalCluster) -> float:
    t0 = time.monotonic()
    hollow.kubectl("apply", "-f", "-", input=json.dumps(special_resource(hollow.hollow().rules_port())))

    def three_validated() -> bool:
        return status(hollow).get("validatedCount") == 3

    wait_for("3 of the 4 hollow nodes validated", three_validated, 300, 1, why=lambda: debug(hollow))
    took = time.monotonic() - t0
    figure(f"kubectl apply -> 3 hollow nodes validated (1 failing): {took:.1f} s")
    return took


def test_two_kernels_give_two_driver_daemonsets(hollow: LocalCluster, applied: float) -> None:
    dss = get_json(hollow, "daemonsets", "-n", NS, "-l", f"sro.dev/specialresource={SR},sro.dev/state=driver")
    kernels = {}
    for ds in dss["items"]:
        terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        values = {
            e["values"][0]
            for t in terms
            for e in t["matchExpressions"]
            if e["key"].endswith("kernel-version.full")
        }
        kernels[ds["metadata"]["name"]] = values
    assert sorted(v for vs in kernels.values() for v in vs) == sorted(KERNELS), kernels
    assert len(kernels) == 2


def test_the_failing_node_is_shown_failed_while_the_others_validate(
    hollow: LocalCluster, applied: float
) -> None:
    def failed() -> bool:
        st = status(hollow)
        row = {r["name"]: r for r in st.get("nodes", [])}.get(FAILING, {})
        degraded = next((c for c in st.get("conditions", []) if c["type"] == "Degraded"), {})
        # the failing driver's liveness probe makes its pod crash-loop, as a broken driver does
        return row.get("reason") == "CrashLoopBackOff" and degraded.get("status") == "True"

    wait_for(f"{FAILING} shown failed at the driver", failed, 120, 1, why=lambda: debug(hollow))
    st = status(hollow)
    table = {r["name"]: r for r in st["nodes"]}
    assert table[FAILING]["failing"] == "driver" and "state" not in table[FAILING], table[FAILING]
    assert {n for n, r in table.items() if r.get("state") == "validated"} == {
        "hollow-0",
        "hollow-1",
        "hollow-3",
    }
    assert st["nodeCount"] == 4 and st["validatedCount"] == 3
    degraded = next(c for c in st["conditions"] if c["type"] == "Degraded")
    assert FAILING in degraded["message"], degraded
    # the failing node gets nothing past the driver: no state's label, no validation pod
    labels = get_json(hollow, "node", FAILING)["metadata"]["labels"]
    ours = {state_label(SR, s) for s in STATE_NAMES} | {validated_label(SR)}
    assert not ours & set(labels), labels
    pods = get_json(hollow, "pods", "-n", NS, "-l", f"sro.dev/specialresource={SR}")["items"]
    on_failing = {
        p["metadata"]["labels"]["sro.dev/state"] for p in pods if p["spec"].get("nodeName") == FAILING
    }
    assert on_failing == {"driver"}, on_failing


def test_a_node_added_later_walks_the_states_in_order(hollow: LocalCluster, applied: float) -> None:
    t0 = time.monotonic()
    hollow.scale_hollow(5, None)

    def validated() -> bool:
        return rows(hollow).get("hollow-4", {}).get("state") == "validated"

    wait_for("hollow-4 validated", validated, 240, 1, why=lambda: debug(hollow))
    figure(f"a hollow node added later -> validated: {time.monotonic() - t0:.1f} s")
    ann = get_json(hollow, "node", "hollow-4")["metadata"]["annotations"][reached_annotation(SR)]
    times = dict(kv.split("=", 1) for kv in ann.split(","))
    order = [times["selected"], *(times[s] for s in STATE_NAMES), times["validated"]]
    assert order == sorted(order), times
    assert status(hollow)["validatedCount"] == 4


def test_a_node_removed_leaves_the_table(hollow: LocalCluster, applied: float) -> None:
    hollow.scale_hollow(4, None)

    def gone() -> bool:
        st = status(hollow)
        return "hollow-4" not in rows(hollow) and st.get("nodeCount") == 4

    wait_for("hollow-4 out of the table", gone, 120, 1, why=lambda: debug(hollow))
    assert hollow.kubectl("get", "node", "hollow-4", check=False).returncode != 0


def test_a_second_special_resource_of_the_recipe_deploys_on_its_own_nodes(
    hollow: LocalCluster, applied: float
) -> None:
    """The example's SpecialResource (the real node) beside the hollow one: both of recipe
    simulated-gpu, on disjoint nodes: both deploy, neither refuses a node."""
    t0 = time.monotonic()
    hollow.kubectl("apply", "-f", str(EXAMPLE))
    try:

        def example_ready() -> bool:
            return condition(sr_doc(hollow, EXAMPLE_SR), "Ready").get("status") == "True"

        wait_for("the example's SpecialResource Ready beside the hollow one", example_ready, 300, 1,
                 why=lambda: debug(hollow) + json.dumps(sr_doc(hollow, EXAMPLE_SR).get("status"), indent=1))  # fmt: skip
        figure(f"a second SpecialResource of the recipe (the real node) Ready: {time.monotonic() - t0:.1f} s")
        example = sr_doc(hollow, EXAMPLE_SR)["status"]
        assert [r["name"] for r in example["nodes"]] == [hollow.node_name], example
        assert example["nodeCount"] == 1 and example["validatedCount"] == 1
        assert condition(sr_doc(hollow, EXAMPLE_SR), "Degraded").get("status") == "False"
        st = status(hollow)
        assert st["validatedCount"] == 3 and st["nodeCount"] == 4, st
        assert "refused" not in json.dumps([example, st])
        # each SpecialResource's DaemonSets are its own (named after it), on its own nodes
        mine = get_json(hollow, "daemonsets", "-n", NS, "-l", f"sro.dev/specialresource={EXAMPLE_SR}")
        assert mine["items"] and all(
            d["metadata"]["name"].startswith(f"sro-{EXAMPLE_SR}-") for d in mine["items"]
        )
    finally:
        hollow.kubectl("delete", "sr", EXAMPLE_SR, "--ignore-not-found", "--timeout=180s", check=False)
    assert not sr_doc(hollow, EXAMPLE_SR), "the example's SpecialResource was not deleted"


def test_a_later_special_resource_is_refused_on_a_node_an_older_one_holds(
    hollow: LocalCluster, applied: float
) -> None:
    late = special_resource(hollow.hollow().rules_port())
    late["metadata"]["name"] = LATE
    late["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "hollow-0"}
    hollow.kubectl("apply", "-f", "-", input=json.dumps(late))
    try:

        def refused() -> bool:
            return condition(sr_doc(hollow, LATE), "Degraded").get("reason") == "ResourceConflict"

        wait_for(
            f"{LATE} refused on hollow-0", refused, 60, 0.5, why=lambda: json.dumps(sr_doc(hollow, LATE))
        )
        doc = sr_doc(hollow, LATE)
        assert repr(SR) in condition(doc, "Degraded")["message"], doc["status"]
        assert condition(doc, "Ready")["status"] == "False"
        assert (
            doc["status"]["nodes"]
            == [
                {
                    "name": "hollow-0",
                    "state": "refused",
                    "reason": "ResourceConflict",
                    "message": doc["status"]["nodes"][0]["message"],
                }
            ]
            and repr(SR) in doc["status"]["nodes"][0]["message"]
        ), doc["status"]
        assert not get_json(hollow, "daemonsets", "-n", NS, "-l", f"sro.dev/specialresource={LATE}")["items"]
        labels = get_json(hollow, "node", "hollow-0")["metadata"]["labels"]
        assert not {k for k in labels if k.startswith(f"sro.dev/{LATE}.")}, labels
        assert rows(hollow)["hollow-0"]["state"] == "validated"  # the older one keeps it
    finally:
        hollow.kubectl("delete", "sr", LATE, "--ignore-not-found", "--timeout=120s", check=False)
