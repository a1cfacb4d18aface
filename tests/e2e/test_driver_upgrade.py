"""Driver upgrades on the real local cluster: the node walks every step, nothing is lost.

One installation and one SpecialResource for the module; the tests run in file order, each
changing the driver version once:
  1. 550.0-sim → 555.0-sim under a running workload that uses a device, with a PodDisruptionBudget
     that forbids its eviction at first: the node is cordoned, the eviction waits for the PDB, the
     operator's leader is killed meanwhile (the Lease goes to the other replica, which goes on from
     the node's labels and finishes the upgrade; evictions are counted where they are sent, by each
     leader's `sro_operator_api_requests_total{verb="POST",resource="pods/eviction"}`: re-sent each
     pass while the PDB refuses, exactly one more once it allows), the PDB is relaxed, the driver is replaced (the host's files say 555.0-sim),
     validation runs again, the node is uncordoned, and the workload's new pod sees 555.0-sim.
  2. → 560.0-sim while a process on the host holds a device node (an O_PATH descriptor): the
     upgrade waits with that pid shown, and goes on once it exits.
  3. → a driver image that does not exist: the node fails after the timeout, is put back on its
     old driver and left cordoned, the rollout says it is blocked; setting the spec back uncordons it.
Step times come from the node's upgrade record and are printed as FIGURE lines.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sro.api.names import driver_revision_label, upgrade_annotation, upgrade_state_label
from sro.api.recipes import SIMULATED_GPU
from sro.local.cluster import LocalCluster
from sro.local.layout import BUSYBOX_IMAGE
from sro.operator.upgrade.record import UPGRADE_STATES, Record
from tests.e2e.helpers import figure, get_json, sro, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

NS = "sro-system"
SR = "upgrade-gpu"
APPS = "sro-e2e-upgrade"
DRIVER_ROOT = Path(SIMULATED_GPU.driver_root)
STATE_KEY = upgrade_state_label(SR)


# driver replaced -> validated: the whole chain walks again (pods of the later states end first, up
# to their grace period); a broken driver is given BROKEN_TIMEOUT so that it fails fast
TIMEOUT = 180
BROKEN_TIMEOUT = 45


def sr_spec(version: str, image: str = "") -> dict[str, Any]:
    driver: dict[str, Any] = {
        "version": version,
        "upgradePolicy": {"timeoutSeconds": TIMEOUT, "drain": {"timeoutSeconds": 300}},
    }
    if image:
        driver["image"] = image
    return {
        "apiVersion": "sro.dev/v1alpha1",
        "kind": "SpecialResource",
        "metadata": {"name": SR},
        "spec": {"recipe": "simulated-gpu", "driver": driver, "monitoring": {"enabled": False}},
    }


def apply(cluster: LocalCluster, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))


def set_version(
    cluster: LocalCluster, version: str, image: str | None = None, timeout: int = TIMEOUT
) -> None:
    patch: dict[str, Any] = {
        "spec": {"driver": {"version": version, "upgradePolicy": {"timeoutSeconds": timeout}}}
    }
    if image is not None:
        patch["spec"]["driver"]["image"] = image or None
    cluster.kubectl("patch", "sr", SR, "--type=merge", "-p", json.dumps(patch))


def node(cluster: LocalCluster) -> dict[str, Any]:
    return dict(get_json(cluster, "node", cluster.node_name))


def record(cluster: LocalCluster) -> Record | None:
    return Record.from_json(node(cluster)["metadata"].get("annotations", {}).get(upgrade_annotation(SR), ""))


def upgrade_state(cluster: LocalCluster) -> str:
    return str(node(cluster)["metadata"].get("labels", {}).get(STATE_KEY, ""))


def sr_status(cluster: LocalCluster) -> dict[str, Any]:
    return dict(get_json(cluster, "sr", SR).get("status", {}))


def debug(cluster: LocalCluster) -> str:
    pods = cluster.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
    logs = cluster.kubectl(
        "-n", NS, "logs", "-l", "app.kubernetes.io/name=sro-operator", "--tail=40", "--prefix", check=False
    ).stdout
    rec = record(cluster)
    return f"{pods}\nrecord: {rec}\nstatus: {json.dumps(sr_status(cluster), indent=1)}\noperator:\n{logs}"


def host_driver_version() -> str:
    try:
        return str(json.loads((DRIVER_ROOT / "devices.json").read_text()).get("driverVersion", ""))
    except (OSError, ValueError):
        return ""


def workload(image: str) -> list[dict[str, Any]]:
    """A Deployment whose pod uses one device and prints the driver version it sees, and a PDB
    that forbids evicting it (minAvailable 1 of 1)."""
    labels = {"app": "infer"}
    script = "simgpu-smi; echo VERSION-SEEN; sleep 3600"
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APPS}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "infer", "namespace": APPS},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "runtimeClassName": "sro",
                        "terminationGracePeriodSeconds": 1,
                        "containers": [
                            {
                                "name": "work",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "command": ["sh", "-c", script],
                                "resources": {"limits": {SIMULATED_GPU.resource: "1"}},
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "policy/v1beta1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "infer", "namespace": APPS},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
        },
    ]


def app_pods(cluster: LocalCluster) -> list[dict[str, Any]]:
    return list(get_json(cluster, "pods", "-n", APPS, "-l", "app=infer")["items"])


def running_app_pod(cluster: LocalCluster) -> str:
    for p in app_pods(cluster):
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", [])
        )
        if ready and not p["metadata"].get("deletionTimestamp"):
            return str(p["metadata"]["name"])
    return ""


def operand_uids(cluster: LocalCluster) -> dict[str, str]:
    """The SpecialResource's runtime and device-plugin pods (uid per state) that are not stopping."""
    out = get_json(cluster, "pods", "-n", NS, "-l", f"sro.dev/specialresource={SR}")
    return {
        p["metadata"]["labels"].get("sro.dev/state", ""): p["metadata"]["uid"]
        for p in out["items"]
        if p["metadata"]["labels"].get("sro.dev/state") in ("runtime", "device-plugin")
        and not p["metadata"].get("deletionTimestamp")
    }


