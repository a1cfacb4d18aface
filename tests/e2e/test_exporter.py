"""The exporter as its DaemonSet (the sro image) against the real kubelet and API server.

The simulated driver and the device plugin come from test_device_plugin's fixtures (4 GPUs, the last
one time-sliced in two under `<resource>.shared`). This test renders the exporter's manifests
(sro/manifests/monitoring 0200-0600) into a namespace of its own, its ClusterRole and binding renamed
so an installed sro keeps its own, with a 2 s interval, and runs two pods sharing the time-sliced
GPU and one holding a whole GPU. Checked on the exporter's /metrics (the pod's IP, from the host):
one series per pod on the shared device with the right pod, namespace, container and vgpu labels;
every source up, which means the pod read its own Node with its service account (get on nodes);
allocatable as the Node says; `sro simulate load` and `sro simulate fault` on the host reach the
readings and the health through the read-only driver root. Everything it made is removed at the end.
"""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from sro.local.cluster import LocalCluster
from sro.manifests import render
from tests.e2e.helpers import figure, get_json, sleeping_pod, wait_for
from tests.e2e.test_device_plugin import RESOURCE, SHARED, busybox, driver, plugin  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.e2e, pytest.mark.root]

NS = "sro-e2e-exporter"
NAME = "sro-e2e-exporter"
SRO = [sys.executable, "-m", "sro"]
MINE = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "Service"}
SAMPLE = re.compile(r"^(\w+)\{(.*)\} (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m and m.group(1) == name:
            out.append((dict(LABEL.findall(m.group(2))), float(m.group(3))))
    return out


def _objects(image: str) -> list[dict[str, Any]]:
    docs = render(
        "monitoring", namespace=NS, image=image, pull_policy="Never", recipe="simulated-gpu", name=NAME,
        interval="2s",
    )  # fmt: skip
    mine = [
        d
        for d in docs
        if d["kind"] in MINE
        and d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "sro-exporter"
    ]
    for d in mine:  # cluster-wide objects of sro install: ours get a name of their own
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            d["metadata"]["name"] = NAME
        if d["kind"] == "ClusterRoleBinding":
            d["roleRef"]["name"] = NAME
    assert {d["kind"] for d in mine} == MINE
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, *mine]


@pytest.fixture(scope="module")
def exporter(cluster: LocalCluster, sro_image: str, plugin: int, busybox: str) -> Iterator[str]:  # noqa: F811
    """The exporter DaemonSet and three GPU pods in NS; yields the exporter's /metrics URL."""
    objs = _objects(sro_image)
    pods = [
        sleeping_pod("share-a", NS, SHARED, busybox),
        sleeping_pod("share-b", NS, SHARED, busybox),
        sleeping_pod("whole", NS, RESOURCE, busybox),
    ]
    cluster_scoped = [d for d in objs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]

    def why() -> str:
        out = cluster.kubectl("get", "pods", "-n", NS, "-o", "wide", check=False).stdout
        logs = cluster.kubectl(
            "logs", "-n", NS, "-l", "app.kubernetes.io/name=sro-exporter", "--tail=40", check=False
        )
        return out + logs.stdout + logs.stderr

    def ready_ip() -> str:
        for p in get_json(cluster, "pods", "-n", NS, "-l", "app.kubernetes.io/name=sro-exporter")["items"]:
            conds = {c["type"]: c["status"] for c in p["status"].get("conditions", [])}
            if conds.get("Ready") == "True" and p["status"].get("podIP"):
                return str(p["status"]["podIP"])
        return ""

    try:
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objs))
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(pods))
        took = wait_for("the exporter pod Ready", ready_ip, timeout=180, why=why)
        figure(f"exporter DaemonSet applied -> pod Ready: {took:.1f}s")
        wait_for(
            "the GPU pods Running",
            lambda: all(
                get_json(cluster, "pod", p["metadata"]["name"], "-n", NS)["status"].get("phase") == "Running"
                for p in pods
            ),
            timeout=120,
            why=why,
        )
        url = f"http://{ready_ip()}:9400/metrics"
        wait_for(
            "the pods in the exporter's series", lambda: 'pod="share-b"' in scrape(url), timeout=60, why=why
        )
        yield url
    finally:
        subprocess.run([*SRO, "simulate", "load", "--all", "--clear"], check=False, capture_output=True)
        subprocess.run([*SRO, "simulate", "fault", "--all", "--clear"], check=False, capture_output=True)
        cluster.kubectl(
            "delete", "namespace", NS, "--ignore-not-found", "--wait=true", timeout=180, check=False
        )
        cluster.kubectl(
            "delete", "--ignore-not-found", "-f", "-", input=yaml.safe_dump_all(cluster_scoped), check=False
        )


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


