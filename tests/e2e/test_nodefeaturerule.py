"""NodeFeatureRules on the real local cluster: NFD's CRDs, a NodeFeature as `sro discover` writes it,
and the operator's NodeFeatureRule step as it runs in the cluster: `sro install` from the local image
(two replicas, leader election), so every read and write is the leader's, under the operator's own
service account and roles (a missing verb fails here, as it would on a real cluster). The step's
log lines are read from the pod holding the Lease.

The discovery DaemonSet, as `sro install` configures it, writes the node's NodeFeature with its own
service account, owned by the Node, and a rule over it labels the node. A NodeFeatureRule applied →
the node gets its label (with an `@` value from the NodeFeature), its
annotation, its extended resource and its taint; the rule deleted → they all go; a label set by hand,
one with a key the rule also produces, is never touched. Everything the test creates is removed at
the end: the rule, the NodeFeature, the hand label, and sro (`sro uninstall`). Time from `kubectl apply` of
the rule to the label on the node, and back, are printed as FIGURE lines. (`sro install` creates
NFD's CRDs before the operator starts: the step's wait for absent CRDs is a unit test,
tests/unit/operator/test_nfd_loop.py.)
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sro.api.names import NAMESPACE
from sro.kube.client import sync_client
from sro.kube.nodefeatures import NodeFeatureClient
from sro.local.cluster import LocalCluster
from sro.manifests import render, render_text
from sro.nfd.ownership import FEATURE_LABELS_ANNOTATION as FEATURE_LABELS
from sro.nfd.ownership import RULES_OWNED_ANNOTATION, decode_owned
from sro.node.discovery.nodefeature import NodeFeatureWriter
from tests.e2e.helpers import figure, get_json, sro, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

NS = "default"  # a vendor's NodeFeature may live anywhere; this one is the test's
NF_NAME = "sro-e2e-nodefeature"
RULE = "sro-e2e-rule"
HAND = "example.com/sro-e2e-hand"  # set by hand; the rule produces the same key
RULE_LABEL = "example.com/sro-e2e-rule"
DYNAMIC = "feature.node.kubernetes.io/sro-e2e-kernel-major"
NOTE = "example.com/sro-e2e-note"
RESOURCE = "example.com/sro-e2e-widgets"
TAINT = "example.com/sro-e2e"
AGENT_LABEL = "example.com/sro-e2e-from-agent"
FEATURES_D = Path("/etc/kubernetes/node-feature-discovery/features.d")
FEATURE = "feature.node.kubernetes.io/sro-e2e-nodefeature"


def node(cluster: LocalCluster) -> dict[str, Any]:
    return dict(get_json(cluster, "node", cluster.node_name))


def rule_doc() -> dict[str, Any]:
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeatureRule",
        "metadata": {"name": RULE},
        "spec": {
            "rules": [
                {
                    "name": "sro e2e",
                    "labels": {RULE_LABEL: "true", DYNAMIC: "@kernel.version.major", HAND: "from-the-rule"},
                    "annotations": {NOTE: "@system.osrelease.ID"},
                    "extendedResources": {RESOURCE: "3"},
                    "taints": [{"key": TAINT, "value": "true", "effect": "PreferNoSchedule"}],
                    "matchFeatures": [
                        {"feature": "kernel.version", "matchExpressions": {"major": {"op": "Exists"}}},
                        {"feature": "system.osrelease", "matchExpressions": {"ID": {"op": "Exists"}}},
                    ],
                },
                # a malformed rule (a bad regular expression passes the schema): skipped, logged
                {
                    "name": "broken",
                    "labels": {"example.com/sro-e2e-never": "true"},
                    "matchFeatures": [
                        {
                            "feature": "kernel.version",
                            "matchExpressions": {"full": {"op": "InRegexp", "value": ["("]}},
                        }
                    ],
                },
            ]
        },
    }


def remove_leftovers(cluster: LocalCluster) -> None:
    """Whatever a failed run may have left on the node, by exactly the keys this test uses."""
    cluster.kubectl(
        "label",
        "node",
        cluster.node_name,
        f"{HAND}-",
        f"{RULE_LABEL}-",
        f"{DYNAMIC}-",
        f"{AGENT_LABEL}-",
        check=False,
    )
    cluster.kubectl("annotate", "node", cluster.node_name, f"{NOTE}-", check=False)
    record = node(cluster)["metadata"].get("annotations", {}).get(RULES_OWNED_ANNOTATION)
    owned = decode_owned(record)
    mine = {HAND, RULE_LABEL, DYNAMIC, AGENT_LABEL, NOTE, RESOURCE}
    if record and set(owned.labels | owned.annotations | owned.extended_resources) <= mine:
        # the step's record of this test's outputs only (another rule's outputs would be listed too)
        cluster.kubectl("annotate", "node", cluster.node_name, f"{RULES_OWNED_ANNOTATION}-", check=False)
    cluster.kubectl("taint", "node", cluster.node_name, f"{TAINT}:PreferNoSchedule-", check=False)
    if RESOURCE in (node(cluster).get("status", {}).get("capacity") or {}):
        from lightkube.resources.core_v1 import Node
        from lightkube.types import PatchType

        with sync_client(cluster.kubeconfig) as client:
            client.patch(Node.Status, cluster.node_name, {"status": {"capacity": {RESOURCE: None}}},
                         patch_type=PatchType.MERGE)  # fmt: skip


def _owned(md: dict[str, Any]) -> Any:
    return decode_owned(md.get("annotations", {}).get(RULES_OWNED_ANNOTATION))


def leader_log(cluster: LocalCluster) -> str:
    """The log of the operator replica holding the Lease (the one whose step acts)."""
    lease = cluster.kubectl("-n", NAMESPACE, "get", "lease", "sro-operator", "-o", "json", check=False)
    if lease.returncode:
        return "(no Lease yet)"
    leader = json.loads(lease.stdout)["spec"].get("holderIdentity") or ""
    return cluster.kubectl("-n", NAMESPACE, "logs", leader, check=False).stdout if leader else "(no leader)"


@pytest.fixture(scope="module")
def step(cluster: LocalCluster, sro_image: str) -> Iterator[Callable[[], str]]:
    """The operator installed (its NodeFeatureRule step runs in the leader); yields the leader's log."""
    remove_leftovers(cluster)
    cluster.kubectl("delete", "nodefeaturerule", RULE, "--ignore-not-found", check=False)
    out = sro(cluster, "install", "--image", sro_image, "--timeout", "240")
    assert out.returncode == 0, out.stdout + out.stderr
    try:
        wait_for("a replica holding the Lease", lambda: leader_log(cluster) not in ("(no Lease yet)", "(no leader)"),
                 60, why=lambda: leader_log(cluster))  # fmt: skip
        yield lambda: leader_log(cluster)
    finally:
        # the rule and the NodeFeature go first, while the step runs: it takes back what it applied
        cluster.kubectl("delete", "nodefeaturerule", RULE, "--ignore-not-found", check=False)
        cluster.kubectl("-n", NS, "delete", "nodefeature", NF_NAME, "--ignore-not-found", check=False)
        with contextlib.suppress(AssertionError):
            wait_for("the step to take back its outputs",
                     lambda: RULE_LABEL not in node(cluster)["metadata"].get("labels", {}), 20)  # fmt: skip
        out = sro(cluster, "uninstall", "--timeout", "180")
        remove_leftovers(cluster)
        assert out.returncode == 0, out.stdout + out.stderr


