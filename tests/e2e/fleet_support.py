"""What the remediation fleet e2e (tests/e2e/test_remediation_fleet.py) works with: the 50
simulated nodes' process, the health reports written per node as a device plugin would, the holder
pods and their budget, one look at the fleet's records, cordons and conditions, the poll that runs
for the whole module (and plays the device plugins after a reset), and the reading of
`sro remediation status`'s table.

Apart from the cases so that each reads as its story: fault, wait, check what was seen.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from lightkube import ApiError

from benchmarks.simnodes import SIM_LABEL
from sro.api.nfd_crds import NODE_NAME_LABEL
from sro.api.recipes import SIMULATED_GPU
from sro.devices.healthreport import DeviceFault, HealthReport, to_features
from sro.kube.client import sync_client
from sro.kube.objects import Objects
from sro.local.cluster import LocalCluster
from sro.local.layout import BUSYBOX_IMAGE
from sro.operator.remediation.record import ACTIVE, VALIDATING, Record, remediation_annotation
from tests.e2e.helpers import sro

ROOT = Path(__file__).resolve().parents[2]
NS = "sro-system"
SR = "fleet-gpus"
APPS = "sro-e2e-fleet"
NODES = 50
FAULTY = 20  # 40 % of the nodes
LIMIT_NODES = 13  # the default breaker: ceil(50 * 25 %)
NAMES = [f"sim-{i}" for i in range(NODES)]
STORM = NAMES[:FAULTY]
FLAPPER = NAMES[-1]  # faulted again and again (not one of the storm's nodes)
DEVICES = tuple(str(i) for i in range(8))
XID = 79  # GPU has fallen off the bus: GpuLost, whose default action is reset-device
KEY = remediation_annotation(SR)
E2E_LABEL = {"sro.dev/e2e": "fleet"}
GPU_HEALTHY = "GpuHealthy"
ATTEMPTS = 3  # the default spec.remediation.maxAttempts


def special_resource() -> dict[str, Any]:
    return {
        "apiVersion": "sro.dev/v1alpha1",
        "kind": "SpecialResource",
        "metadata": {"name": SR},
        "spec": {
            "recipe": SIMULATED_GPU.name,
            "nodeSelector": {SIM_LABEL: "true"},
            "tolerations": [{"key": SIM_LABEL, "operator": "Exists"}],
            "monitoring": {"enabled": False},
            # every other field its default: actions (gpuLost: reset-device), maxUnavailable 25 %,
            # maxAttempts 3 within 1h
            "remediation": {"maxConcurrentNodes": NODES},
        },
    }


# ---- the simulated nodes ------------------------------------------------------------------------------
class Simulator:
    """`python -m benchmarks.simnodes --nodes 50`, started and stopped by its PID."""

    def __init__(self, cluster: LocalCluster, log: IO[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.simnodes", "--nodes", str(NODES)],
            cwd=ROOT,
            env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(f"READY {NODES}"):
                self.ready.set()

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.5):
            if self.proc.poll() is not None:
                raise AssertionError(f"the simulator exited ({self.proc.returncode}) before READY")
            if time.monotonic() > deadline:
                raise AssertionError(f"the simulator not READY within {timeout}s")

    def stop(self) -> int:
        """SIGTERM: it deletes its nodes and the pods left on them, then exits."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(120)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            code = self.proc.wait(10)
        self.reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


# ---- the reports: one NodeFeature per node, as a device plugin would have it written ----------------
def pod_name(node: str) -> str:
    return f"work-{node}"


def nodefeature(node: str, faulty: bool) -> dict[str, Any]:
    """Node `node`'s NodeFeature with the simulated GPUs' report: device 0 lost (Xid 79) and held
    by the node's pod, or every device healthy."""
    report = HealthReport(
        recipe=SIMULATED_GPU.name,
        resource=SIMULATED_GPU.resource,
        node=node,
        boot_id=f"boot-{node}",
        updated=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        devices=DEVICES,
        faults=(DeviceFault("0", (XID,), "GPU has fallen off the bus (injected)"),) if faulty else (),
        holders={"0": (f"{APPS}/{pod_name(node)}",)},
    )
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {
            "name": f"{node}-sro-fleet",
            "namespace": NS,
            "labels": {NODE_NAME_LABEL: node, **E2E_LABEL},
        },
        "spec": {"features": to_features([report])},
    }


def write_reports(cluster: LocalCluster, faulty: dict[str, bool]) -> None:
    items = [nodefeature(n, f) for n, f in faulty.items()]
    doc = {"apiVersion": "v1", "kind": "List", "items": items}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))


def holder_pod(node: str) -> dict[str, Any]:
    """A pod on `node` (placed by name: the scheduler is not what is tested) that the report names
    as device 0's holder; the budget below keeps it from being evicted until the test allows it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name(node), "namespace": APPS, "labels": {"app": "fleet-work"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"key": SIM_LABEL, "operator": "Exists"}],
            "containers": [
                {
                    "name": "work",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                }
            ],
        },
    }


BUDGET = {
    "apiVersion": "policy/v1beta1",  # Kubernetes 1.20: policy/v1 came with 1.21
    "kind": "PodDisruptionBudget",
    "metadata": {"name": "fleet-work", "namespace": APPS},
    "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "fleet-work"}}},
}


# ---- what the nodes say ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fleet:
    """One look at the simulated nodes: each one's record, cordon and GpuHealthy condition."""

    records: dict[str, Record | None]
    cordoned: frozenset[str]
    healthy: dict[str, str]  # node -> its GpuHealthy condition's status ("" when it has none)

    def state(self, node: str) -> str:
        rec = self.records.get(node)
        return rec.state if rec is not None else ""

    def under_way(self) -> set[str]:
        return {n for n in self.records if self.state(n) in ACTIVE}


