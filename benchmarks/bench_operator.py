"""The operator on the real local cluster: `kubectl apply` of a SpecialResource to the node validated,
with the time in each state, against a floor measured in the same run; and its resident memory.

Measured run: `kubectl apply -f examples/simulated-gpu.yaml`, then the Node is read every 0.2 s until
`sro.dev/simulated-gpu.validated=true`. Each step's time is when our poll first saw it (the reached
annotation for `selected`, then each `sro.dev/simulated-gpu.<state>=ready` label, then `validated`)
minus the previous step's; the operator's own record, the node annotation `sro.dev/<sr>.reached`, is
shown next to it (RFC3339, whole seconds). The same polls list the SpecialResource's pods, which
splits each pod state into: its pod seen (the operator created it), the pod Ready or Succeeded (the
kubelet ran it), the node labelled (the operator noticed). Then the SpecialResource is deleted and timed until it is
gone with all its pods (its finalizer removes everything).

Floor, same run: the six stages the operator runs pods for on the node (driver, driver-validation,
runtime, device-plugin, device-plugin-validation, monitoring) as six plain DaemonSets of the same image
(`sleep infinity`, readiness `exec true` every 2 s like the state DaemonSets' probes, no gating) in a
namespace of their own, created one after another with the API, each waited (0.2 s polls) until its
pod on the node is Ready; then deleted together and timed until their pods are gone. The floor is
what any controller pays to run six pods in sequence on this node; the figure's target (issue 9)
is at most 2x it.

Runs alternate (operator, floor, floor, operator, ...: the first to go pays no warm-up the other
skips); medians over SRO_BENCH_OPERATOR_RUNS runs of each (default 2). Memory: VmRSS of the leading
replica's `sro operator` process (found through its pod's cgroup in /proc: the cluster runs on this
machine) right after the node is validated, against a bare `python3 -c 'import time; time.sleep(5)'`.

Needs root and the local cluster (brought up if it is not); installs sro (idempotent) and leaves it
installed; leaves no SpecialResource and no namespace of its own behind.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from lightkube import ApiError, Client, codecs
from lightkube.generic_resource import create_global_resource
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Namespace, Node, Pod, ServiceAccount
from rich.console import Console
from rich.table import Table

from benchmarks.harness import Figure, poll, rss_mib
from sro.api.names import (
    DEVICE_PLUGIN,
    DEVICE_PLUGIN_VALIDATION,
    DRIVER,
    DRIVER_VALIDATION,
    FEATURE_DISCOVERY,
    GROUP,
    KIND,
    MONITORING,
    NAMESPACE,
    PLURAL,
    RUNTIME,
    SPECIALRESOURCE_LABEL,
    STATE_LABEL,
    VERSION,
    reached_annotation,
    state_label,
    validated_label,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "simulated-gpu.yaml"
SR = "simulated-gpu"
LEASE = "sro-operator"
FLOOR_NS = "sro-bench-floor"
POD_STAGES = (DRIVER, DRIVER_VALIDATION, RUNTIME, DEVICE_PLUGIN, DEVICE_PLUGIN_VALIDATION, MONITORING)
SELECTED, VALIDATED = "selected", "validated"
STEPS = (SELECTED, *POD_STAGES, FEATURE_DISCOVERY, VALIDATED)
RUNS = int(os.environ.get("SRO_BENCH_OPERATOR_RUNS", "2"))
POLL = 0.2
TIMEOUT = 300.0
TARGET = 2.0
SpecialResource = create_global_resource(GROUP, VERSION, KIND, PLURAL)

_T0 = time.monotonic()


def _progress(message: str) -> None:
    print(f"[operator bench {time.monotonic() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)


@dataclass
class OperatorRun:
    total: float
    steps: dict[str, float]  # seconds in each step, from our polls
    annotated: dict[str, float]  # the same from the node's reached annotation (whole seconds)
    # per pod state, seconds from the previous state's label: to its pod seen, to the pod Ready/Succeeded
    pod_seen: dict[str, float]
    pod_done: dict[str, float]
    delete: float
    rss: float
    cgroup_mib: float | None


@dataclass
class FloorRun:
    total: float
    stages: list[float] = field(default_factory=list)
    delete: float = 0.0


def _poll_until(what: str, check: Callable[[], bool], timeout: float = TIMEOUT) -> float:
    """`check` every POLL seconds until true; seconds it took."""
    return poll(what, check, timeout, POLL)


def _gone(client: Client, res: Any, name: str, namespace: str | None = None) -> bool:
    try:
        client.get(res, name, namespace=namespace) if namespace else client.get(res, name)
    except ApiError as e:
        if e.status.code == 404:
            return True
        raise
    return False


# ---- setup ---------------------------------------------------------------------------------------
def _install(kubeconfig: Path, image: str) -> None:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    out = subprocess.run(
        [sys.executable, "-m", "sro", "install", "--image", image, "--timeout", "240"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"sro install failed:\n{out.stdout}{out.stderr}")


def _leader(client: Client) -> Any:
    """The pod holding the operator's Lease (waits for one that exists and runs)."""
    found: list[Any] = []

    def check() -> bool:
        try:
            spec = client.get(Lease, LEASE, namespace=NAMESPACE).spec
            holder = spec.holderIdentity if spec else None
            pod = client.get(Pod, holder, namespace=NAMESPACE) if holder else None
        except ApiError:
            return False
        if pod is None or pod.status is None or pod.status.phase != "Running":
            return False
        found[:] = [pod]
        return True

    _poll_until("a running operator replica holding the Lease", check, 120)
    return found[0]