def steps_figure(label: str, rec: Record) -> None:
    times = {s: rec.entered(s) for s in UPGRADE_STATES if s in rec.steps}
    start = min(t for t in times.values() if t is not None)
    parts = [f"{s} +{(t - start).total_seconds():.0f}s" for s, t in times.items() if t is not None]
    figure(f"{label}: {', '.join(parts)}")


@pytest.fixture(scope="module")
def installed(cluster: LocalCluster, sro_image: str) -> Iterator[None]:
    cluster.kubectl("delete", "sr", SR, "--ignore-not-found", "--timeout=120s", check=False)
    out = sro(cluster, "install", "--image", sro_image, "--timeout", "240")
    assert out.returncode == 0, out.stdout + out.stderr
    yield
    cluster.kubectl("delete", "namespace", APPS, "--ignore-not-found", "--timeout=120s", check=False)
    cluster.kubectl("delete", "sr", SR, "--ignore-not-found", "--timeout=180s", check=False)
    out = sro(cluster, "uninstall", "--timeout", "180")
    assert out.returncode == 0, out.stdout + out.stderr
    assert not node(cluster)["spec"].get("unschedulable"), "the node was left cordoned"
    labels = node(cluster)["metadata"].get("labels", {})
    assert STATE_KEY not in labels and driver_revision_label(SR) not in labels


def lease_holder(cluster: LocalCluster) -> str:
    return str(get_json(cluster, "lease", "sro-operator", "-n", NS)["spec"].get("holderIdentity") or "")


def evictions_sent(cluster: LocalCluster, pod: str) -> int:
    """Eviction requests the operator replica `pod` sent so far (its API request metric; pod IPs are
    reachable from the node). Counted where they are sent: the upgrade record's `evicted` keeps
    each pod once, whatever was sent."""
    ip = get_json(cluster, "pod", pod, "-n", NS)["status"]["podIP"]
    with urllib.request.urlopen(f"http://{ip}:8080/metrics", timeout=10) as resp:
        lines = resp.read().decode().splitlines()
    total = 0.0
    for ln in lines:
        if ln.startswith("sro_operator_api_requests_total{"):
            labels = ln.split("{", 1)[1].split("}", 1)[0]
            if 'verb="POST"' in labels and 'resource="pods/eviction"' in labels:
                total += float(ln.rsplit(" ", 1)[1])
    return int(total)