def test_one_series_per_pod_on_the_time_sliced_device(
    exporter: str,
    cluster: LocalCluster,
    driver: dict[str, Any],  # noqa: F811
) -> None:
    text = scrape(exporter)
    util = samples(text, "DCGM_FI_DEV_GPU_UTIL")
    shared_uuid = driver["devices"][-1]["uuid"]  # type: ignore[index]
    on_shared = sorted((s for s in util if s[0]["UUID"] == shared_uuid), key=lambda s: s[0].get("pod", ""))
    assert [(s[0]["pod"], s[0]["namespace"], s[0]["container"]) for s in on_shared] == [
        ("share-a", NS, "work"),
        ("share-b", NS, "work"),
    ], on_shared
    assert {s[0]["vgpu"] for s in on_shared} == {"1", "2"}  # the two replicas of one GPU
    assert on_shared[0][1] == on_shared[1][1] >= 87  # one device's reading; two pods drive it to ~90 %
    whole = [s for s in util if s[0].get("pod") == "whole"]
    assert len(whole) == 1 and whole[0][0]["UUID"] != shared_uuid and "vgpu" not in whole[0][0]
    assert 42 <= whole[0][1] <= 48
    node = cluster.node_name
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "sro_device_healthy"):
        for labels, _ in samples(text, name):
            assert labels["simulated"] == "true" and labels["Hostname"] == node
            assert labels["device"].startswith("sro-simgpu") and labels["modelName"]
    figure(f"exporter /metrics: {len(text)} bytes, {len(util)} GPU_UTIL series for 4 GPUs and 3 pods")


def test_every_source_is_up_and_the_node_is_read(exporter: str, cluster: LocalCluster) -> None:
    text = scrape(exporter)
    up = {labels["source"]: value for labels, value in samples(text, "sro_exporter_source_up")}
    assert up == {"devices": 1, "kubelet": 1, "node": 1, "config": 1}, up  # node: get on nodes, in-cluster
    allocatable = get_json(cluster, "node", cluster.node_name)["status"]["allocatable"]
    reported = {labels["resource"]: value for labels, value in samples(text, "sro_node_devices_allocatable")}
    assert reported == {r: int(allocatable[r]) for r in (RESOURCE, SHARED)}
    allocated = {labels["resource"]: value for labels, value in samples(text, "sro_node_devices_allocated")}
    assert allocated[SHARED] == 2 and allocated[RESOURCE] >= 1


def test_load_and_fault_from_the_host_reach_the_readings(exporter: str, driver: dict[str, Any]) -> None:  # noqa: F811
    held = {
        labels["UUID"] for labels, _ in samples(scrape(exporter), "DCGM_FI_DEV_GPU_UTIL") if "pod" in labels
    }
    idle = next(d for d in driver["devices"] if d["uuid"] not in held)  # type: ignore[attr-defined]
    uuid = idle["uuid"]

    def reading(name: str) -> float | None:
        found = [v for labels, v in samples(scrape(exporter), name) if labels["UUID"] == uuid]
        return found[0] if found else None

    subprocess.run([*SRO, "simulate", "load", "--device", uuid, "--util", "80", "--memory", "40000"], check=True, capture_output=True)  # fmt: skip
    try:
        took = wait_for(
            "the load in the readings", lambda: 77 <= (reading("DCGM_FI_DEV_GPU_UTIL") or 0) <= 83, timeout=30
        )
        figure(f"exporter: sro simulate load -> reading: {took:.1f}s (interval 2s)")
        assert abs((reading("DCGM_FI_DEV_FB_USED") or 0) - 40000) <= 500
        assert (reading("DCGM_FI_DEV_GPU_TEMP") or 0) >= 65  # temperature follows utilisation
    finally:
        subprocess.run(
            [*SRO, "simulate", "load", "--device", uuid, "--clear"], check=True, capture_output=True
        )
    wait_for("the load cleared", lambda: reading("DCGM_FI_DEV_GPU_UTIL") == 0, timeout=30)

    subprocess.run(
        [*SRO, "simulate", "fault", "--device", uuid, "--xid", "48"], check=True, capture_output=True
    )
    try:
        wait_for("the fault in the health", lambda: reading("sro_device_healthy") == 0, timeout=30)
        assert reading("DCGM_FI_DEV_XID_ERRORS") == 48 and reading("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") == 1
    finally:
        subprocess.run(
            [*SRO, "simulate", "fault", "--device", uuid, "--clear"], check=True, capture_output=True
        )