def _delete_sr(cluster: Any, client: Client) -> float:
    """Deletes the SpecialResource if there is one; seconds until it and its pods are gone."""
    t0 = time.monotonic()
    cluster.kubectl("delete", "sr", SR, "--ignore-not-found", "--wait=false")

    def gone() -> bool:
        pods = client.list(Pod, namespace=NAMESPACE, labels={SPECIALRESOURCE_LABEL: SR})
        return _gone(client, SpecialResource, SR) and not list(pods)

    _poll_until(f"SpecialResource {SR} and its pods to be gone", gone, 180)
    return time.monotonic() - t0


# ---- the operator's resident memory --------------------------------------------------------------
def _operator_process(pod_uid: str) -> int:
    """The PID of the `sro operator` process in the pod (its cgroup path names the pod's uid)."""
    if not pod_uid:
        raise RuntimeError("benchmark: the operator's pod has no uid")
    keys = (pod_uid, pod_uid.replace("-", "_"))
    best: tuple[float, int] | None = None
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cgroup = (p / "cgroup").read_text()
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not any(k in cgroup for k in keys) or b"operator" not in argv:
            continue
        if not any(b"sro" in a for a in argv):
            continue
        try:
            rss = rss_mib(int(p.name))
        except (OSError, RuntimeError):
            continue
        if best is None or rss > best[0]:
            best = (rss, int(p.name))
    if best is None:
        raise RuntimeError(f"benchmark: no `sro operator` process of pod {pod_uid} in /proc on this machine")
    return best[1]


def _cgroup_mib(pid: int) -> float | None:
    """The memory charged to the process's container cgroup (page cache included): cgroup v1's
    memory.usage_in_bytes, else v2's memory.current; None when neither can be read."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "memory":
            f = Path("/sys/fs/cgroup/memory", path.lstrip("/"), "memory.usage_in_bytes")
        elif controllers == "":
            f = Path("/sys/fs/cgroup", path.lstrip("/"), "memory.current")
        else:
            continue
        try:
            return int(f.read_text()) / 2**20
        except (OSError, ValueError):
            continue
    return None


def _bare_python_rss() -> float:
    proc = subprocess.Popen(["python3", "-c", "import time; time.sleep(5)"])
    try:
        time.sleep(0.5)
        return rss_mib(proc.pid)
    finally:
        proc.kill()
        proc.wait()


# ---- measured run --------------------------------------------------------------------------------
def _node_meta(client: Client, name: str) -> tuple[dict[str, str], dict[str, str]]:
    """The node's (labels, annotations)."""
    meta = client.get(Node, name).metadata
    return (dict(meta.labels or {}), dict(meta.annotations or {})) if meta else ({}, {})


