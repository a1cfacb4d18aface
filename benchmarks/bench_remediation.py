"""A GPU fault repaired on the real local cluster by sro's remediation, against the same steps done by
hand with kubectl in the same run (issue 24: no slower than by hand).

Measured run: the simulated-gpu SpecialResource with `spec.remediation` (its defaults: a lost GPU
gets `reset-device`), validated, and a one-replica Deployment holding one simulated GPU (it prints
the device it got). Xid 79 is injected on that device with `sro simulate fault` on the host (the
simulated driver's fault state, as a real driver's Xid), then the Node, the workload's pods and the
driver's fault state are read every 0.2 s. Each step is when our poll first saw it: cordoned (the
device plugin's report → discovery's NodeFeature → the operator: GpuHealthy False, cordon);
evicted (the operator's record leaves `evicting`: the holder's containers have stopped; its API
object lingers seconds longer, which `kubectl delete` waits out); reset (the fault cleared by the operator's reset pod); device healthy (the plugin
announces it again: allocatable back to capacity); uncordoned (the node revalidated, uncordoned,
GpuHealthy True); workload back (the Deployment's new pod Running, on a healthy device).

Floor, same run (spec.remediation.paused, so sro only reports the fault): the same steps by hand,
as an admin who knows at once which device failed and who holds it would type them:
`kubectl cordon`; `kubectl delete pod` of the holder (kubectl waits until the object is gone,
which here is seconds after its containers stopped); the fault cleared as
`sro driver reset` does on a simulated driver (`sro simulate fault --clear --device D`); waited
until the node's allocatable is back (the plugin announced the device); `kubectl uncordon`; the
Deployment's new pod Running. Each kubectl call is a process start, as by hand; polls are 0.2 s in
both. The person's reaction time is not counted: the floor starts with the fault, as sro does.

Runs alternate (operator, floor, floor, operator, ...): run i of each side is pair i; SRO_BENCH_PAIRS
pairs (default 5); a figure is the median with the spread (min–max) of the per-pair ratios, the
total's goal at most 1.0x. Needs root and the local cluster; installs sro
(idempotent) and leaves it installed; leaves no SpecialResource, namespace, fault or cordon of its
own behind. Run it alone on the cluster (`flock /tmp/sro-cluster.lock python -m benchmarks
remediation`).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from lightkube import Client
from lightkube.resources.core_v1 import Node, Pod
from rich.console import Console
from rich.table import Table

from benchmarks.bench_operator import (
    EXAMPLE,
    SR,
    SpecialResource,
    _delete_sr,
    _install,
    _leader,
    _pod_done,
    _poll_until,
)
from benchmarks.harness import PAIRS, Figure, paired_figure
from sro.api.names import validated_label
from sro.api.recipes import SIMULATED_GPU
from sro.devices.driverstate import read_faults, read_inventory
from sro.local.layout import BUSYBOX_IMAGE
from sro.operator.remediation.record import CORDONED, DONE, EVICTING, WAITING, Record, remediation_annotation

RUNS = PAIRS
APPS = "sro-bench-remediation"
APP = "bench-gpu-work"
DRIVER_ROOT = Path(SIMULATED_GPU.driver_root)
RESOURCE = SIMULATED_GPU.resource
SIM = [sys.executable, "-m", "sro", "simulate", "fault"]
CONDITION = "GpuHealthy"
STEPS = ("cordon", "evict", "reset", "device healthy", "uncordon", "workload back")
OPERATOR_WHAT = {
    "cordon": "Xid 79 -> GpuHealthy False and cordoned (report, NodeFeature, operator)",
    "evict": "-> the holder evicted (the record leaves evicting)",
    "reset": "-> the fault cleared by sro's reset pod",
    "device healthy": "-> the plugin announces it (allocatable back)",
    "uncordon": "-> revalidated, uncordoned, GpuHealthy True",
    "workload back": "-> the Deployment's new pod Running, healthy device",
}
FLOOR_WHAT = {
    "cordon": "kubectl cordon",
    "evict": "kubectl delete pod (the holder; waits until gone)",
    "reset": "sro simulate fault --clear --device D (what sro driver reset does)",
    "device healthy": "wait: allocatable back",
    "uncordon": "kubectl uncordon",
    "workload back": "the Deployment's new pod Running",
}
TARGET = "<= 1.0x (no slower than by hand)"
_T0 = time.monotonic()


def _progress(message: str) -> None:
    print(f"[remediation bench {time.monotonic() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)


@dataclass
class Run:
    steps: dict[str, float]  # seconds in each step (from the previous one's end)
    condition: float | None = None  # fault -> GpuHealthy False (the operator's runs)
    record: dict[str, str] = field(default_factory=dict)  # the record's own step stamps

    @property
    def total(self) -> float:
        return sum(self.steps.values())


# ---- what the polls read ---------------------------------------------------------------------------
def _sr_doc() -> dict[str, Any]:
    name = SR
    return {
        "apiVersion": "sro.dev/v1alpha1",
        "kind": "SpecialResource",
        "metadata": {"name": name},
        "spec": {
            **yaml.safe_load(EXAMPLE.read_text())["spec"],
            "monitoring": {"enabled": False},
            # a reset device is healthy again 2 s after its fault clears, in both runs
            "devicePlugin": {"config": "version: v1\nhealth: {recoverAfterSeconds: 2}\n"},
            # every operator run is one attempt: the limit must not end the benchmark
            "remediation": {"maxAttempts": 100, "window": "1h", "paused": False},
        },
    }


def _workload() -> dict[str, Any]:
    labels = {"app": APP}
    container = {
        "name": "work",
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", f"echo DEV=${SIMULATED_GPU.visible_devices_env}; sleep 3600"],
        "resources": {"limits": {RESOURCE: "1"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP, "namespace": APPS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]},
            },
        },
    }


@dataclass(frozen=True)
class Look:
    """One poll: the node, the workload's pods, the host's faults."""

    unschedulable: bool
    condition: str  # GpuHealthy's status ("" when absent)
    allocatable_full: bool  # allocatable == capacity for the resource (every device announced healthy)
    record: Record | None
    pods: dict[str, bool]  # the workload's pod name -> Running and Ready, not deleting
    faults: frozenset[str]  # faulty device UUIDs on the host


def _look(client: Client, node: str) -> Look:
    n = client.get(Node, node)
    conds = (n.status.conditions or []) if n.status else []
    cond = next((c.status for c in conds if c.type == CONDITION), "")
    cap = (n.status.capacity or {}) if n.status else {}
    alloc = (n.status.allocatable or {}) if n.status else {}
    ann = (n.metadata.annotations or {}) if n.metadata else {}
    listed = [p for p in client.list(Pod, namespace=APPS, labels={"app": APP}) if p.metadata is not None]
    pods = {str(p.metadata.name): _pod_done(p, node) for p in listed}  # type: ignore[union-attr]
    return Look(
        unschedulable=bool(n.spec and n.spec.unschedulable),
        condition=str(cond),
        allocatable_full=bool(cap.get(RESOURCE)) and alloc.get(RESOURCE) == cap.get(RESOURCE),
        record=Record.from_json(ann.get(remediation_annotation(SR), "")),
        pods=pods,
        faults=frozenset(str(u) for u in _faults()),
    )


def _faults() -> list[str]:
    try:
        return [str(u) for u in read_faults(DRIVER_ROOT)]
    except Exception:  # mid-write: the next poll reads it
        return ["<unreadable>"]


_devices: dict[str, str] = {}  # pod name -> the device UUID it holds (its log's DEV= line)


def _device_of(cluster: Any, pod: str) -> str:
    if pod not in _devices:
        log = cluster.kubectl("logs", "-n", APPS, pod, check=False).stdout
        dev = next((ln[4:].strip() for ln in log.splitlines() if ln.startswith("DEV=")), "")
        if not dev:
            return ""
        name = dev.split(",")[0]
        inventory = read_inventory(DRIVER_ROOT).devices
        _devices[pod] = next((str(d.uuid) for d in inventory if name in (str(d.uuid), str(d.index))), name)
    return _devices[pod]


def _holder(cluster: Any, client: Client, node: str) -> tuple[str, str]:
    """The workload's running pod and the device it holds (waits for one)."""
    found: list[tuple[str, str]] = []

    def up() -> bool:
        for pod, ready in _look(client, node).pods.items():
            if ready and (dev := _device_of(cluster, pod)):
                found[:] = [(pod, dev)]
                return True
        return False

    _poll_until("the workload running on a device", up, 180)
    return found[0]


