"""`sro local restart` on the real local cluster: each daemon the fault campaign restarts is stopped
and started once, and afterwards the node is Ready and a pod started before is still the same running
container (same container ID, no restart) that `kubectl exec` reaches. Restart times are FIGURE lines.
It disrupts every other user of the cluster: run it holding the cluster lock, like every e2e file."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sro.local import supervisor
from sro.local.cluster import LocalCluster
from sro.local.layout import BUSYBOX_IMAGE
from tests.e2e.helpers import figure, sro, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

# etcd and the API server first: the others' clients must come back across them too
ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "containerd")


@pytest.fixture(scope="module")
def pod(cluster: LocalCluster) -> Iterator[tuple[str, str]]:
    ns = f"sro-e2e-restart-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "survivor", "namespace": ns},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "nodeName": cluster.node_name,  # the real node, not a hollow one
            "containers": [
                {
                    "name": "c",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                }
            ],
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))
    cluster.kubectl("-n", ns, "wait", "--for=condition=Ready", "pod/survivor", "--timeout=120s", timeout=130)
    try:
        yield ns, "survivor"
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _container(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any]:
    out = cluster.kubectl("-n", ns, "get", "pod", name, "-o", "json", check=False, timeout=15)
    if out.returncode != 0:
        return {}
    status = json.loads(out.stdout)["status"]
    return {"phase": status.get("phase"), **(status.get("containerStatuses") or [{}])[0]}


@pytest.mark.parametrize("component", ORDER)
def test_restart_keeps_the_node_ready_and_the_running_pod(
    cluster: LocalCluster, pod: tuple[str, str], component: str
) -> None:
    ns, name = pod
    before = _container(cluster, ns, name)
    assert before["phase"] == "Running" and before.get("containerID"), before
    old = supervisor.running(cluster.layout, component)
    assert old is not None, f"{component} is not running"

    t0 = time.monotonic()
    out = sro(cluster, "local", "restart", component, timeout=240)
    took = time.monotonic() - t0
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    # one line per step, each after its time
    for step in (
        rf"SIGTERM to pid {old.pid}",
        r"stopped in [0-9.]+ s",
        r"started, pid \d+",
        r"healthy after [0-9.]+ s",
    ):
        assert re.search(rf"^\s*[0-9.]+s {component}: {step}", text, re.M), text
    new = supervisor.running(cluster.layout, component)
    assert new is not None and new.pid != old.pid

    ready = wait_for(f"node Ready after the {component} restart", cluster.node_ready, 120)
    stopped = re.search(rf"{component}: (stopped in .*)", text)
    figure(
        f"sro local restart {component}: {took:.1f} s ({stopped and stopped.group(1)}), node Ready {ready:.1f} s after"
    )

    def same_container() -> bool:
        now = _container(cluster, ns, name)
        return bool(now) and now["phase"] == "Running" and now.get("ready") is True

    wait_for(f"the pod Running and ready after the {component} restart", same_container, 120)
    after = _container(cluster, ns, name)
    assert after["containerID"] == before["containerID"], (before, after)
    assert after["restartCount"] == before["restartCount"], (before, after)

    # and the node still serves it: exec reaches the same container (its PID 1 is still `sleep`). The
    # kubelet re-dials a restarted containerd with gRPC's backoff: exec may fail for a moment first.
    def exec_works() -> bool:
        out = cluster.kubectl("-n", ns, "exec", name, "--", "cat", "/proc/1/cmdline", check=False, timeout=30)
        return out.returncode == 0 and out.stdout.startswith("sleep")

    reached = wait_for(f"kubectl exec into the pod after the {component} restart", exec_works, 60, every=1)
    figure(f"sro local restart {component}: kubectl exec works {reached:.1f} s after the node is Ready")