@pytest.fixture(scope="module")
def nodefeature(cluster: LocalCluster, step: Callable[[], str]) -> dict[str, Any]:
    """This node's NodeFeature as `sro discover` makes it (its dry run), written with the agent's own
    writer and client; under the test's name, so that it never meets a discovery agent's object."""
    out = sro(cluster, "discover", "-o", "nodefeature", "--node-name", cluster.node_name)
    assert out.returncode == 0, out.stderr
    doc = yaml.safe_load(out.stdout)
    uid = node(cluster)["metadata"]["uid"]
    doc["metadata"].update(name=NF_NAME, namespace=NS)
    doc["metadata"]["labels"].pop("app.kubernetes.io/managed-by")  # not the agent's: a vendor's object
    doc["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Node", "name": cluster.node_name, "uid": uid}
    ]
    with sync_client(cluster.kubeconfig) as client:
        writer = NodeFeatureWriter(NodeFeatureClient(client))
        assert writer.publish(doc) == "created"
        assert writer.publish(doc) == "unchanged"  # what the server keeps is what was sent: no write per pass
    return doc


def test_a_rule_labels_the_node_and_its_deletion_takes_everything_back(
    cluster: LocalCluster, step: Callable[[], str], nodefeature: dict[str, Any]
) -> None:
    stored = get_json(cluster, "nodefeature", "-n", NS, NF_NAME)
    assert stored["metadata"]["ownerReferences"][0]["kind"] == "Node"  # garbage-collected with the node
    major = nodefeature["spec"]["features"]["attributes"]["kernel.version"]["elements"]["major"]
    os_id = nodefeature["spec"]["features"]["attributes"]["system.osrelease"]["elements"]["ID"]
    cluster.kubectl("label", "node", cluster.node_name, f"{HAND}=mine")

    t0 = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=json.dumps(rule_doc()))
    took = wait_for(
        "the rule's label on the node",
        lambda: node(cluster)["metadata"].get("labels", {}).get(RULE_LABEL) == "true",
        90,
        why=step,
    )
    figure(f"NodeFeatureRule applied -> label on the node: {took:.1f} s")
    wait_for("the extended resource and the taint", lambda: RESOURCE in node(cluster)["status"].get("capacity", {})
             and any(t["key"] == TAINT for t in node(cluster)["spec"].get("taints", [])), 30, why=step)  # fmt: skip
    n = node(cluster)
    labels, annotations = n["metadata"]["labels"], n["metadata"]["annotations"]
    assert labels[DYNAMIC] == major and annotations[NOTE] == os_id
    assert labels[HAND] == "mine"  # set by hand: the rule's value never replaces it
    assert n["status"]["capacity"][RESOURCE] == "3"
    assert {"key": TAINT, "value": "true", "effect": "PreferNoSchedule"} in n["spec"]["taints"]
    assert "example.com/sro-e2e-never" not in labels
    took = wait_for("the kubelet to make the resource allocatable",
                    lambda: node(cluster)["status"].get("allocatable", {}).get(RESOURCE) == "3", 60)  # fmt: skip
    figure(f"extended resource in capacity -> allocatable (the kubelet): {took:.1f} s")
    log = step()
    assert f"NodeFeatureRule {RULE} spec.rules[1].matchFeatures[0].matchExpressions.full.value[0]" in log
    assert f"label {HAND}" in log and "left alone" in log
    assert time.monotonic() - t0 < 120

    t1 = time.monotonic()
    cluster.kubectl("delete", "nodefeaturerule", RULE)

    def all_gone() -> bool:
        n = node(cluster)
        md = n["metadata"]
        return (
            not {RULE_LABEL, DYNAMIC} & set(md.get("labels", {}))
            and NOTE not in md.get("annotations", {})
            # the step's ownership record lists none of the rule's outputs (with sro installed it
            # also lists the discovery labels it applies from the agent's NodeFeature: it stays)
            and not {RULE_LABEL, DYNAMIC, NOTE, RESOURCE}
            & set(_owned(md).labels | _owned(md).annotations | _owned(md).extended_resources)
            and RESOURCE not in n["status"].get("capacity", {})
            and not any(t["key"] == TAINT for t in n["spec"].get("taints", []))
        )

    took = wait_for("everything the rule made to go", all_gone, 90, why=step)
    figure(
        f"NodeFeatureRule deleted -> its label, annotation, resource and taint gone: {time.monotonic() - t1:.1f} s"
    )
    assert node(cluster)["metadata"]["labels"][HAND] == "mine"  # still there, still the hand's value


