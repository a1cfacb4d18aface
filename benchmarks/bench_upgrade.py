"""One node's driver upgrade on the real local cluster, step by step, against the same steps done by
hand with kubectl in the same run.

Measured run: the simulated-gpu example at driver 550.0-sim, validated, with a one-replica Deployment
using a device; then `spec.driver.version` is patched to 555.0-sim (and back to 550.0-sim on the next
run) and the Node is read every 0.2 s. Each step is when our poll first saw the node's upgrade-state
label reach it: cordoned; driver-replaced (the workload evicted and gone, the holder scan clean, the
driver label moved); validated (the new driver Ready, then what the new driver invalidates validated
again: the driver validation, the device plugin restarted, the workload validation through it — the
runtime, the exporter and discovery keep running, `sro.operator.upgrade.rewalk`); done (uncordoned);
then the workload's new pod Running with a device.

Floor, same run, no operator: the same steps by hand, as an admin without sro would type them, on
plain objects in a namespace of their own (an OnDelete "driver" DaemonSet, a "plugin" DaemonSet whose
pod starts the device plugin's Python code, a one-replica Deployment): `kubectl cordon`; `kubectl
drain --pod-selector` (evicts the workload, waits until it is gone); the driver DaemonSet's template
changed and its pod deleted, waited Ready; then the SAME validations the operator runs — sro's own
validation pods, rendered from the same SpecialResource (`sro validate driver` reading the driver
root and /dev; `sro validate workload` asking a device through the scheduler, the device plugin and
the runtime hook) —: the driver validation run to completion, the plugin pod deleted and waited
Ready, the workload validation run to completion; `kubectl uncordon`; the workload's new pod
Running. Each kubectl call is a process start, as by hand; polls are 0.2 s in both.

SRO_BENCH_PAIRS pairs (default 5), alternating (operator, floor, floor, operator, ...); the figure is
the median of the per-pair ratios with their min-max, goal at most 0.8x. Needs root and the local
cluster; installs sro (idempotent) and leaves it installed; leaves no SpecialResource, namespace or
cordon of its own behind.
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
from benchmarks.harness import PAIRS, Figure, paired, paired_figure
from sro.api.names import (
    DEVICE_PLUGIN_VALIDATION,
    DRIVER_REVISION_LABEL,
    DRIVER_VALIDATION,
    driver_revision_label,
    upgrade_state_label,
    validated_label,
)
from sro.api.specparsing import parse_spec
from sro.local.layout import BUSYBOX_IMAGE
from sro.operator.admission import resolve_recipe
from sro.operator.rendering import Context
from sro.operator.states import STATES, ValidationState
from sro.operator.upgrade.record import CORDONED, DONE, DRIVER_REPLACED, VALIDATED

GOAL = 0.8  # issue 26: an upgrade with sro is faster than the same steps by hand
APPS = "sro-bench-upgrade"
FLOOR_NS = "sro-bench-floor"
VERSIONS = ("550.0-sim", "555.0-sim")
STEPS = ("cordon", "evict", "replace driver", "validate again", "uncordon", "workload back")
OPERATOR_WHAT = {
    "cordon": "spec patched -> cordoned",
    "evict": "-> workload evicted and gone, holder scan clean, driver label moved",
    "replace driver": "-> new driver pod Ready",
    "validate again": "-> driver validation, plugin restarted, workload validation (validated)",
    "uncordon": "-> uncordoned (done)",
    "workload back": "-> the workload's new pod Running",
}
FLOOR_WHAT = {
    "cordon": "kubectl cordon",
    "evict": "kubectl drain --pod-selector (waits until gone)",
    "replace driver": "patch OnDelete DaemonSet, delete its pod, new pod Ready",
    "validate again": "sro's driver validation pod; plugin pod restarted; sro's workload validation pod",
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
        # the label says `done` from the run before until this upgrade starts: a step counts once
        # this run's cordon (or a later step) was seen
        if state in (CORDONED, DRIVER_REPLACED, VALIDATED) or (seen and state):
            seen.setdefault(state, now)
        if DRIVER_REPLACED in seen and "driver" not in seen:
            # the new revision's driver pod (the old one may still be Ready while it stops)
            revision = labels.get(driver_revision_label(SR), "")
            pods = client.list(
                Pod,
                namespace="sro-system",
                labels={
                    "sro.dev/specialresource": SR,
                    "sro.dev/state": "driver",
                    DRIVER_REVISION_LABEL: revision,
                },
            )
            if any(_pod_done(p, node) for p in pods):
                seen["driver"] = now
        if DONE in seen and _running(client, APPS, "bench-work", node, exclude=before):
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
# The floor's plugin starts the device plugin's code, as the real one does, then waits: the same
# Python start a restarted plugin pays (it cannot register a second plugin for the same resource).
PLUGIN_START = ["python3", "-c", "import sro.node.deviceplugin.server, time; time.sleep(1e9)"]


def _ds(name: str, image: str, env: str, on_delete: bool, command: list[str] | None = None) -> dict[str, Any]:
    container = {
        "name": "c", "image": image, "imagePullPolicy": "Never", "command": command or ["sleep", "infinity"],
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


def _validation_docs(image: str, node: str) -> dict[str, dict[str, Any]]:
    """sro's own validation pods for the node, rendered from the benchmark's SpecialResource, moved to
    the floor's namespace with sro's labels, owner and service account taken off: the by-hand steps
    run the same checks (`sro validate driver|workload`) the operator's revalidation runs."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    spec = parse_spec(SR, doc["spec"])
    ctx = Context(SR, "floor", spec, resolve_recipe(spec, None), FLOOR_NS, image)
    out: dict[str, dict[str, Any]] = {}
    for state in STATES:
        if isinstance(state, ValidationState) and state.name in (DRIVER_VALIDATION, DEVICE_PLUGIN_VALIDATION):
            pod = state.pod(ctx, node, "floor")
            name = f"floor-{state.name}"
            pod["metadata"] = {"name": name, "namespace": FLOOR_NS, "labels": {"app": name}}
            pod["spec"]["serviceAccountName"] = "default"
            out[state.name] = pod
    return out


