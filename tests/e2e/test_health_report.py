"""The health report channel on the real local cluster: device plugin → report file → discovery's
NodeFeature, the path a fault takes to the operator (issue 24) without the plugin holding a token.

One installation and one simulated-gpu SpecialResource (no remediation: this checks the channel
alone; the device plugin's quiet period 2 s). Xid 79 injected on one device with `sro simulate
fault` (the simulated driver's fault state on the host) → this node's NodeFeature carries the fault
(device, Xid) within 10 s; cleared → gone within 10 s more (the quiet period included); an
application Xid (13) never appears; a pod holding a device is in the report's holders (the
kubelet's pod-resources API, read through the plugin's read-only mount).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sro.api.recipes import SIMULATED_GPU
from sro.devices.driverstate import read_inventory
from sro.devices.healthreport import HealthReport, reports_from_nodefeature
from sro.local.cluster import LocalCluster
from sro.local.layout import BUSYBOX_IMAGE
from tests.e2e.helpers import condition, figure, get_json, sleeping_pod, sr_doc, sro, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(900)]

NS = "sro-system"
SR = "health-report-gpu"
APPS = "sro-e2e-health-report"
DRIVER_ROOT = Path(SIMULATED_GPU.driver_root)
SIM = [sys.executable, "-m", "sro", "simulate", "fault"]


def sr_spec() -> dict[str, Any]:
    return {
        "apiVersion": "sro.dev/v1alpha1",
        "kind": "SpecialResource",
        "metadata": {"name": SR},
        "spec": {
            "recipe": "simulated-gpu",
            "monitoring": {"enabled": False},
            "devicePlugin": {"config": "version: v1\nhealth: {recoverAfterSeconds: 2}\n"},
        },
    }


def report(cluster: LocalCluster) -> HealthReport | None:
    """The simulated GPUs' report on this node's NodeFeature (what the operator reads)."""
    for obj in get_json(cluster, "nodefeatures", "-n", NS)["items"]:
        found = reports_from_nodefeature(obj).get(SIMULATED_GPU.name)
        if found is not None and found.node == cluster.node_name:
            return found
    return None


def debug(cluster: LocalCluster) -> str:
    pods = cluster.kubectl("get", "pods", "-n", NS, "-o", "wide", check=False).stdout
    plugin = cluster.kubectl(
        "logs", "-n", NS, "-l", "app.kubernetes.io/name=sro-device-plugin", "--tail=30", check=False
    ).stdout
    disc = cluster.kubectl(
        "logs", "-n", NS, "-l", "app.kubernetes.io/name=sro-discovery", "--tail=20", check=False
    ).stdout
    files = sorted(p.name for p in Path("/var/lib/sro/health").glob("*"))
    conditions = [(c["type"], c["status"], c.get("message", "")[:160]) for c in sr_doc(cluster, SR).get("status", {}).get("conditions", [])]  # fmt: skip
    return (
        f"{pods}\nconditions: {conditions}\nreport: {report(cluster)}\nfiles: {files}\n"
        f"plugin:\n{plugin}\ndiscovery:\n{disc}"
    )


def leftovers(cluster: LocalCluster) -> list[str]:
    """SpecialResources of the simulated-gpu recipe an earlier run left (the cluster lock means no
    one else's test is running): one would hold the recipe's resource and ours would be refused."""
    out = cluster.kubectl("get", "sr", "-o", "json", check=False)
    if out.returncode != 0:
        return []  # no CRD yet: nothing left over
    items = json.loads(out.stdout)["items"]
    return [i["metadata"]["name"] for i in items if i["spec"].get("recipe") == SIMULATED_GPU.name]


@pytest.fixture(scope="module")
def ready(cluster: LocalCluster, sro_image: str) -> Iterator[None]:
    for name in leftovers(cluster):
        figure(f"health report e2e: deleting the left-over SpecialResource {name} (same recipe)")
        cluster.kubectl("delete", "sr", name, "--ignore-not-found", "--timeout=180s", check=False)
    out = sro(cluster, "install", "--image", sro_image, "--timeout", "240")
    assert out.returncode == 0, out.stdout + out.stderr
    cluster.kubectl("apply", "-f", "-", input=json.dumps(sr_spec()))
    try:
        took = wait_for(
            "the SpecialResource Ready",
            lambda: condition(sr_doc(cluster, SR), "Ready").get("status") == "True",
            300,
            why=lambda: debug(cluster),
        )
        figure(f"health report e2e: SpecialResource Ready in {took:.1f} s")
        subprocess.run([*SIM, "--all", "--clear"], check=False, capture_output=True)
        yield
    finally:
        subprocess.run([*SIM, "--all", "--clear"], check=False, capture_output=True)
        cluster.kubectl("delete", "namespace", APPS, "--ignore-not-found", "--timeout=120s", check=False)
        cluster.kubectl("delete", "sr", SR, "--ignore-not-found", "--timeout=180s", check=False)
        out = sro(cluster, "uninstall", "--timeout", "180")
        assert out.returncode == 0, out.stdout + out.stderr


def test_fault_reaches_the_nodefeature_and_leaves_it(cluster: LocalCluster, ready: None) -> None:
    devices = read_inventory(DRIVER_ROOT).devices
    ids = tuple(str(d.index) for d in devices)
    # Ready does not wait for the plugin's report: the NodeFeature may still carry the one a plugin
    # of an earlier SpecialResource left (a stopped plugin's report stays until the next one writes
    # its own), until discovery's health poll carries the new plugin's, within a second or two
    took = wait_for(
        "this plugin's report on the NodeFeature",
        lambda: getattr(report(cluster), "devices", None) == ids,
        60,
        why=lambda: f"{report(cluster)}\n{debug(cluster)}",
    )
    figure(f"health report e2e: the plugin's report on the NodeFeature {took:.1f} s after Ready")
    first = report(cluster)
    assert first is not None and first.faults == () and first.resource == SIMULATED_GPU.resource
    assert first.devices == ids
    assert first.boot_id  # the simulated driver's boot, or the kernel's
    target = devices[-1]

    # an application's Xid is not a device fault: it never shows
    subprocess.run([*SIM, "--device", str(target.index), "--xid", "13"], check=True, capture_output=True)
    time.sleep(4)
    now = report(cluster)
    assert now is not None and now.faults == (), debug(cluster)

    t0 = time.monotonic()
    subprocess.run([*SIM, "--device", str(target.index), "--xid", "79"], check=True, capture_output=True)

    def faulty() -> bool:
        r = report(cluster)
        return r is not None and any(f.device == str(target.index) and 79 in f.xids for f in r.faults)

    wait_for("Xid 79 on the NodeFeature", faulty, 10, every=0.2, why=lambda: debug(cluster))
    up = time.monotonic() - t0
    r = report(cluster)
    assert r is not None and [f.device for f in r.faults] == [str(target.index)]

    t1 = time.monotonic()
    subprocess.run([*SIM, "--device", str(target.index), "--clear"], check=True, capture_output=True)

    def healed() -> bool:
        r = report(cluster)
        return r is not None and r.faults == ()

    wait_for("the fault gone from the NodeFeature", healed, 12, every=0.2, why=lambda: debug(cluster))
    down = time.monotonic() - t1
    figure(f"health report: fault -> NodeFeature {up:.1f} s; clear -> gone {down:.1f} s (quiet period 2 s)")


def test_a_pod_holding_a_device_is_a_holder(cluster: LocalCluster, ready: None) -> None:
    cluster.kubectl("create", "namespace", APPS, check=False)
    pod = sleeping_pod("holder", APPS, SIMULATED_GPU.resource, BUSYBOX_IMAGE)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))

    def held() -> bool:
        r = report(cluster)
        return r is not None and any(f"{APPS}/holder" in pods for pods in r.holders.values())

    wait_for("the pod among the report's holders", held, 90, why=lambda: debug(cluster))
    cluster.kubectl("delete", "pod", "holder", "-n", APPS, "--timeout=60s", check=False)
    wait_for("the holder gone", lambda: not held(), 30, why=lambda: debug(cluster))
