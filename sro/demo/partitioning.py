"""The demo's partitioning stage: the SpecialResource gains `spec.partitioning`, and four pods show
what it does — a CPU-only pod kept off the GPU node, a GPU pod landing there with the toleration
the API server's admission plugin wrote for it, a quota refusing a second pod in a capped
namespace, and a high-priority pod preempting a low-priority one when the devices run out.

Each scenario returns a row (what was tried, what happened, the evidence) for the demo's table;
afterwards the partitioning is taken off again so the node is open to every pod.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from sro.api.recipes import SIMULATED_GPU
from sro.console.progress import Progress
from sro.demo.polling import until
from sro.local.cluster import LocalCluster
from sro.local.layout import BUSYBOX_IMAGE

RES = SIMULATED_GPU.resource
NS = "sro-demo-partitioning"
QUOTA_NS = "sro-demo-team-a"
HIGH, LOW = "sro-demo-gpu-high", "sro-demo-gpu-low"
PARTITIONING = {
    "taint": True,
    "priorities": [
        {"name": HIGH, "value": 1000000, "description": "accelerated work: may preempt batch work"},
        {"name": LOW, "value": 1000, "description": "batch work on GPU nodes"},
    ],
    "quotas": [{"namespace": QUOTA_NS, "limit": 1, "maxPerContainer": 1}],
}


def pod(name: str, namespace: str, gpus: int = 0, priority: str = "", resource: str = RES) -> dict[str, Any]:
    """A busybox pod that sleeps, asking for `gpus` devices of `resource` (none: a CPU-only pod)."""
    c: dict[str, Any] = {
        "name": "c",
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sleep", "3600"],
    }
    if gpus:
        c["resources"] = {"limits": {resource: str(gpus)}}
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 1, "containers": [c]}
    if priority:
        spec["priorityClassName"] = priority
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def _get(cluster: LocalCluster, *args: str) -> dict[str, Any]:
    return dict(json.loads(cluster.kubectl("get", *args, "-o", "json").stdout))


def _phase(cluster: LocalCluster, name: str, ns: str) -> str:
    return str(_get(cluster, "pod", name, "-n", ns)["status"].get("phase", ""))


def run(
    cluster: LocalCluster, sr: str, progress: Progress, resource: str = RES
) -> list[tuple[str, str, str]]:
    """Partition the SpecialResource `sr` (whose devices are `resource`), show the four scenarios,
    take the partitioning off again."""
    rows: list[tuple[str, str, str]] = []
    for ns in (NS, QUOTA_NS):
        cluster.kubectl("create", "namespace", ns, check=False)
    patch = json.dumps({"spec": {"partitioning": PARTITIONING}})
    cluster.kubectl("patch", "sr", sr, "--type", "merge", "-p", patch)
    progress(
        f"  taint {resource}:NoSchedule, PriorityClasses {HIGH}/{LOW}, quota {resource}: 1 in {QUOTA_NS}"
    )
    until("the node's partitioning taint", lambda: any(
        t["key"] == resource for t in _get(cluster, "node", cluster.node_name)["spec"].get("taints", [])))  # fmt: skip
    until(
        "the quota",
        lambda: cluster.kubectl("-n", QUOTA_NS, "get", "resourcequota", check=False).stdout.strip(),
    )
    try:

        def apply(obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
            return cluster.kubectl("create", "-f", "-", input=json.dumps(obj), check=False)

        apply(pod("cpu-only", NS))
        apply(pod("gpu-user", NS, gpus=1, resource=resource))

        def refused() -> str:
            conds = _get(cluster, "pod", "cpu-only", "-n", NS)["status"].get("conditions", [])
            return next((c.get("message", "") for c in conds if c.get("reason") == "Unschedulable"), "")

        rows.append(
            ("CPU-only pod", "kept off the GPU node (Pending)", until("the scheduler's verdict", refused))
        )
        until("the GPU pod to run", lambda: _phase(cluster, "gpu-user", NS) == "Running")
        tol = [
            t
            for t in _get(cluster, "pod", "gpu-user", "-n", NS)["spec"]["tolerations"]
            if t.get("key") == resource
        ]
        rows.append(
            ("GPU pod (no toleration written)", "Running on the GPU node", f"admission added {tol[0]}")
        )
        apply(pod("first", QUOTA_NS, gpus=1, resource=resource))
        second = apply(pod("second", QUOTA_NS, gpus=1, resource=resource))
        rows.append(
            (
                f"2nd GPU pod in {QUOTA_NS}",
                "refused by the quota",
                second.stderr.strip().splitlines()[-1][:160],
            )
        )
        for name in ("cpu-only", "gpu-user"):
            cluster.kubectl("delete", "pod", name, "-n", NS, "--grace-period=1", check=False)
        cluster.kubectl("delete", "pod", "first", "-n", QUOTA_NS, "--grace-period=1", check=False)
        free = int(_get(cluster, "node", cluster.node_name)["status"]["allocatable"][resource])
        apply(pod("batch", NS, gpus=free, priority=LOW, resource=resource))
        until("the low-priority pod to hold every device", lambda: _phase(cluster, "batch", NS) == "Running")
        apply(pod("training", NS, gpus=1, priority=HIGH, resource=resource))
        until("the high-priority pod to run", lambda: _phase(cluster, "training", NS) == "Running", 120)
        events = _get(cluster, "events", "-n", NS, "--field-selector", "involvedObject.name=batch")["items"]
        message = next((e["message"] for e in events if e.get("reason") == "Preempted"), "(no event yet)")
        rows.append((f"high-priority pod, all {free} GPUs taken", "preempted the low-priority pod", message))
    finally:
        for ns in (NS, QUOTA_NS):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        cluster.kubectl(
            "patch",
            "sr",
            sr,
            "--type",
            "json",
            "-p",
            '[{"op": "remove", "path": "/spec/partitioning"}]',
            check=False,
        )
        progress("  partitioning taken off again (taint, PriorityClasses and quota removed by the operator)")
    return rows
