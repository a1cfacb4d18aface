"""What the remediation e2e cases share (tests/e2e/test_remediation.py): the SpecialResource, the
simulated devices' faults and report, the two Deployments, and a poll that remembers what came and
went while a case waits (a cordon, an eviction, an action pod live only for seconds).

Apart from the cases so that each reads as its story: inject, wait, check what was seen.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sro.api.recipes import SIMULATED_GPU
from sro.devices.driverstate import read_faults, read_inventory
from sro.devices.healthreport import HealthReport, reports_from_nodefeature
from sro.local.cluster import LocalCluster
from sro.local.layout import BUSYBOX_IMAGE
from sro.operator.remediation.record import Record, remediation_annotation
from tests.e2e.helpers import get_json, sr_doc, wait_for

NS = "sro-system"
SR = "remediation-gpu"
APPS = "sro-e2e-remediation"
DRIVER_ROOT = Path(SIMULATED_GPU.driver_root)
RESOURCE = SIMULATED_GPU.resource
SIM = [sys.executable, "-m", "sro", "simulate", "fault"]
TOKEN = "sro.dev/remediation-token"
DEVICES = "sro.dev/remediation-devices"
GPU_HEALTHY = "GpuHealthy"
ATTEMPTS = 5  # the cases' default: case 3 lowers it to 1 for a while


def sr_spec() -> dict[str, Any]:
    return {
        "apiVersion": "sro.dev/v1alpha1",
        "kind": "SpecialResource",
        "metadata": {"name": SR},
        "spec": {
            "recipe": "simulated-gpu",
            "monitoring": {"enabled": False},
            # a reset device is healthy again 2 s after its fault clears (the default is 60 s)
            "devicePlugin": {"config": "version: v1\nhealth: {recoverAfterSeconds: 2}\n"},
            "remediation": {"maxAttempts": ATTEMPTS, "window": "1h"},
        },
    }


def patch_remediation(cluster: LocalCluster, **fields: Any) -> None:
    patch = {"spec": {"remediation": fields}}
    cluster.kubectl("patch", "sr", SR, "--type=merge", "-p", json.dumps(patch))


def node(cluster: LocalCluster) -> dict[str, Any]:
    return dict(get_json(cluster, "node", cluster.node_name))


def gpu_condition(doc: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in doc["status"].get("conditions", []) if c["type"] == GPU_HEALTHY), {})


def record_of(doc: dict[str, Any]) -> Record | None:
    text = doc["metadata"].get("annotations", {}).get(remediation_annotation(SR), "")
    return Record.from_json(text)


def history(rec: Record | None) -> tuple[Any, ...]:
    """What a remediation that did nothing leaves as it was (a done record forgets its fault's
    devices a pass after it is cleared: not a change of ours)."""
    return () if rec is None else (rec.state, rec.attempts, dict(rec.steps), rec.cordoned)


def record(cluster: LocalCluster) -> Record | None:
    return record_of(node(cluster))


def cordoned(cluster: LocalCluster) -> bool:
    return bool(node(cluster)["spec"].get("unschedulable"))


def events(cluster: LocalCluster, name: str, since: float = 0.0) -> list[dict[str, Any]]:
    """The Remediation* events on object `name` last seen at or after `since` (a wall-clock time:
    an earlier run's events live on for an hour and must not answer for this one)."""
    out = get_json(cluster, "events", "-A", "--field-selector", f"involvedObject.name={name}")
    found = []
    for e in out["items"]:
        when = e.get("lastTimestamp") or e.get("eventTime") or e["metadata"]["creationTimestamp"]
        if e["reason"].startswith("Remediation") and wall_time(when) >= int(since):
            found.append(e)
    return found


def wall_time(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def reasons(cluster: LocalCluster, name: str, since: float) -> set[str]:
    return {e["reason"] for e in events(cluster, name, since)}


def debug(cluster: LocalCluster) -> str:
    pods = cluster.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
    logs = cluster.kubectl(
        "-n", NS, "logs", "-l", "app.kubernetes.io/name=sro-operator", "--tail=40", "--prefix", check=False
    ).stdout
    doc = node(cluster)
    status = sr_doc(cluster, SR).get("status", {})
    evs = [(e["type"], e["reason"], e["message"][:200]) for e in events(cluster, cluster.node_name)[-15:]]
    return (
        f"{pods}\nunschedulable: {doc['spec'].get('unschedulable')}\ncondition: {gpu_condition(doc)}\n"
        f"record: {record_of(doc)}\nfaults on the host: {faults()}\nevents: {evs}\n"
        f"status.remediation: {status.get('remediation')}\nrows: {status.get('nodes')}\noperator:\n{logs}"
    )


# ---- the simulated devices ------------------------------------------------------------------------
def device_names(uuid: str) -> set[str]:
    """How a report may name the device: its UUID or its index."""
    for d in read_inventory(DRIVER_ROOT).devices:
        if d.uuid == uuid:
            return {uuid, str(d.index)}
    return {uuid}


def uuid_of(visible: str) -> str:
    """The UUID of the device a pod's SRO_VISIBLE_DEVICES names (a UUID or an index)."""
    for d in read_inventory(DRIVER_ROOT).devices:
        if visible in (d.uuid, str(d.index)):
            return str(d.uuid)
    raise AssertionError(f"no simulated device {visible!r}")


def faults() -> dict[str, int]:
    try:
        return {str(u): f.xid for u, f in read_faults(DRIVER_ROOT).items()}
    except Exception as e:  # the driver root may be mid-write or gone: say so in the debug text
        return {"<unreadable>": -1, str(e)[:80]: -1}


def report(cluster: LocalCluster) -> HealthReport | None:
    """The simulated GPUs' health report on this node's NodeFeature (what the operator reads)."""
    for obj in get_json(cluster, "nodefeatures", "-n", NS)["items"]:
        found = reports_from_nodefeature(obj).get(SIMULATED_GPU.name)
        if found is not None and found.node == cluster.node_name:
            return found
    return None


def holds(rep: HealthReport | None, names: set[str], pod: str) -> bool:
    return rep is not None and any(pod in rep.holders.get(n, ()) for n in names)


def inject(uuid: str, xid: int) -> float:
    """Inject Xid `xid` on device `uuid` on the host; returns the monotonic time it was written."""
    subprocess.run([*SIM, "--device", uuid, "--xid", str(xid)], check=True, capture_output=True)
    return time.monotonic()


def clear_all() -> None:
    subprocess.run([*SIM, "--all", "--clear"], check=False, capture_output=True)


# ---- the workload: two Deployments, one GPU each ------------------------------------------------
def deployment(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": APPS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "work",
                            "image": BUSYBOX_IMAGE,
                            "imagePullPolicy": "Never",
                            "command": [
                                "sh",
                                "-c",
                                f"echo DEV=${SIMULATED_GPU.visible_devices_env}; sleep 3600",
                            ],
                            "resources": {"limits": {RESOURCE: "1"}},
                        }
                    ],
                },
            },
        },
    }