def _back(cluster: Any, look: Look, old: str) -> bool:
    """A new workload pod runs, on a healthy device."""
    return any(
        ready and pod != old and (dev := _device_of(cluster, pod)) and dev not in look.faults
        for pod, ready in look.pods.items()
    )


def _inject(device: str) -> float:
    subprocess.run([*SIM, "--device", device, "--xid", "79"], check=True, capture_output=True)
    return time.monotonic()


def _clear(device: str | None = None) -> None:
    which = ["--device", device] if device else ["--all"]
    subprocess.run([*SIM, *which, "--clear"], check=device is not None, capture_output=True)


def _set_paused(cluster: Any, client: Client, paused: bool) -> None:
    """spec.remediation.paused, waited until the operator's summary says it (it must not act on a
    by-hand run's fault, nor miss an operator run's)."""
    patch = {"spec": {"remediation": {"paused": paused}}}
    cluster.kubectl("patch", "sr", SR, "--type=merge", "-p", json.dumps(patch))

    def seen() -> bool:
        status: Any = client.get(SpecialResource, SR).status or {}
        summary = status.get("remediation") if isinstance(status, dict) else None
        return isinstance(summary, dict) and summary.get("paused") is paused

    _poll_until(f"the operator's status.remediation.paused {paused}", seen, 60)