def is_ready(cluster: LocalCluster) -> bool:
    return bool(sr_status(cluster).get("ready") == "True")


@pytest.fixture(scope="module")
def ready(cluster: LocalCluster, installed: None) -> None:
    apply(cluster, sr_spec("550.0-sim"))
    wait_for(
        "the SpecialResource Ready on 550.0-sim", lambda: is_ready(cluster), 300, why=lambda: debug(cluster)
    )
    assert host_driver_version() == "550.0-sim"


def test_upgrade_under_a_workload_with_a_pdb_and_an_operator_restart(
    cluster: LocalCluster, ready: None
) -> None:
    for doc in workload(BUSYBOX_IMAGE):
        apply(cluster, doc)
    wait_for("the workload running", lambda: running_app_pod(cluster), 120, why=lambda: debug(cluster))
    before = running_app_pod(cluster)
    operands = operand_uids(cluster)
    t0 = time.monotonic()
    set_version(cluster, "555.0-sim")
    wait_for(
        "pods-evicted", lambda: upgrade_state(cluster) == "pods-evicted", 120, why=lambda: debug(cluster)
    )
    assert node(cluster)["spec"].get("unschedulable") is True
    # the PDB forbids the eviction: the pod stays, the node waits, saying which pod; the leader asks
    # again each pass (by design: a refused eviction is retried), so its count grows
    leader = lease_holder(cluster)
    # (the node's label is patched in the pass before its eviction is sent)
    wait_for("the leader asking the eviction", lambda: evictions_sent(cluster, leader) >= 1, 30)
    refused_before = evictions_sent(cluster, leader)
    time.sleep(8)
    refused_after = evictions_sent(cluster, leader)
    assert running_app_pod(cluster) == before
    assert refused_after > refused_before, (refused_before, refused_after)
    assert refused_after - refused_before <= 8, "more than one eviction per second: a hot loop"
    rec = record(cluster)
    assert rec is not None and rec.state == "pods-evicted" and f"{APPS}/{before}" in rec.reason, debug(
        cluster
    )
    # kill the leader meanwhile: the Lease goes to the other replica, which takes over from the
    # node's labels (the PDB still refuses: it asks again, each pass)
    cluster.kubectl("-n", NS, "delete", "pod", leader, "--wait=false")
    took = wait_for(
        "another replica holding the Lease",
        lambda: lease_holder(cluster) not in ("", leader),
        60,
        why=lambda: debug(cluster),
    )
    figure(f"leader killed -> the Lease held by another replica: {took:.1f} s")
    new_leader = lease_holder(cluster)
    cluster.kubectl("-n", NS, "wait", "--for=delete", f"pod/{leader}", "--timeout=90s", check=False)
    wait_for(
        "the new leader asking the eviction",
        lambda: evictions_sent(cluster, new_leader) >= 1,
        60,
        why=lambda: debug(cluster),
    )
    asked = evictions_sent(cluster, new_leader)
    cluster.kubectl("-n", APPS, "delete", "pdb", "infer")
    rec = None

    def done() -> bool:
        nonlocal rec
        rec = record(cluster)
        return rec is not None and rec.state == "done"

    wait_for("the upgrade done", done, 300, why=lambda: debug(cluster))
    figure(
        f"driver upgrade 550.0-sim -> 555.0-sim, one node, workload evicted: {time.monotonic() - t0:.1f} s"
    )
    assert rec is not None
    steps_figure("upgrade steps", rec)
    order = [rec.steps[s] for s in UPGRADE_STATES[:8]]  # upgrade-required ... done, every one entered
    assert order == sorted(order), rec.steps
    assert rec.evicted == (f"{APPS}/{before}",)
    # only what the new driver invalidates was walked again: the device plugin restarted, the
    # runtime kept running (sro.operator.upgrade.rewalk)
    now = operand_uids(cluster)
    assert now["runtime"] == operands["runtime"], (operands, now)
    assert now["device-plugin"] != operands["device-plugin"], (operands, now)
    # the new leader finished it, and asked exactly once more once the PDB allowed it: the eviction
    # it accepts marks the pod terminating, and a terminating pod is never asked again (a pass may
    # fall between our read and the PDB's deletion: at most one refused request more)
    assert lease_holder(cluster) == new_leader, "the Lease changed hands again"
    accepted = evictions_sent(cluster, new_leader) - asked
    assert 1 <= accepted <= 2, f"{accepted} eviction request(s) after the PDB was relaxed"
    time.sleep(6)  # two passes more: none asks again
    assert evictions_sent(cluster, new_leader) - asked == accepted
    figure(
        f"eviction requests: {refused_after - refused_before} re-sent in 8 s while the PDB refused; "
        f"{accepted} once it allowed, none after"
    )
    assert not node(cluster)["spec"].get("unschedulable")
    assert host_driver_version() == "555.0-sim"
    assert is_ready(cluster)
    # the workload's new pod got a device and sees the new driver
    wait_for("the workload back", lambda: running_app_pod(cluster), 120, why=lambda: debug(cluster))
    after = running_app_pod(cluster)
    assert after != before
    logs = cluster.kubectl("logs", "-n", APPS, after).stdout
    assert "555.0-sim" in logs and "VERSION-SEEN" in logs, logs
    # the per-node table
    out = sro(cluster, "upgrade", "status", "--sr", SR)
    assert out.returncode == 0 and "done" in out.stdout and "555.0-sim" in out.stdout, out.stdout + out.stderr
    events = cluster.kubectl(
        "get", "events", "-n", "default", "--field-selector", f"involvedObject.name={cluster.node_name}"
    ).stdout
    assert "UpgradeStarted" in events and "UpgradeDone" in events, events
    cluster.kubectl("delete", "namespace", APPS, "--timeout=120s")