def _parse_reached(value: str) -> dict[str, str]:
    """`state=RFC3339,...` as the operator writes the reached annotation."""
    return dict(kv.split("=", 1) for kv in value.split(",") if "=" in kv)  # type: ignore[misc]


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _operator_run(cluster: Any, client: Client) -> OperatorRun:
    node_name = cluster.node_name
    ann_key = reached_annotation(SR)
    keys = {s: state_label(SR, s) for s in (*POD_STAGES, FEATURE_DISCOVERY)}
    seen: dict[str, float] = {}
    reached: dict[str, str] = {}
    pod_seen: dict[str, float] = {}
    pod_done: dict[str, float] = {}
    _poll_until(
        f"node {node_name} without {SR}'s labels (left by an earlier run)",
        lambda: validated_label(SR) not in _node_meta(client, node_name)[0],
        120,
    )
    wall0 = time.time()
    t0 = time.monotonic()
    cluster.kubectl("apply", "-f", str(EXAMPLE))

    def validated() -> bool:
        labels, annotations = _node_meta(client, node_name)
        now = time.monotonic() - t0
        if ann_key in annotations:
            seen.setdefault(SELECTED, now)
            reached.update(_parse_reached(annotations[ann_key]))
        for s, key in keys.items():
            if labels.get(key) == "ready":
                seen.setdefault(s, now)
        for pod in client.list(Pod, namespace=NAMESPACE, labels={SPECIALRESOURCE_LABEL: SR}):
            state = ((pod.metadata.labels or {}) if pod.metadata else {}).get(STATE_LABEL, "")
            pod_seen.setdefault(state, now)
            if _pod_done(pod, node_name):
                pod_done.setdefault(state, now)
        if labels.get(validated_label(SR)) == "true":
            seen.setdefault(VALIDATED, now)
            return True
        return False

    total = _poll_until(f"node {node_name} validated for {SR}", validated)
    # a step seen in the same poll as the next: it gets the next one's time
    later = seen[VALIDATED]
    for s in reversed(STEPS):
        later = seen.setdefault(s, later)
    steps: dict[str, float] = {}
    annotated: dict[str, float] = {}
    prev, prev_wall = 0.0, wall0
    for s in STEPS:
        steps[s] = seen[s] - prev
        if s in POD_STAGES:  # a pod first seen already done: both in the same poll
            pod_seen[s] = pod_seen.get(s, seen[s]) - prev
            pod_done[s] = pod_done.get(s, seen[s]) - prev
        prev = seen[s]
        when = _epoch(reached[s]) if s in reached else prev_wall
        # whole seconds: apply -> selected is against our clock truncated to the second
        annotated[s] = max(0.0, when - (int(prev_wall) if s == SELECTED else prev_wall))
        prev_wall = when
    pid = _operator_process(_leader(client).metadata.uid)
    rss, cgroup = rss_mib(pid), _cgroup_mib(pid)
    delete = _delete_sr(cluster, client)
    return OperatorRun(total, steps, annotated, pod_seen, pod_done, delete, rss, cgroup)


# ---- floor ---------------------------------------------------------------------------------------
def _floor_ds(stage: str, image: str) -> Any:
    name = f"floor-{stage}"
    return codecs.from_dict(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": FLOOR_NS, "labels": {"app": name}},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "enableServiceLinks": False,
                        # `sleep` as PID 1 ignores SIGTERM: without this each delete waits 30 s
                        "terminationGracePeriodSeconds": 1,
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [
                            {
                                "name": "c",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "command": ["sleep", "infinity"],
                                "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 2},
                            }
                        ],
                    },
                },
            },
        }
    )