def look(objects: Objects) -> Fleet:
    records: dict[str, Record | None] = {}
    cordoned, healthy = set(), {}
    for n in objects.list("Node"):
        md = n["metadata"]
        if (md.get("labels") or {}).get(SIM_LABEL) != "true":
            continue
        name = md["name"]
        records[name] = Record.from_json((md.get("annotations") or {}).get(KEY, ""))
        if (n.get("spec") or {}).get("unschedulable"):
            cordoned.add(name)
        conds = (n.get("status") or {}).get("conditions") or []
        healthy[name] = next((c["status"] for c in conds if c["type"] == GPU_HEALTHY), "")
    return Fleet(records, frozenset(cordoned), healthy)


def sr_status(objects: Objects) -> dict[str, Any]:
    try:
        return dict(objects.get("SpecialResource", SR).get("status") or {})
    except ApiError:
        return {}


def rows(objects: Objects) -> dict[str, dict[str, Any]]:
    """node -> its status row's remediation entry (only the nodes that have one)."""
    return {
        r["name"]: dict(r["remediation"]) for r in sr_status(objects).get("nodes", []) if r.get("remediation")
    }


@contextlib.contextmanager
def connected(cluster: LocalCluster) -> Iterator[Objects]:
    """A client of the cluster's API for a while (closed after: strict pytest counts a socket left
    open as an error)."""
    client = sync_client(cluster.kubeconfig)
    try:
        yield Objects(client)
    finally:
        client.close()


def debug(cluster: LocalCluster) -> str:
    with connected(cluster) as objects:
        fleet, status = look(objects), sr_status(objects)
    recs = {n: (fleet.state(n), r.reason[:80]) for n, r in fleet.records.items() if r is not None}
    logs = cluster.kubectl(
        "-n", NS, "logs", "-l", "app.kubernetes.io/name=sro-operator", "--tail=30", "--prefix", check=False
    ).stdout
    return (
        f"records: {recs}\ncordoned: {sorted(fleet.cordoned)}\nstatus.remediation: "
        f"{status.get('remediation')}\nvalidated: {status.get('validatedCount')}\noperator:\n{logs}"
    )


@dataclass
class Watch:
    """The poll that runs for the whole module, and the device plugins' part after a reset.

    Every 0.5 s: the most nodes seen under way (records) and cordoned at once, and every node ever
    under way. A node in `faulty` whose record reaches `validating` (its reset pod Succeeded) gets
    its report written healthy, as the device plugin does once a reset cleared the device."""

    cluster: LocalCluster
    most: int = 0
    most_cordoned: int = 0
    polls: int = 0
    ever: set[str] = field(default_factory=set)
    over: list[str] = field(default_factory=list)  # what was seen when more than the breaker's share
    errors: list[str] = field(default_factory=list)
    faulty: dict[str, float] = field(default_factory=dict)  # node -> when its fault was written
    cleared: dict[str, int] = field(default_factory=dict)  # node -> reports cleared after a reset
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def fault(self, nodes: list[str]) -> None:
        write_reports(self.cluster, dict.fromkeys(nodes, True))
        with self.lock:  # after the write: a look begun before it never answers for this fault
            self.faulty.update(dict.fromkeys(nodes, time.monotonic()))

    def run(self) -> None:
        with connected(self.cluster) as objects:
            self._poll(objects)

    def _poll(self, objects: Objects) -> None:
        while not self.stop.is_set():
            try:
                begun = time.monotonic()
                fleet = look(objects)
                under = fleet.under_way()
                self.ever |= under
                self.most = max(self.most, len(under))
                self.most_cordoned = max(self.most_cordoned, len(fleet.cordoned))
                for seen, how in ((under, "under way"), (set(fleet.cordoned), "cordoned")):
                    if len(seen) > LIMIT_NODES:
                        self.over.append(f"{how}: {sorted(seen)}")
                with self.lock:
                    reset = sorted(
                        n for n, t in self.faulty.items() if t < begun and fleet.state(n) == VALIDATING
                    )
                    for n in reset:
                        del self.faulty[n]
                if reset:
                    write_reports(self.cluster, dict.fromkeys(reset, False))
                    for n in reset:
                        self.cleared[n] = self.cleared.get(n, 0) + 1
                self.polls += 1
            except Exception as e:  # an API hiccup: one look lost, noted, not the test's failure
                self.errors.append(str(e)[:200])
            self.stop.wait(0.5)


def remediation_status(cluster: LocalCluster) -> tuple[int, str]:
    out = sro(cluster, "remediation", "status", SR)
    return out.returncode, out.stdout + out.stderr


def table_cells(text: str) -> list[list[str]]:
    """The rows of `sro remediation status`'s table as cells (a wrapped cell's next lines are rows
    with an empty node cell)."""
    return [[c.strip() for c in ln.split("│")[1:-1]] for ln in text.splitlines() if ln.count("│") > 2]


def table_steps(text: str) -> dict[str, str]:
    """node -> its step in the table."""
    return {c[0]: c[4] for c in table_cells(text) if c[0] and c[0] != "node"}


def reasons(text: str) -> dict[str, str]:
    """node -> its reason cell, wrapped lines joined."""
    out: dict[str, str] = {}
    node = ""
    for c in table_cells(text):
        if c[0] == "node":
            continue
        node = c[0] or node
        if node:
            out[node] = f"{out.get(node, '')} {c[-1]}".strip()
    return out