def _validation_pod(cluster: Any, client: Client, doc: dict[str, Any]) -> None:
    name = doc["metadata"]["name"]
    _poll_until(f"{name} of the run before gone", lambda: not _exists(client, name), 60)
    _apply(cluster, doc)

    def succeeded() -> bool:
        status = client.get(Pod, name, namespace=FLOOR_NS).status
        if status is not None and status.phase == "Failed":
            raise RuntimeError(f"the by-hand validation {name} failed: {status.message or status.reason}")
        return status is not None and status.phase == "Succeeded"

    _poll_until(f"{name} Succeeded", succeeded, 120)
    cluster.kubectl("-n", FLOOR_NS, "delete", "pod", name, "--wait=false")


def _exists(client: Client, name: str) -> bool:
    return any(p.metadata and p.metadata.name == name for p in client.list(Pod, namespace=FLOOR_NS))


def _floor_setup(cluster: Any, client: Client, image: str) -> None:
    _ensure_floor_namespace(client)
    node = cluster.node_name
    _apply(cluster, _ds("floor-driver", image, VERSIONS[0], on_delete=True))
    cluster.kubectl(
        "label", "namespace", FLOOR_NS, "--overwrite", "pod-security.kubernetes.io/enforce=privileged"
    )
    _apply(cluster, _ds("floor-plugin", image, "", on_delete=False, command=PLUGIN_START))
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
    checks = _validation_docs(image, node)
    _validation_pod(cluster, client, checks[DRIVER_VALIDATION])
    old_plugin = _running(client, FLOOR_NS, "floor-plugin", node)
    cluster.kubectl("-n", FLOOR_NS, "delete", "pod", old_plugin, "--wait=false")
    _poll_until("the plugin back", lambda: bool(_running(client, FLOOR_NS, "floor-plugin", node, exclude=old_plugin)), 120)  # fmt: skip
    _validation_pod(cluster, client, checks[DEVICE_PLUGIN_VALIDATION])
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
        title=f"driver upgrade of one node, step by step (median of {len(ops)} pairs; floor: by hand with kubectl)"
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


def figures(ops: list[Run], floors: list[Run]) -> list[Figure]:
    """The total (goal 0.8x, per-pair ratios) and each step (informational), from the pairs."""
    out = [
        paired_figure(
            "UPGRADE: one node's driver upgrade under a workload (simulated-gpu)",
            "s",
            "the same steps and validations by hand with kubectl",
            [r.total for r in ops],
            [r.total for r in floors],
            GOAL,
        )
    ]
    for s in STEPS:
        out.append(
            paired_figure(
                f"upgrade step {s}",
                "s",
                FLOOR_WHAT[s],
                [r.steps[s] for r in ops],
                [r.steps[s] for r in floors],
                None,
            )
        )
    return out


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

        def operator() -> float:
            ops.append(_operator_run(cluster, client, VERSIONS[(len(ops) + 1) % 2]))
            _progress(f"operator run {len(ops)}: {ops[-1].total:.2f} s")
            return ops[-1].total

        def by_hand() -> float:
            floors.append(_floor_run(cluster, client, image, VERSIONS[(len(floors) + 1) % 2]))
            _progress(f"by-hand run {len(floors)}: {floors[-1].total:.2f} s")
            return floors[-1].total

        paired(operator, by_hand, PAIRS)
    finally:
        cluster.kubectl("uncordon", cluster.node_name, check=False)
        cluster.kubectl("delete", "namespace", APPS, "--ignore-not-found", "--wait=false", check=False)
        try:
            _delete_sr(cluster, client)
        finally:
            _remove_floor_namespace(client)
    _print(ops, floors)
    return figures(ops, floors)