def test_discovery_in_the_cluster_writes_the_nodefeature_the_rules_read(
    cluster: LocalCluster, sro_image: str, step: Callable[[], str]
) -> None:
    """The discovery DaemonSet as `sro install` configures it (NodeFeature API on, no node labels)
    writes the node's NodeFeature, its labels included, with its own account, which may not patch
    Nodes; the step applies those labels (as nfd-master does nfd-worker's) and a rule over it labels
    the node. A discovery
    DaemonSet already running (an installation someone left up) is used as it is and left alone;
    otherwise the test deploys one and afterwards removes it and puts the node's labels back."""
    cluster.kubectl("-n", NS, "delete", "nodefeature", NF_NAME, "--ignore-not-found")  # only the agent's now
    running = (
        cluster.kubectl("-n", NAMESPACE, "get", "daemonset", "sro-discovery", check=False).returncode == 0
    )
    before = node(cluster)["metadata"]
    before_labels = dict(before.get("labels", {}))
    before_record = before.get("annotations", {}).get(FEATURE_LABELS)
    before_applied = before.get("annotations", {}).get(RULES_OWNED_ANNOTATION)
    values = {"namespace": NAMESPACE, "image": sro_image, "pull_policy": "Never", "sleep_interval": "2s"}
    objects = [] if running else render("discovery", **values)
    agent_nf = ["-n", NAMESPACE, "nodefeature", cluster.node_name]
    feature_file = FEATURES_D / "sro-e2e-nodefeature"
    rule = {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeatureRule",
        "metadata": {"name": f"{RULE}-agent"},
        "spec": {"rules": [{"name": "from the agent", "labels": {AGENT_LABEL: "@system.osrelease.ID"},
                            "matchFeatures": [{"feature": "cpu.cpuid", "matchName": {"op": "Exists"}}]}]},
    }  # fmt: skip

    def agent_logs() -> str:
        args = ("-n", NAMESPACE, "logs", "-l", "app.kubernetes.io/name=sro-discovery", "--tail=20")
        return cluster.kubectl(*args, check=False).stdout

    try:
        if not running:
            cluster.kubectl("apply", "-f", "-", input=render_text("discovery", **values))
        wait_for("the agent's NodeFeature", lambda: cluster.kubectl("get", *agent_nf, check=False).returncode == 0,
                 120, why=agent_logs)  # fmt: skip
        doc = get_json(cluster, *agent_nf)
        uid = node(cluster)["metadata"]["uid"]
        assert doc["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": cluster.node_name, "uid": uid}
        ]
        assert doc["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"] == cluster.node_name
        # the labels are in the NodeFeature for the operator to apply: the agent may not patch Nodes
        account = f"--as=system:serviceaccount:{NAMESPACE}:sro-discovery"
        can = cluster.kubectl("auth", "can-i", "patch", "nodes", account, check=False).stdout.strip()
        assert can == "no"
        kernel = "feature.node.kubernetes.io/kernel-version.full"
        assert doc["spec"]["labels"][kernel]
        took = wait_for("the agent's labels applied by the step",
                        lambda: kernel in decode_owned(node(cluster)["metadata"].get("annotations", {})
                                                       .get(RULES_OWNED_ANNOTATION)).labels, 60,
                        why=step)  # fmt: skip
        figure(f"NodeFeature labels -> on the node through the step: {took:.1f} s")
        assert node(cluster)["metadata"]["labels"][kernel] == doc["spec"]["labels"][kernel]
        # a feature that comes and goes on the host: its label arrives and goes through the operator
        # (latency: the agent's interval, 10 s as installed, plus the step's event-driven pass)
        feature_file.parent.mkdir(parents=True, exist_ok=True)
        feature_file.write_text(f"{FEATURE.removeprefix('feature.node.kubernetes.io/')}=yes\n")
        took = wait_for("a new feature's label through the NodeFeature",
                        lambda: node(cluster)["metadata"]["labels"].get(FEATURE) == "yes", 60, why=step)  # fmt: skip
        figure(
            f"feature file written -> its label on the node (agent interval 10 s + the step): {took:.1f} s"
        )
        feature_file.unlink()
        took = wait_for("the label to go with its feature", lambda: FEATURE not in node(cluster)["metadata"]["labels"],
                        60, why=step)  # fmt: skip
        figure(f"feature file removed -> its label gone: {took:.1f} s")
        cluster.kubectl("apply", "-f", "-", input=json.dumps(rule))
        wait_for("the rule's label from the agent's features",
                 lambda: node(cluster)["metadata"].get("labels", {}).get(AGENT_LABEL) == "debian", 60,
                 why=step)  # fmt: skip
        cluster.kubectl("delete", "nodefeaturerule", rule["metadata"]["name"])
        wait_for("the label to go with the rule", lambda: AGENT_LABEL not in node(cluster)["metadata"]["labels"], 60,
                 why=step)  # fmt: skip
    finally:
        feature_file.unlink(missing_ok=True)
        cluster.kubectl(
            "delete", "nodefeaturerule", rule["metadata"]["name"], "--ignore-not-found", check=False
        )
        if not running:
            for obj in reversed(objects):
                if obj["kind"] == "Namespace":
                    continue  # shared with the other agents: never deleted by a test
                ns = ["-n", obj["metadata"]["namespace"]] if "namespace" in obj["metadata"] else []
                cluster.kubectl("delete", *ns, obj["kind"].lower(), obj["metadata"]["name"], "--ignore-not-found",
                                "--wait=true", "--timeout=60s", check=False)  # fmt: skip
            cluster.kubectl(
                "delete", *agent_nf, "--ignore-not-found", check=False
            )  # the Node owns it: it stays
            now = node(cluster)["metadata"].get("labels", {})
            added = [f"{k}-" for k in now if k not in before_labels]
            back = [f"{k}={v}" for k, v in before_labels.items() if now.get(k) != v]
            if added or back:
                cluster.kubectl("label", "node", cluster.node_name, "--overwrite", *added, *back, check=False)
            restore = (
                f"{FEATURE_LABELS}={before_record}" if before_record is not None else f"{FEATURE_LABELS}-"
            )
            cluster.kubectl("annotate", "node", cluster.node_name, "--overwrite", restore, check=False)
            restore = (
                f"{RULES_OWNED_ANNOTATION}={before_applied}"
                if before_applied is not None
                else f"{RULES_OWNED_ANNOTATION}-"
            )
            cluster.kubectl("annotate", "node", cluster.node_name, "--overwrite", restore, check=False)
