"""Feature discovery on the real local cluster, in its direct-labelling mode (`sro install
--discovery-labels-nodes`; by default it writes only its NodeFeature and the operator applies the
labels, tests/e2e/test_nodefeaturerule.py): the DaemonSet labels the real node, removes a label
when its feature goes (a local feature file deleted on the host) — within seconds even when its
next pass is minutes away, because a file its last pass read changed —, leaves a label it does not
own alone, and `sro discover --cleanup` (run in-cluster with the agent's own service account) leaves
none of its labels. Every object the test creates is deleted at the end; the namespace stays.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sro.api.names import NAMESPACE, NFD_PREFIX
from sro.local.cluster import LocalCluster
from sro.manifests import render, render_text
from sro.nfd.ownership import RULES_OWNED_ANNOTATION
from sro.nfd.ownership import decode_owned as rules_owned
from sro.node.discovery.publishing import OWNED_ANNOTATION, decode_owned
from tests.e2e.helpers import get_json, sro

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

FEATURES_D = Path("/etc/kubernetes/node-feature-discovery/features.d")
FEATURE_FILE = FEATURES_D / "sro-e2e"
OURS = NFD_PREFIX + "sro-e2e-feature"
FOREIGN = NFD_PREFIX + "sro-e2e-foreign"  # set by "someone else" before sro starts
SA = f"system:serviceaccount:{NAMESPACE}:sro-discovery"
AGENT = "app.kubernetes.io/name=sro-discovery"  # the agent's pods


def _node(cluster: LocalCluster) -> tuple[dict[str, str], dict[str, str]]:
    doc = json.loads(cluster.kubectl("get", "node", cluster.node_name, "-o", "json").stdout)
    return doc["metadata"].get("labels", {}), doc["metadata"].get("annotations", {})


def _until(what: str, check: Callable[[], bool], cluster: LocalCluster, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(1)
    logs = cluster.kubectl(
        "-n", NAMESPACE, "logs", "-l", AGENT, "--tail=50", check=False
    )  # fmt: skip
    pods = cluster.kubectl("-n", NAMESPACE, "get", "pods", "-o", "wide", check=False).stdout
    pytest.fail(
        f"timed out waiting for {what}; node labels: {_node(cluster)[0]}\npods:\n{pods}\nlogs:\n{logs.stdout}"
    )


@pytest.fixture
def deployed(cluster: LocalCluster, sro_image: str, request: pytest.FixtureRequest) -> Iterator[str]:
    interval = getattr(request, "param", "2s")  # the agent's core.sleepInterval
    values = {
        "namespace": NAMESPACE,
        "image": sro_image,
        "pull_policy": "Never",
        "discovery_labels_nodes": True,
    }
    manifests = render_text("discovery", **values, sleep_interval=interval)
    objects = [d for d in render("discovery", **values) if d]
    # a benchmark (or a run stopped half-way) may have left sro installed: its operator keeps the
    # installed discovery's NodeFeature labels on the node, the very labels this agent must own
    if get_json(cluster, "deployments", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=sro-operator")[
        "items"
    ]:
        out = sro(cluster, "uninstall", "--timeout", "180")
        assert out.returncode == 0, out.stdout + out.stderr
    # the operator's NodeFeatureRule step may have left the labels it applied, with its record, from
    # an earlier test or benchmark (`sro uninstall` keeps feature labels): the agent rightly leaves
    # another owner's labels alone, so the node starts without them, as `sro discover --cleanup` does
    labels, annotations = _node(cluster)
    applied = [f"{k}-" for k in rules_owned(annotations.get(RULES_OWNED_ANNOTATION)).labels if k in labels]
    if applied or RULES_OWNED_ANNOTATION in annotations:
        cluster.kubectl("label", "node", cluster.node_name, *applied)
        cluster.kubectl("annotate", "node", cluster.node_name, f"{RULES_OWNED_ANNOTATION}-")
    FEATURES_D.mkdir(parents=True, exist_ok=True)
    FEATURE_FILE.write_text(f"# sro e2e\n{OURS.removeprefix(NFD_PREFIX)}=present\n{FOREIGN}=ours\n")
    cluster.kubectl("label", "node", cluster.node_name, f"{FOREIGN}=theirs", "--overwrite")
    try:
        cluster.kubectl("apply", "-f", "-", input=manifests)
        yield manifests
    finally:
        for obj in reversed(objects):
            if obj["kind"] == "Namespace":
                continue  # shared with the other agents: never deleted by a test
            ns = ["-n", obj["metadata"]["namespace"]] if "namespace" in obj["metadata"] else []
            cluster.kubectl("delete", *ns, obj["kind"].lower(), obj["metadata"]["name"], "--ignore-not-found",
                            "--wait=true", "--timeout=60s", check=False)  # fmt: skip
        cluster.kubectl(
            "-n", NAMESPACE, "delete", "pod", "sro-discovery-cleanup", "--ignore-not-found", check=False
        )
        FEATURE_FILE.unlink(missing_ok=True)
        cluster.kubectl("label", "node", cluster.node_name, f"{FOREIGN}-", check=False)
        # labels a failed run may have left: remove exactly what the record says is ours
        labels, annotations = _node(cluster)
        stale = [f"{k}-" for k in decode_owned(annotations.get(OWNED_ANNOTATION, "")) if k in labels]
        if stale or OWNED_ANNOTATION in annotations:
            cluster.kubectl("label", "node", cluster.node_name, *stale, check=False)
            cluster.kubectl("annotate", "node", cluster.node_name, f"{OWNED_ANNOTATION}-", check=False)


def test_rbac_is_least_privilege(cluster: LocalCluster, deployed: str) -> None:
    def can(*args: str) -> str:
        return cluster.kubectl("auth", "can-i", *args, f"--as={SA}", check=False).stdout.strip()

    assert can("patch", "nodes") == "yes" and can("get", "nodes") == "yes"
    for verb, resource in (("list", "nodes"), ("delete", "nodes"), ("get", "pods"), ("get", "secrets"),
                           ("create", "nodes"), ("update", "nodes")):  # fmt: skip
        assert can(verb, resource) == "no", f"{SA} may {verb} {resource}"


def test_daemonset_labels_the_node_and_tracks_features(cluster: LocalCluster, deployed: str) -> None:
    release = Path("/proc/sys/kernel/osrelease").read_text().strip()

    def labelled() -> bool:
        labels, _ = _node(cluster)
        return labels.get(OURS) == "present" and labels.get(NFD_PREFIX + "kernel-version.full") == release

    _until("the DaemonSet to label the node", labelled, cluster)
    labels, annotations = _node(cluster)
    owned = decode_owned(annotations[OWNED_ANNOTATION])
    assert labels[NFD_PREFIX + "system-os_release.ID"] == "debian"
    assert any(k.startswith(NFD_PREFIX + "cpu-cpuid.") for k in labels)
    assert OURS in owned and NFD_PREFIX + "kernel-version.full" in owned
    # the label someone else set is left alone even though the feature file asks for it
    assert labels[FOREIGN] == "theirs" and FOREIGN not in owned
    # the real node's labels match what `sro discover` finds here (the same code, two paths)
    assert all(labels.get(k) is not None for k in owned)

    FEATURE_FILE.unlink()
    _until("the label to go with its feature file", lambda: OURS not in _node(cluster)[0], cluster)
    labels, annotations = _node(cluster)
    assert labels[NFD_PREFIX + "kernel-version.full"] == release  # everything else stays
    assert labels[FOREIGN] == "theirs"
    assert OURS not in decode_owned(annotations[OWNED_ANNOTATION])

    # uninstall: stop the agent, then `sro discover --cleanup` with the agent's own service account
    cluster.kubectl("-n", NAMESPACE, "delete", "daemonset", "sro-discovery", "--wait=true", "--timeout=90s")
    # the DaemonSet goes at once, its pod later (background deletion): one still running would label
    # the node again after the cleanup, so the cleanup starts only once the agent's pod is gone
    _until(
        "the agent's pod to go",
        lambda: not get_json(cluster, "pods", "-n", NAMESPACE, "-l", AGENT)["items"],
        cluster,
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sro-discovery-cleanup", "namespace": NAMESPACE},
        "spec": {
            "serviceAccountName": "sro-discovery",
            "nodeName": cluster.node_name,
            "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534},
            "containers": [
                {
                    "name": "cleanup",
                    "image": _image(deployed),
                    "imagePullPolicy": "Never",
                    "command": ["sro", "discover", "--cleanup"],
                    "env": [{"name": "NODE_NAME", "value": cluster.node_name}],
                }
            ],
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))

    def done() -> bool:
        phase = cluster.kubectl(
            "-n", NAMESPACE, "get", "pod", "sro-discovery-cleanup", "-o", "jsonpath={.status.phase}", check=False
        ).stdout  # fmt: skip
        if phase == "Failed":
            log = cluster.kubectl("-n", NAMESPACE, "logs", "sro-discovery-cleanup", check=False).stdout
            pytest.fail(f"cleanup pod failed:\n{log}")
        return phase == "Succeeded"

    _until("the cleanup pod", done, cluster)
    labels, annotations = _node(cluster)
    assert OWNED_ANNOTATION not in annotations
    assert not [k for k in owned if k in labels and k != FOREIGN], "cleanup left sro's labels behind"
    assert not any(k.startswith(NFD_PREFIX + "cpu-cpuid.") for k in labels)
    assert labels[FOREIGN] == "theirs"
    assert labels.get("kubernetes.io/hostname")  # the kubelet's own labels untouched


@pytest.mark.parametrize("deployed", ["600s"], indirect=True)
def test_a_changed_feature_file_reaches_the_node_in_seconds_not_at_the_next_pass(
    cluster: LocalCluster, deployed: str
) -> None:
    """With a pass every 10 minutes, a feature file dropped in features.d and then removed still
    labels and unlabels the node within seconds: the agent stats what its last pass read (the
    folder, each file) every second and scans again when one changed (sro.node.discovery.inputs)."""
    _until("the DaemonSet's first pass", lambda: _node(cluster)[0].get(OURS) == "present", cluster)
    extra = FEATURES_D / "sro-e2e-watch"
    label = NFD_PREFIX + "sro-e2e-watch"
    try:
        t0 = time.monotonic()
        extra.write_text(f"{label.removeprefix(NFD_PREFIX)}=yes\n")
        _until(
            "the new feature file's label", lambda: _node(cluster)[0].get(label) == "yes", cluster, timeout=15
        )
        added = time.monotonic() - t0
        t0 = time.monotonic()
        extra.unlink()
        _until("the label to go with its file", lambda: label not in _node(cluster)[0], cluster, timeout=15)
        removed = time.monotonic() - t0
        FEATURE_FILE.write_text(f"{OURS.removeprefix(NFD_PREFIX)}=changed\n")  # a file changed in place
        _until("the changed value", lambda: _node(cluster)[0].get(OURS) == "changed", cluster, timeout=15)
    finally:
        extra.unlink(missing_ok=True)
    print(f"label added {added:.1f} s, removed {removed:.1f} s after the file changed (next pass: 600 s)")


def _image(manifests: str) -> str:
    for line in manifests.splitlines():
        if line.strip().startswith("image:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no image in the rendered DaemonSet")
