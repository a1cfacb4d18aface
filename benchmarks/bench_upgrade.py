"""One node's driver upgrade on the real local cluster, step by step, against the same steps done by
hand with kubectl in the same run.

Measured run: the simulated-gpu example at driver 550.0-sim, validated, with a one-replica Deployment
using a device; then `spec.driver.version` is patched to 555.0-sim (and back to 550.0-sim on the next
run) and the Node is read every 0.2 s. Each step is when our poll first saw the node's upgrade-state
label reach it: cordoned; driver-replaced (the workload evicted and gone, the holder scan clean, the
driver label moved); validated (the new driver Ready, and the whole chain validated again: driver
validation, runtime, device plugin, workload validation, discovery); done (uncordoned); then the
workload's new pod Running with a device.

Floor, same run, no operator: the same steps by hand, as an admin without sro would type them, on
plain objects of the same image in a namespace of their own (an OnDelete "driver" DaemonSet, a
"plugin" DaemonSet, a one-replica Deployment): `kubectl cordon`; `kubectl drain --pod-selector`
(evicts the workload, waits until it is gone); the driver DaemonSet's template changed and its pod
deleted, waited Ready; a validation pod run to completion, the plugin pod deleted and waited Ready,
a second validation pod; `kubectl uncordon`; the workload's new pod Running. Each kubectl call is a
process start, as by hand; polls are 0.2 s in both.

Runs alternate (operator, floor, floor, operator, ...); medians over SRO_BENCH_UPGRADE_RUNS runs
(default 1). Needs root and the local cluster; installs sro (idempotent) and leaves it installed;
leaves no SpecialResource, namespace or cordon of its own behind.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import yaml
from lightkube import Client
from lightkube.resources.core_v1 import Node, Pod
from rich.console import Console
from rich.table import Table

from benchmarks.bench_operator import (
    EXAMPLE,
    SR,
    _delete_sr,
    _ensure_floor_namespace,
    _install,
    _leader,
    _pod_done,
    _poll_until,
    _progress,
    _remove_floor_namespace,
)
from benchmarks.harness import Figure
from sro.api.names import upgrade_state_label, validated_label
from sro.local.layout import BUSYBOX_IMAGE
from sro.operator.upgrade.record import CORDONED, DONE, DRIVER_REPLACED, VALIDATED

RUNS = int(os.environ.get("SRO_BENCH_UPGRADE_RUNS", "1"))
APPS = "sro-bench-upgrade"
FLOOR_NS = "sro-bench-floor"
VERSIONS = ("550.0-sim", "555.0-sim")
STEPS = ("cordon", "evict", "replace driver", "validate again", "uncordon", "workload back")
OPERATOR_WHAT = {
    "cordon": "spec patched -> cordoned",
    "evict": "-> workload evicted and gone, holder scan clean, driver label moved",
    "replace driver": "-> new driver pod Ready",
    "validate again": "-> the whole chain validated (upgrade-state validated)",
    "uncordon": "-> uncordoned (done)",
    "workload back": "-> the workload's new pod Running",
}
FLOOR_WHAT = {
    "cordon": "kubectl cordon",
    "evict": "kubectl drain --pod-selector (waits until gone)",
    "replace driver": "patch OnDelete DaemonSet, delete its pod, new pod Ready",
    "validate again": "validation pod; plugin pod restarted; validation pod",
    "uncordon": "kubectl uncordon",
    "workload back": "the workload's new pod Running",
}


@dataclass
class Run:
    steps: dict[str, float]

    @property
    def total(self) -> float:
        return sum(self.steps.values())


def _workload(namespace: str, image: str, device: bool) -> dict[str, Any]:
    labels = {"app": "bench-work"}
    container: dict[str, Any] = {
        "name": "w",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["sleep", "3600"],
    }
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 1, "containers": [container]}
    if device:
        container["resources"] = {"limits": {"sro.dev/simulated-gpu": "1"}}
        spec["runtimeClassName"] = "sro"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "bench-work", "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": spec}},
    }  # fmt: skip


def _running(client: Client, namespace: str, app: str, node: str, exclude: str = "") -> str:
    for p in client.list(Pod, namespace=namespace, labels={"app": app}):
        if p.metadata and p.metadata.name != exclude and _pod_done(p, node):
            return str(p.metadata.name)
    return ""


def _labels(client: Client, node: str) -> dict[str, str]:
    meta = client.get(Node, node).metadata
    return dict(meta.labels or {}) if meta else {}


def _apply(cluster: Any, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))


# ---- the operator ----------------------------------------------------------------------------------
def _operator_run(cluster: Any, client: Client, version: str) -> Run:
    node = cluster.node_name
    before = _running(client, APPS, "bench-work", node)
    state_key = upgrade_state_label(SR)
    seen: dict[str, float] = {}
    t0 = time.monotonic()
    cluster.kubectl(
        "patch", "sr", SR, "--type=merge", "-p", json.dumps({"spec": {"driver": {"version": version}}})
    )

    def done() -> bool:
        labels = _labels(client, node)
        now = time.monotonic() - t0
        state = labels.get(state_key, "")
        if state in (CORDONED, DRIVER_REPLACED, VALIDATED, DONE) or seen:
            seen.setdefault(state, now)
        if DRIVER_REPLACED in seen and "driver" not in seen:
            pods = client.list(
                Pod, namespace="sro-system", labels={"sro.dev/specialresource": SR, "sro.dev/state": "driver"}
            )
            if any(_pod_done(p, node) for p in pods):
                seen["driver"] = now
        if state == DONE and _running(client, APPS, "bench-work", node, exclude=before):
            seen["back"] = now
            return True
        return False

    _poll_until(f"the upgrade to {version} done and the workload back", done, 600)
    marks = [
        seen.get(CORDONED),
        seen.get(DRIVER_REPLACED),
        seen.get("driver"),
        seen.get(VALIDATED),
        seen.get(DONE),
        seen["back"],
    ]
    # a step seen in the same poll as the next: it gets the next one's time
    for i in range(len(marks) - 2, -1, -1):
        marks[i] = marks[i] if marks[i] is not None else marks[i + 1]
    times = [0.0, *(m or 0.0 for m in marks)]
    return Run({s: times[i + 1] - times[i] for i, s in enumerate(STEPS)})


# ---- by hand ---------------------------------------------------------------------------------------
def _ds(name: str, image: str, env: str, on_delete: bool) -> dict[str, Any]:
    container = {
        "name": "c", "image": image, "imagePullPolicy": "Never", "command": ["sleep", "infinity"],
        "env": [{"name": "DRIVER_VERSION", "value": env}],
        "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 2},
    }  # fmt: skip
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": FLOOR_NS},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "OnDelete" if on_delete else "RollingUpdate"},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"terminationGracePeriodSeconds": 1, "tolerations": [{"operator": "Exists"}], "containers": [container]},
            },
        },
    }  # fmt: skip


def _validation_pod(cluster: Any, client: Client, image: str, node: str, name: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": FLOOR_NS},
        "spec": {
            "restartPolicy": "Never", "nodeName": node, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "v", "image": image, "imagePullPolicy": "Never", "command": ["true"]}],
        },
    }  # fmt: skip
    _apply(cluster, pod)

    def succeeded() -> bool:
        status = client.get(Pod, name, namespace=FLOOR_NS).status
        return status is not None and status.phase == "Succeeded"

    _poll_until(f"{name} Succeeded", succeeded, 120)
    cluster.kubectl("-n", FLOOR_NS, "delete", "pod", name, "--wait=false")


def _floor_setup(cluster: Any, client: Client, image: str) -> None:
    _ensure_floor_namespace(client)
    node = cluster.node_name
    _apply(cluster, _ds("floor-driver", image, VERSIONS[0], on_delete=True))
    _apply(cluster, _ds("floor-plugin", image, "", on_delete=False))
    _apply(cluster, _workload(FLOOR_NS, BUSYBOX_IMAGE, device=False))
    for app in ("floor-driver", "floor-plugin", "bench-work"):

        def up(a: str = app) -> bool:
            return bool(_running(client, FLOOR_NS, a, node))

        _poll_until(f"{app} Ready", up, 120)


def _floor_run(cluster: Any, client: Client, image: str, version: str) -> Run:
    node = cluster.node_name
    before = _running(client, FLOOR_NS, "bench-work", node)
    marks: list[float] = []
    t0 = time.monotonic()
    cluster.kubectl("cordon", node)
    marks.append(time.monotonic())
    cluster.kubectl("drain", node, "--pod-selector=app=bench-work", "--ignore-daemonsets", "--timeout=120s")
    _poll_until("the workload gone", lambda: not list(client.list(Pod, namespace=FLOOR_NS, labels={"app": "bench-work"}, fields={"spec.nodeName": node})), 120)  # fmt: skip
    marks.append(time.monotonic())
    old_driver = _running(client, FLOOR_NS, "floor-driver", node)
    _apply(cluster, _ds("floor-driver", image, version, on_delete=True))
    cluster.kubectl("-n", FLOOR_NS, "delete", "pod", old_driver, "--wait=false")
    _poll_until("the new driver Ready", lambda: bool(_running(client, FLOOR_NS, "floor-driver", node, exclude=old_driver)), 120)  # fmt: skip
    marks.append(time.monotonic())
    _validation_pod(cluster, client, image, node, "floor-validate-driver")
    old_plugin = _running(client, FLOOR_NS, "floor-plugin", node)
    cluster.kubectl("-n", FLOOR_NS, "delete", "pod", old_plugin, "--wait=false")
    _poll_until("the plugin back", lambda: bool(_running(client, FLOOR_NS, "floor-plugin", node, exclude=old_plugin)), 120)  # fmt: skip
    _validation_pod(cluster, client, image, node, "floor-validate-workload")
    marks.append(time.monotonic())
    cluster.kubectl("uncordon", node)
    marks.append(time.monotonic())
    _poll_until("the workload back", lambda: bool(_running(client, FLOOR_NS, "bench-work", node, exclude=before)), 120)  # fmt: skip
    marks.append(time.monotonic())
    times = [t0, *marks]
    return Run({s: times[i + 1] - times[i] for i, s in enumerate(STEPS)})


# ---- report ----------------------------------------------------------------------------------------
def _print(ops: list[Run], floors: list[Run]) -> None:
    med = statistics.median
    table = Table(
        title=f"driver upgrade of one node, step by step (median of {len(ops)}; floor: by hand with kubectl)"
    )
    for col in ("step", "operator", "what", "by hand", "what", "ratio"):
        table.add_column(col, justify="right" if col in ("operator", "by hand", "ratio") else "left")
    for s in STEPS:
        op, fl = med(r.steps[s] for r in ops), med(r.steps[s] for r in floors)
        table.add_row(
            s, f"{op:.2f} s", OPERATOR_WHAT[s], f"{fl:.2f} s", FLOOR_WHAT[s], f"{op / fl:.2f}x" if fl else "-"
        )
    op, fl = med(r.total for r in ops), med(r.total for r in floors)
    table.add_row("total", f"{op:.2f} s", "", f"{fl:.2f} s", "", f"{op / fl:.2f}x")
    console = Console(file=sys.stderr)
    if not console.is_terminal:
        console = Console(file=sys.stderr, width=220)
    console.print(table)


def run() -> list[Figure]:
    from sro.kube.client import sync_client
    from sro.local.cluster import LocalCluster
    from sro.local.images import ensure_sro_image

    if os.geteuid() != 0:
        raise RuntimeError("the upgrade benchmark needs root (the local cluster)")
    cluster = LocalCluster.default()
    cluster.ensure_up(_progress)
    image = ensure_sro_image(cluster, _progress)
    _install(cluster.kubeconfig, image)
    client = sync_client(cluster.kubeconfig)
    _leader(client)
    ops: list[Run] = []
    floors: list[Run] = []
    try:
        _delete_sr(cluster, client)
        _remove_floor_namespace(client)
        doc = yaml.safe_load(EXAMPLE.read_text())
        doc["spec"].setdefault("driver", {})["version"] = VERSIONS[0]  # from the start: no upgrade yet
        _apply(cluster, doc)
        node = cluster.node_name
        _poll_until(f"{SR} validated", lambda: _labels(client, node).get(validated_label(SR)) == "true", 300)
        cluster.kubectl("create", "namespace", APPS)
        _apply(cluster, _workload(APPS, BUSYBOX_IMAGE, device=True))
        _poll_until("the workload running", lambda: bool(_running(client, APPS, "bench-work", node)), 120)
        _floor_setup(cluster, client, image)
        for i in range(RUNS):
            version = VERSIONS[(i + 1) % 2]
            order = ("operator", "floor") if i % 2 == 0 else ("floor", "operator")
            for what in order:
                if what == "operator":
                    ops.append(_operator_run(cluster, client, version))
                    _progress(f"operator run {len(ops)}: {ops[-1].total:.2f} s")
                else:
                    floors.append(_floor_run(cluster, client, image, version))
                    _progress(f"by-hand run {len(floors)}: {floors[-1].total:.2f} s")
    finally:
        cluster.kubectl("uncordon", cluster.node_name, check=False)
        cluster.kubectl("delete", "namespace", APPS, "--ignore-not-found", "--wait=false", check=False)
        try:
            _delete_sr(cluster, client)
        finally:
            _remove_floor_namespace(client)
    _print(ops, floors)
    med = statistics.median
    figures = [
        Figure(
            "UPGRADE: one node's driver upgrade under a workload (simulated-gpu)",
            med(r.total for r in ops),
            med(r.total for r in floors),
            "s",
            "the same steps by hand with kubectl",
        )
    ]
    for s in STEPS:
        figures.append(
            Figure(
                f"upgrade step {s}",
                med(r.steps[s] for r in ops),
                med(r.steps[s] for r in floors),
                "s",
                FLOOR_WHAT[s],
            )
        )
    return figures