def _settled(cluster: Any, client: Client, node: str) -> None:
    """Between runs: no fault, the node schedulable with every device announced, GpuHealthy True,
    no remediation under way, the workload running."""

    def calm() -> bool:
        look = _look(client, node)
        under_way = look.record is not None and look.record.state != DONE
        return (
            not look.faults
            and not look.unschedulable
            and look.allocatable_full
            and look.condition in ("True", "")
            and not under_way
            and any(look.pods.values())
        )

    _poll_until("the node settled (no fault, uncordoned, devices back, workload running)", calm, 240)


# ---- the operator ----------------------------------------------------------------------------------
def _operator_run(cluster: Any, client: Client) -> Run:
    node = cluster.node_name
    old, device = _holder(cluster, client, node)
    seen: dict[str, float] = {}
    t0 = _inject(device)
    last: list[Look] = []

    def done() -> bool:
        look = _look(client, node)
        last[:] = [look]
        now = time.monotonic() - t0
        if look.condition == "False":
            seen.setdefault("condition", now)
        if look.unschedulable:
            seen.setdefault("cordon", now)
        rec = look.record
        if "cordon" in seen and rec is not None and rec.state not in (WAITING, CORDONED, EVICTING):
            seen.setdefault("evict", now)
        if "evict" in seen and device not in look.faults:
            seen.setdefault("reset", now)
        if "reset" in seen and look.allocatable_full:
            seen.setdefault("device healthy", now)
        if "cordon" in seen and not look.unschedulable and look.condition == "True":
            seen.setdefault("uncordon", now)
        if "uncordon" in seen and _back(cluster, look, old):
            seen.setdefault("workload back", now)
        return "workload back" in seen

    _poll_until("the node repaired and the workload back", done, 600)
    rec = last[0].record if last else None
    return Run(_steps(seen), seen.get("condition"), dict(rec.steps) if rec is not None else {})


def _steps(seen: dict[str, float]) -> dict[str, float]:
    """Seconds per step from the marks; a step seen in the same poll as a later one gets its time.
    Steps are counted in STEPS order: when the plugin announces the device after the operator
    uncordoned (its revalidation need not wait for the plugin's quiet period), `device healthy`
    takes the time to it and `uncordon` counts nothing; the total is the same."""
    marks = [seen.get(s) for s in STEPS]
    for i in range(len(marks) - 2, -1, -1):
        marks[i] = marks[i] if marks[i] is not None else marks[i + 1]
    ends, out, prev = [m or 0.0 for m in marks], {}, 0.0
    for s, end in zip(STEPS, ends, strict=True):
        end = max(end, prev)
        out[s], prev = end - prev, end
    return out


# ---- by hand ---------------------------------------------------------------------------------------
def _floor_run(cluster: Any, client: Client) -> Run:
    node = cluster.node_name
    old, device = _holder(cluster, client, node)
    marks: list[float] = []
    t0 = _inject(device)
    cluster.kubectl("cordon", node)
    marks.append(time.monotonic())
    cluster.kubectl("-n", APPS, "delete", "pod", old, "--timeout=120s")  # waits until it is gone
    _poll_until("the holder gone", lambda: old not in _look(client, node).pods, 120)
    marks.append(time.monotonic())
    _clear(device)
    marks.append(time.monotonic())
    _poll_until("the device announced healthy", lambda: _look(client, node).allocatable_full, 120)
    marks.append(time.monotonic())
    cluster.kubectl("uncordon", node)
    marks.append(time.monotonic())
    _poll_until("the workload back", lambda: _back(cluster, _look(client, node), old), 180)
    marks.append(time.monotonic())
    times = [t0, *marks]
    return Run({s: times[i + 1] - times[i] for i, s in enumerate(STEPS)})


