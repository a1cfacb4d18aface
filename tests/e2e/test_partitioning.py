"""Partitioning on the real local cluster: the resource-named taint with the API server's
ExtendedResourceToleration admission plugin, a per-namespace quota, priority and preemption, and a
delete that removes exactly what the SpecialResource created.

The single node carries the taint while these tests run; the module's teardown deletes the
SpecialResource (which takes the taint away) and removes the taint by hand if anything is left, so
later e2e tests are never starved.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sro.api.recipes import SIMULATED_GPU
from sro.demo.partitioning import pod
from sro.local.cluster import LocalCluster
from tests.e2e.helpers import get_json, sro, wait_for
from tests.e2e.test_operator import condition, debug, is_ready, sr_doc

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SR = "simulated-gpu"
RES = SIMULATED_GPU.resource
QUOTA_NS = "sro-e2e-quota"
POD_NS = "sro-e2e-partitioning"
ADMIN_PC = "sro-e2e-admins-own"  # made by hand: deleting the SpecialResource must leave it


def special_resource() -> dict[str, Any]:
    return {
        "apiVersion": "sro.dev/v1alpha1",
        "kind": "SpecialResource",
        "metadata": {"name": SR},
        "spec": {
            "recipe": SR,
            "partitioning": {
                "taint": True,
                "priorities": [
                    {"name": "sro-e2e-gpu-high", "value": 1000000, "description": "accelerated work"},
                    {"name": "sro-e2e-gpu-low", "value": 1000, "description": "batch work"},
                ],
                "quotas": [{"namespace": QUOTA_NS, "limit": 1, "maxPerContainer": 1}],
            },
        },
    }


def create(cluster: LocalCluster, obj: dict[str, Any], check: bool = True) -> Any:
    return cluster.kubectl("create", "-f", "-", input=json.dumps(obj), check=check)


def pod_json(cluster: LocalCluster, name: str, namespace: str) -> dict[str, Any]:
    return dict(get_json(cluster, "pod", name, "-n", namespace))


def our_taints(cluster: LocalCluster) -> list[dict[str, Any]]:
    node = get_json(cluster, "node", cluster.node_name)
    return [t for t in node["spec"].get("taints", []) if t["key"] == RES]


@pytest.fixture(scope="module")
def partitioned(cluster: LocalCluster, sro_image: str) -> Iterator[None]:
    cluster.kubectl("delete", "sr", SR, "--ignore-not-found", "--timeout=120s", check=False)
    for ns in (QUOTA_NS, POD_NS):
        cluster.kubectl("create", "namespace", ns, check=False)
    create(cluster, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": {"name": ADMIN_PC}, "value": 5}, check=False)  # fmt: skip
    out = sro(cluster, "install", "--image", sro_image, "--timeout", "240")
    assert out.returncode == 0, out.stdout + out.stderr
    cluster.kubectl("apply", "-f", "-", input=json.dumps(special_resource()))
    try:
        wait_for(
            "the partitioned SpecialResource Ready",
            lambda: is_ready(cluster),
            300,
            why=lambda: debug(cluster),
        )
        yield
    finally:
        for ns in (QUOTA_NS, POD_NS):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        cluster.kubectl("delete", "sr", SR, "--ignore-not-found", "--timeout=120s", check=False)
        cluster.kubectl(
            "taint", "node", cluster.node_name, f"{RES}-", check=False
        )  # never starve later tests
        cluster.kubectl("delete", "priorityclass", ADMIN_PC, "--ignore-not-found", check=False)
        sro(cluster, "uninstall", "--timeout", "180")


def test_taint_keeps_cpu_pods_off_and_gpu_pods_get_the_toleration_by_admission(
    cluster: LocalCluster, partitioned: None
) -> None:
    assert our_taints(cluster) == [{"key": RES, "value": SR, "effect": "NoSchedule"}]
    create(cluster, pod("cpu-only", POD_NS))
    create(cluster, pod("gpu-user", POD_NS, gpus=1))

    def unschedulable() -> str:
        conds = pod_json(cluster, "cpu-only", POD_NS)["status"].get("conditions", [])
        return next((c.get("message", "") for c in conds if c.get("reason") == "Unschedulable"), "")

    wait_for("the CPU-only pod to be refused by the scheduler", unschedulable, 60)
    assert "taint" in unschedulable() and RES in unschedulable(), unschedulable()
    wait_for(
        "the GPU pod to run",
        lambda: pod_json(cluster, "gpu-user", POD_NS)["status"].get("phase") == "Running",
        90,
    )
    tolerations = pod_json(cluster, "gpu-user", POD_NS)["spec"]["tolerations"]
    assert {
        "key": RES,
        "operator": "Exists",
        "effect": "NoSchedule",
    } in tolerations  # written by the admission plugin
    for name in ("cpu-only", "gpu-user"):
        cluster.kubectl("delete", "pod", name, "-n", POD_NS, "--grace-period=1", check=False)


def test_quota_refuses_the_second_pod(cluster: LocalCluster, partitioned: None) -> None:
    wait_for(
        "the quota",
        lambda: (
            cluster.kubectl("-n", QUOTA_NS, "get", "resourcequota", f"sro-{SR}", check=False).returncode == 0
        ),
        60,
    )
    create(cluster, pod("first", QUOTA_NS, gpus=1))
    refused = create(cluster, pod("second", QUOTA_NS, gpus=1), check=False)
    assert refused.returncode != 0
    assert "exceeded quota" in refused.stderr and f"requests.{RES}" in refused.stderr, refused.stderr
    # the LimitRange max: a container asking for 2 is refused whatever the quota says
    too_big = create(cluster, pod("too-big", QUOTA_NS, gpus=2), check=False)
    assert too_big.returncode != 0 and "maximum" in too_big.stderr, too_big.stderr

    def used_one() -> bool:
        rows = sr_doc(cluster)["status"].get("quotas", [])
        return any(r["namespace"] == QUOTA_NS and r.get("used") == "1" and r["hard"] == "1" for r in rows)

    wait_for("status.quotas to show 1 / 1", used_one, 60)
    out = sro(cluster, "status")
    assert QUOTA_NS in out.stdout and "1 / 1" in out.stdout, out.stdout
    cluster.kubectl("delete", "pod", "first", "-n", QUOTA_NS, "--grace-period=1", check=False)


def test_high_priority_pod_preempts_a_low_priority_one(cluster: LocalCluster, partitioned: None) -> None:
    allocatable = int(get_json(cluster, "node", cluster.node_name)["status"]["allocatable"][RES])
    create(cluster, pod("low", POD_NS, gpus=allocatable, priority="sro-e2e-gpu-low"))
    wait_for(
        "the low-priority pod to hold every device",
        lambda: pod_json(cluster, "low", POD_NS)["status"].get("phase") == "Running",
        90,
    )
    t0 = time.monotonic()
    create(cluster, pod("high", POD_NS, gpus=1, priority="sro-e2e-gpu-high"))
    wait_for(
        "the high-priority pod to run",
        lambda: pod_json(cluster, "high", POD_NS)["status"].get("phase") == "Running",
        120,
    )
    print(f"FIGURE preemption: high-priority pod running {time.monotonic() - t0:.1f} s after creation")
    events = get_json(cluster, "events", "-n", POD_NS, "--field-selector", "involvedObject.name=low")["items"]
    preempted = [e for e in events if e.get("reason") == "Preempted"]
    assert preempted and f"{POD_NS}/high" in preempted[0]["message"], [e.get("message") for e in events]
    for name in ("low", "high"):
        cluster.kubectl(
            "delete", "pod", name, "-n", POD_NS, "--grace-period=1", "--ignore-not-found", check=False
        )


def test_deleting_removes_what_it_created_and_nothing_else(cluster: LocalCluster, partitioned: None) -> None:
    assert condition(sr_doc(cluster), "Degraded").get("status") == "False"
    cluster.kubectl("delete", "sr", SR, "--timeout=120s")
    wait_for("the taint to go", lambda: not our_taints(cluster), 60)
    pcs = {p["metadata"]["name"] for p in get_json(cluster, "priorityclasses")["items"]}
    assert "sro-e2e-gpu-high" not in pcs and "sro-e2e-gpu-low" not in pcs
    assert ADMIN_PC in pcs
    assert (
        cluster.kubectl("-n", QUOTA_NS, "get", "resourcequota,limitrange", "-o", "name").stdout.strip() == ""
    )