def _ensure_floor_namespace(client: Client) -> None:
    if not _gone(client, Namespace, FLOOR_NS):
        return
    client.create(codecs.from_dict({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": FLOOR_NS}}))
    # pods are refused until the namespace's default ServiceAccount exists
    _poll_until(
        "the floor namespace's default ServiceAccount",
        lambda: not _gone(client, ServiceAccount, "default", FLOOR_NS),
        60,
    )


def _pod_done(pod: Any, node_name: str) -> bool:
    """Ready (or Succeeded: a validation pod) on the node, and not being deleted."""
    if pod.metadata is None or pod.metadata.deletionTimestamp or pod.status is None:
        return False
    if pod.spec is None or pod.spec.nodeName != node_name:
        return False
    if pod.status.phase == "Succeeded":
        return True
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _pod_ready_on(client: Client, app: str, node_name: str) -> bool:
    return any(_pod_done(p, node_name) for p in client.list(Pod, namespace=FLOOR_NS, labels={"app": app}))


def _floor_run(client: Client, image: str, node_name: str) -> FloorRun:
    _ensure_floor_namespace(client)
    run = FloorRun(total=0.0)
    t0 = time.monotonic()
    for stage in POD_STAGES:
        t = time.monotonic()
        client.create(_floor_ds(stage, image))
        ready = partial(_pod_ready_on, client, f"floor-{stage}", node_name)
        _poll_until(f"floor DaemonSet {stage} Ready on {node_name}", ready)
        run.stages.append(time.monotonic() - t)
    run.total = time.monotonic() - t0
    t = time.monotonic()
    for stage in POD_STAGES:
        client.delete(DaemonSet, f"floor-{stage}", namespace=FLOOR_NS)
    _poll_until(
        "the floor's DaemonSets and pods to be gone",
        lambda: not list(client.list(DaemonSet, namespace=FLOOR_NS)) and not list(client.list(Pod, namespace=FLOOR_NS)),
        120,
    )  # fmt: skip
    run.delete = time.monotonic() - t
    return run


def _remove_floor_namespace(client: Client) -> None:
    if _gone(client, Namespace, FLOOR_NS):
        return
    client.delete(Namespace, FLOOR_NS)
    _poll_until("the floor namespace to be gone", lambda: _gone(client, Namespace, FLOOR_NS), 180)


# ---- report --------------------------------------------------------------------------------------
STEP_WHAT = {
    SELECTED: "kubectl apply -> node selected (reached annotation)",
    DRIVER: "driver DaemonSet pod Ready",
    DRIVER_VALIDATION: "driver validation pod Succeeded",
    RUNTIME: "runtime DaemonSet pod Ready",
    DEVICE_PLUGIN: "device plugin DaemonSet pod Ready",
    DEVICE_PLUGIN_VALIDATION: "workload validation pod Succeeded",
    MONITORING: "exporter DaemonSet pod Ready",
    FEATURE_DISCOVERY: "discovery published the device count",
    VALIDATED: "validated label",
}


def _print_breakdown(ops: list[OperatorRun], floors: list[FloorRun]) -> None:
    med = statistics.median
    table = Table(title=f"operator: time in each state (median of {len(ops)} runs; floor: plain DaemonSets)")
    cols = ("step", "what", "operator, polls", "(annotation)", "pod seen", "pod done", "labelled", "floor stage", "ratio")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="left" if col in ("step", "what") else "right")
    for s in STEPS:
        op = med(r.steps[s] for r in ops)
        row = [s, STEP_WHAT[s], f"{op:.2f} s", f"{med(r.annotated[s] for r in ops):.0f} s"]
        if s in POD_STAGES:
            # pod seen: the operator made it (after the previous label); pod done: kubelet ran it;
            # labelled: the operator noticed and labelled the node
            seen = med(r.pod_seen[s] for r in ops)
            done = med(r.pod_done[s] - r.pod_seen[s] for r in ops)
            labelled = med(r.steps[s] - r.pod_done[s] for r in ops)
            fl = med(f.stages[POD_STAGES.index(s)] for f in floors)
            row += [f"+{seen:.2f}", f"+{done:.2f}", f"+{labelled:.2f}"]
            row += [f"{fl:.2f} s", f"{op / fl:.2f}x" if fl else "-"]
        else:
            row += ["", "", "", "-", "-"]
        table.add_row(*row)
    op_total, fl_total = med(r.total for r in ops), med(f.total for f in floors)
    table.add_row("total", "kubectl apply -> node validated", f"{op_total:.2f} s", "", "", "", "",
                  f"{fl_total:.2f} s", f"{op_total / fl_total:.2f}x")  # fmt: skip
    console = Console(file=sys.stderr)
    if not console.is_terminal:
        console = Console(file=sys.stderr, width=200)
    console.print(table)
    console.print(
        "runs: operator " + ", ".join(f"{r.total:.2f}" for r in ops) + " s (of which feature-discovery "
        + ", ".join(f"{r.steps[FEATURE_DISCOVERY]:.2f}" for r in ops) + " s); floor "
        + ", ".join(f"{f.total:.2f}" for f in floors) + " s; operator container cgroup memory "
        + ", ".join(f"{r.cgroup_mib:.1f}" if r.cgroup_mib is not None else "?" for r in ops) + " MiB"
    )  # fmt: skip
    ratio = op_total / fl_total
    verdict = "MET" if ratio <= TARGET else "NOT MET"
    console.print(
        f"[bold]2x target {verdict}[/bold]: operator {op_total:.2f} s / floor {fl_total:.2f} s = {ratio:.2f}x"
    )


def run() -> list[Figure]:
    from sro.kube.client import sync_client
    from sro.local.cluster import LocalCluster
    from sro.local.images import ensure_sro_image

    if os.geteuid() != 0:
        raise RuntimeError("the operator benchmark needs root (the local cluster, /proc of its pods)")
    cluster = LocalCluster.default()
    cluster.ensure_up(_progress)
    image = ensure_sro_image(cluster, _progress)
    _progress(f"sro install --image {image}")
    _install(cluster.kubeconfig, image)
    client = sync_client(cluster.kubeconfig)
    _leader(client)
    ops: list[OperatorRun] = []
    floors: list[FloorRun] = []
    bare: list[float] = []
    try:
        _delete_sr(cluster, client)
        _remove_floor_namespace(client)
        for i in range(RUNS):
            order = ("operator", "floor") if i % 2 == 0 else ("floor", "operator")
            for what in order:
                if what == "operator":
                    ops.append(_operator_run(cluster, client))
                    _progress(f"operator run {len(ops)}: validated in {ops[-1].total:.2f} s")
                else:
                    floors.append(_floor_run(client, image, cluster.node_name))
                    _progress(f"floor run {len(floors)}: {floors[-1].total:.2f} s")
            bare.append(_bare_python_rss())
    finally:
        try:
            _delete_sr(cluster, client)
        finally:
            _remove_floor_namespace(client)
    _print_breakdown(ops, floors)
    med = statistics.median
    op_total, fl_total = med(r.total for r in ops), med(f.total for f in floors)
    met = "MET" if op_total <= TARGET * fl_total else "NOT MET"
    floor_name = f"{len(POD_STAGES)} plain DaemonSets one after another"
    figures = [
        Figure(
            "OPERATOR: kubectl apply -> node validated (simulated-gpu)",
            op_total,
            fl_total,
            "s",
            floor_name,
            f"<= 2x floor: {met}",
        )
    ]
    for n, s in enumerate(POD_STAGES):
        figures.append(
            Figure(
                f"operator state {s} (previous state ready -> ready)",
                med(r.steps[s] for r in ops),
                med(f.stages[n] for f in floors),
                "s",
                f"plain DaemonSet {n + 1} create -> Ready",
            )
        )
    figures += [
        Figure(
            "operator: kubectl delete sr -> it and its pods gone",
            med(r.delete for r in ops),
            med(f.delete for f in floors),
            "s",
            "delete the plain DaemonSets -> pods gone",
        ),
        Figure(
            "operator resident memory (leader, node validated)",
            med(r.rss for r in ops),
            med(bare),
            "MiB",
            "bare python3 process",
        ),
    ]
    return figures