def test_a_process_holding_a_device_blocks_the_upgrade_until_it_exits(
    cluster: LocalCluster, ready: None
) -> None:
    device = sorted(Path("/dev").glob("sro-simgpu[0-9]*"))[0]
    code = f"import os, time; fd = os.open({str(device)!r}, os.O_PATH); print('held', flush=True); time.sleep(600)"
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            set_version(cluster, "560.0-sim")

            def blocked() -> bool:
                rec = record(cluster)
                return (
                    rec is not None and rec.state == "pods-evicted" and f"process {holder.pid}" in rec.reason
                )

            wait_for(f"the upgrade blocked by pid {holder.pid}", blocked, 180, why=lambda: debug(cluster))
            out = sro(cluster, "upgrade", "status", "--sr", SR)
            assert str(holder.pid) in out.stdout, out.stdout
            assert host_driver_version() == "555.0-sim"  # not replaced under the holder
        finally:
            holder.kill()
    wait_for(
        "the upgrade done",
        lambda: (record(cluster) or Record("", "", "")).state == "done",
        240,
        why=lambda: debug(cluster),
    )
    assert host_driver_version() == "560.0-sim"


def test_a_broken_driver_fails_the_node_and_stops_the_rollout(cluster: LocalCluster, ready: None) -> None:
    old_revision = node(cluster)["metadata"]["labels"][driver_revision_label(SR)]
    set_version(cluster, "560.0-sim", image="localhost/sro:no-such-tag", timeout=BROKEN_TIMEOUT)

    def failed() -> bool:
        rec = record(cluster)
        return rec is not None and rec.state == "failed"

    wait_for("the node failed", failed, 240, why=lambda: debug(cluster))
    rec = record(cluster)
    assert rec is not None and f"not validated within {BROKEN_TIMEOUT}s" in rec.reason, rec
    labels = node(cluster)["metadata"]["labels"]
    assert labels[driver_revision_label(SR)] == old_revision  # back on the driver that worked
    assert node(cluster)["spec"].get("unschedulable") is True  # left cordoned, with the reason shown
    assert "failed" in sr_status(cluster)["driverUpgrade"].get("blocked", "")
    out = sro(cluster, "upgrade", "status", "--sr", SR)
    assert out.returncode == 3 and "failed" in out.stdout, out.stdout
    # the old driver comes back and validates
    wait_for("validated on the old driver", lambda: is_ready(cluster), 180, why=lambda: debug(cluster))
    assert host_driver_version() == "560.0-sim"
    # the admin sets the spec back: the node is uncordoned
    set_version(cluster, "560.0-sim", image="")
    wait_for(
        "uncordoned", lambda: not node(cluster)["spec"].get("unschedulable"), 120, why=lambda: debug(cluster)
    )
    assert (record(cluster) or Record("", "", "")).state == "done"