@dataclass(frozen=True)
class Workload:
    pod: str
    uid: str
    device: str  # the UUID of the device it holds


def running(cluster: LocalCluster, app: str) -> Workload | None:
    for p in get_json(cluster, "pods", "-n", APPS, "-l", f"app={app}")["items"]:
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", [])
        )
        if not ready or p["metadata"].get("deletionTimestamp"):
            continue
        log = cluster.kubectl("logs", "-n", APPS, p["metadata"]["name"], check=False).stdout
        dev = next((ln[4:].strip() for ln in log.splitlines() if ln.startswith("DEV=")), "")
        if dev:
            return Workload(p["metadata"]["name"], p["metadata"]["uid"], uuid_of(dev.split(",")[0]))
    return None


def wait_running(cluster: LocalCluster, app: str, timeout: float = 120) -> Workload:
    wait_for(f"{app}'s pod running", lambda: running(cluster, app), timeout, why=lambda: debug(cluster))
    found = running(cluster, app)
    assert found is not None
    return found


def all_back(cluster: LocalCluster) -> bool:
    """Every simulated device announced and healthy: the node's allocatable counts them all."""
    allocatable = node(cluster)["status"].get("allocatable", {}).get(RESOURCE, "0")
    return int(allocatable) == len(read_inventory(DRIVER_ROOT).devices)


def idle_device(*held: Workload) -> str:
    """A device neither workload holds (a fault there evicts nothing of ours)."""
    mine = {w.device for w in held}
    return next(str(d.uuid) for d in read_inventory(DRIVER_ROOT).devices if d.uuid not in mine)


# ---- what a case sees while it waits ------------------------------------------------------------
@dataclass
class Seen:
    """Polled during a case: everything that came and went between two reads of the outcome."""

    cordoned: bool = False
    gone: dict[str, str] = field(default_factory=dict)  # pod uid -> what happened to it
    action_pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> last seen
    steps: set[str] = field(default_factory=set)  # the node row's remediation steps
    row: dict[str, Any] = field(default_factory=dict)  # the last remediation entry seen on the row
    under_way: Record | None = None  # the last record seen before done (done forgets the fault)


def poll(cluster: LocalCluster, seen: Seen, watch: dict[str, Workload]) -> dict[str, Any]:
    """One look at the node, the SpecialResource's row, the workloads and the action pods."""
    doc = node(cluster)
    seen.cordoned |= bool(doc["spec"].get("unschedulable"))
    rec = record_of(doc)
    if rec is not None and rec.state != "done":
        seen.under_way = rec
    for row in sr_doc(cluster, SR).get("status", {}).get("nodes", []):
        if row.get("name") == cluster.node_name and row.get("remediation"):
            seen.row = dict(row["remediation"])
            seen.steps.add(str(seen.row.get("step")))
    pods = get_json(cluster, "pods", "-A")["items"]
    by_uid = {p["metadata"]["uid"]: p for p in pods}
    for app, w in watch.items():
        p = by_uid.get(w.uid)
        if p is None:
            seen.gone.setdefault(w.uid, f"{app}'s pod {w.pod} deleted")
        elif p["metadata"].get("deletionTimestamp"):
            seen.gone.setdefault(w.uid, f"{app}'s pod {w.pod} terminating")
    for p in pods:
        if TOKEN in p["metadata"].get("annotations", {}):
            seen.action_pods[p["metadata"]["name"]] = p
    return doc


def back_in_service(doc: dict[str, Any]) -> bool:
    rec = record_of(doc)
    return (
        rec is not None
        and rec.state == "done"
        and not doc["spec"].get("unschedulable")
        and gpu_condition(doc).get("status") == "True"
    )