# ---- report ----------------------------------------------------------------------------------------
def _spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}" if len(values) > 1 else "-"


def _print(ops: list[Run], floors: list[Run]) -> None:
    med = statistics.median
    table = Table(
        title=f"Xid 79 on a held GPU -> node back in service (median of {len(ops)}, spread min-max; "
        "floor: by hand with kubectl)"
    )
    for col in ("step", "operator", "spread", "what", "by hand", "spread", "what", "ratio"):
        table.add_column(col, justify="left" if col in ("step", "what") else "right")
    for s in STEPS:
        o, f = [r.steps[s] for r in ops], [r.steps[s] for r in floors]
        ratio = f"{med(o) / med(f):.2f}x" if med(f) else "-"
        table.add_row(s, f"{med(o):.2f} s", _spread(o), OPERATOR_WHAT[s], f"{med(f):.2f} s", _spread(f), FLOOR_WHAT[s], ratio)  # fmt: skip
    o, f = [r.total for r in ops], [r.total for r in floors]
    table.add_row(
        "total",
        f"{med(o):.2f} s",
        _spread(o),
        "",
        f"{med(f):.2f} s",
        _spread(f),
        "",
        f"{med(o) / med(f):.2f}x",
    )
    console = Console(file=sys.stderr)
    if not console.is_terminal:
        console = Console(file=sys.stderr, width=240)
    console.print(table)
    conds = [r.condition for r in ops if r.condition is not None]
    if conds:
        console.print(f"fault -> GpuHealthy False: median {med(conds):.2f} s (spread {_spread(conds)})")
    for i, r in enumerate(ops, 1):
        console.print(f"operator run {i}: the record's steps {r.record}", markup=False)


def run() -> list[Figure]:
    from sro.kube.client import sync_client
    from sro.local.cluster import LocalCluster
    from sro.local.images import ensure_sro_image

    if os.geteuid() != 0:
        raise RuntimeError("the remediation benchmark needs root (the local cluster)")
    cluster = LocalCluster.default()
    cluster.ensure_up(_progress)
    image = ensure_sro_image(cluster, _progress)
    _install(cluster.kubeconfig, image)
    client = sync_client(cluster.kubeconfig)
    _leader(client)
    node = cluster.node_name
    ops: list[Run] = []
    floors: list[Run] = []
    try:
        _delete_sr(cluster, client)
        _clear()
        cluster.kubectl("apply", "-f", "-", input=json.dumps(_sr_doc()))
        _poll_until(f"{SR} validated", lambda: client.get(Node, node).metadata.labels.get(validated_label(SR)) == "true", 300)  # type: ignore[union-attr]  # fmt: skip
        cluster.kubectl("create", "namespace", APPS, check=False)
        cluster.kubectl("apply", "-f", "-", input=json.dumps(_workload()))
        _settled(cluster, client, node)
        paused = False
        for i in range(RUNS):
            for what in ("operator", "floor") if i % 2 == 0 else ("floor", "operator"):
                if paused != (what == "floor"):
                    paused = what == "floor"
                    _set_paused(cluster, client, paused)
                if what == "operator":
                    ops.append(_operator_run(cluster, client))
                    _progress(f"operator run {len(ops)}: {ops[-1].total:.2f} s {ops[-1].steps}")
                else:
                    floors.append(_floor_run(cluster, client))
                    _progress(f"by-hand run {len(floors)}: {floors[-1].total:.2f} s {floors[-1].steps}")
                _settled(cluster, client, node)
    finally:
        _clear()
        cluster.kubectl("delete", "namespace", APPS, "--ignore-not-found", "--wait=false", check=False)
        try:
            _delete_sr(cluster, client)
        finally:
            if client.get(Node, node).spec.unschedulable:  # type: ignore[union-attr]
                cluster.kubectl("uncordon", node, check=False)  # ours (a by-hand run cut short)
    _print(ops, floors)
    figures = [
        paired_figure(
            "REMEDIATION: Xid 79 on a held GPU -> node back in service (simulated-gpu, reset-device)",
            "s",
            "the same steps by hand with kubectl",
            [r.total for r in ops],
            [r.total for r in floors],
            goal=1.0,
            target=TARGET,
        )
    ]
    for s in STEPS:
        figures.append(
            paired_figure(
                f"remediation step {s}",
                "s",
                FLOOR_WHAT[s],
                [r.steps[s] for r in ops],
                [r.steps[s] for r in floors],
                goal=None,
            )
        )
    return figures
