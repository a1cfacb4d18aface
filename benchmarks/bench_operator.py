"""The operator on the real local cluster: a SpecialResource created to the node validated, with the
time in each state, against the same stages as plain DaemonSets measured in pairs with it.

Measured run: examples/simulated-gpu.yaml's SpecialResource created with the same in-process client the
plain chain creates its DaemonSets with (`kubectl apply` would add its own start, reading the API's
OpenAPI schema and a GET, ~0.4 s here, to the operator's side only), then the Node is read every
0.05 s (`STEP_POLL`, as the plain chain's pods are) until `sro.dev/simulated-gpu.validated=true`.
Each step's time is when our poll first saw it (the reached annotation for `selected`, then each
`sro.dev/simulated-gpu.<state>=ready` label, then `validated`) minus the previous step's; the
operator's own record, the node annotation `sro.dev/<sr>.reached`, is shown next to it (RFC3339,
whole seconds). Every 0.2 s the same polls list the SpecialResource's pods, which splits each pod
state into: its pod seen (the operator created it), the pod Ready or Succeeded (the
kubelet ran it), the node labelled (the operator noticed). Then the SpecialResource is deleted and
timed until it is gone with all its pods (its finalizer removes everything).

Baseline (`operator_floor`): the six stages the operator runs pods for on the node as six plain
DaemonSets of the same image with the same readiness probes as the states' DaemonSets (taken from
their rendered templates), created one after another, each waited until its pod is Ready. It is what
any controller pays to run six pods in sequence on this node; the target (issue 26) is the operator
at most 1.0x it, and no state slower than its plain stage unless a floor shows why. These floors are
measured in the same run: for the states whose pod runs a Python agent, the agent's own start in its
pod (and its import against a bare Python start); for the states whose pod is the node's first to
mount a ConfigMap or a Secret (the driver's and the device plugin's configs, the exporter's token),
the kubelet's wait to mount it, read from its log in each run (`kubeletlog`: its watch of the
object races the API server's node authorizer; `operator_floor.own_object_floor` shows the same race
for a bare `sleep` pod in a side experiment). For the validation states, read from each run:
whether the kubelet's relist saw the pod Running before it Succeeded (a run-to-completion pod is
reported at the first relist after its end, a plain stage's at the first after its start), and for
the workload validation the wait for the device in the node's allocatable.

Runs alternate in SRO_BENCH_PAIRS pairs (operator, floor, floor, operator, ...: `harness.paired`);
every figure is the median with the min-max of the per-pair ratios. Memory: VmRSS of the leading
replica's `sro operator` process right after the node is validated, against a bare python3.

Needs root and the local cluster (brought up if it is not); installs sro (idempotent) and restarts
the operator when the image changed (so it runs the code measured); leaves no SpecialResource and
no namespace of its own behind.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from lightkube import ApiError, Client, codecs
from lightkube.generic_resource import create_global_resource
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod
from rich.console import Console
from rich.table import Table

from benchmarks.harness import PAIRS, Figure, paired, paired_figure, poll, rss_mib
from benchmarks.kubeletlog import log_end, pod_mount_waits
from benchmarks.operator_floor import (
    POD_STAGES,
    STEP_POLL,
    FloorRun,
    ensure_namespace,
    floor_run,
    own_mounts,
    own_object_floor,
    remove_namespace,
)
from benchmarks.operator_floor import pod_done as is_pod_done
from benchmarks.procmem import agent_start, bare_python_rss, cgroup_mib, pod_process
from sro.api.builtin_recipes import SIMULATED_GPU
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
SELECTED, VALIDATED = "selected", "validated"
STEPS = (SELECTED, *POD_STAGES, FEATURE_DISCOVERY, VALIDATED)
POLL = 0.2
TIMEOUT = 300.0
GOAL = 1.0  # issue 26: apply -> validated at most the plain chain's time, and each state its stage's
# the states whose pod runs a Python agent, and the module its command imports first
AGENTS = {
    DRIVER: "sro.devices.commands",
    RUNTIME: "sro.node.runtime.commands",
    DEVICE_PLUGIN: "sro.node.deviceplugin.commands",
    MONITORING: "sro.node.exporter.commands",
}
# per agent state: a word of its command line, and its ready file as the container sees it
READY_FILES = {
    DRIVER: (b"simulate", "/host/var/lib/sro/driver/simulated-gpu/.ready"),
    RUNTIME: (b"runtime", "/run/sro-runtime/ready"),
    DEVICE_PLUGIN: (b"device-plugin", "/run/sro-device-plugin/ready"),
    MONITORING: (b"exporter", "/run/sro-exporter/ready"),
}
# the run-to-completion states (their floors: `_validation_floor`), and the device the last one asks for
VALIDATIONS = (DRIVER_VALIDATION, DEVICE_PLUGIN_VALIDATION)
RESOURCE = str(SIMULATED_GPU["resource"])
# a mount the kubelet waited this long for lost the node authorizer's race (won: ~1 ms)
MOUNT_RACE_LOST = 0.1
SpecialResource = create_global_resource(GROUP, VERSION, KIND, PLURAL)

# what the upgrade, remediation and chaos benchmarks import from here, by these names
_pod_done = is_pod_done
_ensure_floor_namespace = ensure_namespace
_remove_floor_namespace = remove_namespace


def _operator_process(pod_uid: str) -> int:
    """The PID of the `sro operator` process of the pod."""
    return pod_process(pod_uid, b"operator")


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
    # per agent state: seconds from its process's start to its ready file (the agent's own start)
    agent_start: dict[str, float]
    # per validation state: seconds from its pod first seen Running to it seen Succeeded (0 when never
    # seen Running: the kubelet's relist found it started and gone at once); see `_validation_floor`
    relist: dict[str, float]
    # per state whose pod is the node's first to mount an object: the kubelet's wait to mount it
    mount_wait: dict[str, float]
    # seconds from the device plugin's pod seen Ready to the device seen in the node's allocatable
    # (the kubelet's next node status), None when the device was never seen missing in this run
    allocatable_wait: float | None


def _poll_until(what: str, check: Callable[[], bool], timeout: float = TIMEOUT) -> float:
    """`check` every POLL seconds until true; seconds it took."""
    return poll(what, check, timeout, POLL)


def _gone(client: Client, res: Any, name: str) -> bool:
    try:
        client.get(res, name)
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


def _restart_operator(cluster: Any) -> None:
    """A fresh operator pod: its memory is measured from its start, not after an earlier run's work."""
    cluster.kubectl("-n", NAMESPACE, "rollout", "restart", "deployment/sro-operator")
    cluster.kubectl(
        "-n", NAMESPACE, "rollout", "status", "deployment/sro-operator", "--timeout=180s", timeout=200
    )


def _leader(client: Client) -> Any:
    """The pod holding the operator's Lease (waits for one that exists, runs and is not being
    deleted: after a restart the old leader's pod can stay Terminating, and its Lease held, for
    a while — a first run timed then waited ~18 s for the new replica's election)."""
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
        if pod.metadata is not None and pod.metadata.deletionTimestamp is not None:
            return False
        found[:] = [pod]
        return True

    _poll_until("a running operator replica holding the Lease", check, 180)
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


def _agent_import_floor(pairs: int) -> dict[str, tuple[float, float]]:
    """Per agent state: (median seconds of `python -c 'import <its command module>'`, of `python -c
    pass`), in alternating pairs: the start a Python agent pays that a plain `sleep` does not."""

    def once(code: str) -> float:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - t

    out = {}
    for state, module in AGENTS.items():
        ms, bs = paired(lambda m=module: once(f"import {m}"), lambda: once("pass"), pairs)  # type: ignore[misc]
        out[state] = (statistics.median(ms), statistics.median(bs))
    return out


# ---- measured run --------------------------------------------------------------------------------
def _node_facts(client: Client, name: str) -> tuple[dict[str, str], dict[str, str], int]:
    """The node's (labels, annotations, the simulated GPUs in its allocatable)."""
    node = client.get(Node, name)
    meta, status = node.metadata, node.status
    allocatable = (status.allocatable or {}) if status else {}
    devices = int(allocatable.get(RESOURCE, "0"))
    return (dict(meta.labels or {}), dict(meta.annotations or {}), devices) if meta else ({}, {}, devices)


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
    pod_running: dict[str, float] = {}
    device_missing, device_seen = False, None
    uids: dict[str, str] = {}
    kubelet_log = cluster.layout.log("kubelet")
    since = log_end(kubelet_log)
    _poll_until(
        f"node {node_name} without {SR}'s labels (left by an earlier run)",
        lambda: validated_label(SR) not in _node_facts(client, node_name)[0],
        120,
    )
    specialresource = codecs.load_all_yaml(EXAMPLE.read_text())
    wall0 = time.time()
    t0 = time.monotonic()
    for obj in specialresource:
        client.create(obj)

    pods_next = 0.0

    def validated() -> bool:
        nonlocal device_missing, device_seen, pods_next
        labels, annotations, devices = _node_facts(client, node_name)
        now = time.monotonic() - t0
        device_missing = device_missing or not devices
        if devices and device_missing and device_seen is None:
            device_seen = now
        if ann_key in annotations:
            seen.setdefault(SELECTED, now)
            reached.update(_parse_reached(annotations[ann_key]))
        for s, key in keys.items():
            if labels.get(key) == "ready":
                seen.setdefault(s, now)
        if labels.get(validated_label(SR)) == "true":
            seen.setdefault(VALIDATED, now)
            return True
        if now < pods_next:  # the node every STEP_POLL, its pods (the breakdown) every POLL
            return False
        pods_next = now + POLL
        for pod in client.list(Pod, namespace=NAMESPACE, labels={SPECIALRESOURCE_LABEL: SR}):
            state = ((pod.metadata.labels or {}) if pod.metadata else {}).get(STATE_LABEL, "")
            pod_seen.setdefault(state, now)
            if pod.metadata is not None and pod.metadata.uid and not pod.metadata.deletionTimestamp:
                uids[state] = pod.metadata.uid
            if is_pod_done(pod, node_name):
                pod_done.setdefault(state, now)
            elif pod.status is not None and pod.status.phase == "Running" and state in VALIDATIONS:
                pod_running.setdefault(state, now)
        return False

    total = poll(f"node {node_name} validated for {SR}", validated, TIMEOUT, STEP_POLL)
    relist = {
        s: pod_done[s] - pod_running[s] if s in pod_running and s in pod_done else 0.0 for s in VALIDATIONS
    }
    plugin_ready = pod_done.get(DEVICE_PLUGIN)
    allocatable_wait = (
        max(0.0, device_seen - plugin_ready) if device_seen is not None and plugin_ready is not None else None
    )
    # a step seen in the same poll as the next: it gets the next one's time
    later = seen[VALIDATED]
    for s in reversed(STEPS):
        later = seen.setdefault(s, later)
    steps: dict[str, float] = {}
    annotated: dict[str, float] = {}
    prev, prev_wall = 0.0, wall0
    for s in STEPS:
        steps[s] = seen[s] - prev
        if s in POD_STAGES:  # a pod first seen already done: both in the same poll; the pods are
            # looked at less often than the node: what was seen after the label counts at the label
            done = min(pod_done.get(s, seen[s]), seen[s])
            pod_seen[s] = min(pod_seen.get(s, done), done) - prev
            pod_done[s] = done - prev
        prev = seen[s]
        when = _epoch(reached[s]) if s in reached else prev_wall
        # whole seconds: apply -> selected is against our clock truncated to the second
        annotated[s] = max(0.0, when - (int(prev_wall) if s == SELECTED else prev_wall))
        prev_wall = when
    pid = _operator_process(_leader(client).metadata.uid)
    rss, cgroup = rss_mib(pid), cgroup_mib(pid)
    agents = {s: agent_start(uids[s], *READY_FILES[s]) for s in READY_FILES if s in uids}
    mounting = {s: uids[s] for s, kinds in own_mounts().items() if kinds and s in uids}
    by_uid = pod_mount_waits(kubelet_log, since, mounting.values())
    mount_wait = {s: by_uid[uid] for s, uid in mounting.items()}
    delete = _delete_sr(cluster, client)
    return OperatorRun(
        total,
        steps,
        annotated,
        pod_seen,
        pod_done,
        delete,
        rss,
        cgroup,
        agents,
        relist,
        mount_wait,
        allocatable_wait,
    )


# ---- report --------------------------------------------------------------------------------------
STEP_WHAT = {
    SELECTED: "created -> node selected (reached annotation)",
    DRIVER: "driver DaemonSet pod Ready",
    DRIVER_VALIDATION: "driver validation pod Succeeded",
    RUNTIME: "runtime DaemonSet pod Ready",
    DEVICE_PLUGIN: "device plugin DaemonSet pod Ready",
    DEVICE_PLUGIN_VALIDATION: "workload validation pod Succeeded",
    MONITORING: "exporter DaemonSet pod Ready",
    FEATURE_DISCOVERY: "discovery published the device count",
    VALIDATED: "validated label",
}


def _spread(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"


def _print_breakdown(
    ops: list[OperatorRun],
    floors: list[FloorRun],
    agents: dict[str, tuple[float, float]],
    own: dict[str, list[float]],
) -> None:
    med = statistics.median
    table = Table(title=f"operator: time in each state ({len(ops)} pairs with the plain DaemonSets; medians)")
    cols = ("step", "what", "operator", "(annotation)", "pod seen", "pod done", "labelled", "plain stage",
            "ratio [min-max]", "agent start (import/python)", "first to mount",
            "a relist later (runs) / device allocatable")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="left" if col in ("step", "what") else "right")
    for s in STEPS:
        op = med(r.steps[s] for r in ops)
        row = [s, STEP_WHAT[s], f"{op:.2f} s", f"{med(r.annotated[s] for r in ops):.0f} s"]
        if s in POD_STAGES:
            # pod seen: the operator made it (after the previous label); pod done: kubelet ran it;
            # labelled: the operator noticed and labelled the node
            n = POD_STAGES.index(s)
            seen = med(r.pod_seen[s] for r in ops)
            done = med(r.pod_done[s] - r.pod_seen[s] for r in ops)
            labelled = med(r.steps[s] - r.pod_done[s] for r in ops)
            fl = med(f.stages[n] for f in floors)
            ratios = [r.steps[s] / f.stages[n] for r, f in zip(ops, floors, strict=True)]
            row += [f"+{seen:.2f}", f"+{done:.2f}", f"+{labelled:.2f}", f"{fl:.2f} s", _spread(ratios)]
            started = [r.agent_start[s] for r in ops if s in r.agent_start]
            row.append(
                f"{med(started):.2f} s ({agents[s][0] * 1000:.0f}/{agents[s][1] * 1000:.0f} ms)"
                if started and s in agents
                else ""
            )
            row.append(_mount_column(s, ops))
            row.append(_validation_column(s, ops))
        else:
            row += ["", "", "", "-", "-", "", "", ""]
        table.add_row(*row)
    totals = [r.total / f.total for r, f in zip(ops, floors, strict=True)]
    table.add_row("total", "created -> node validated", f"{med(r.total for r in ops):.2f} s", "", "", "",
                  "", f"{med(f.total for f in floors):.2f} s", _spread(totals), "", "", "")  # fmt: skip
    console = Console(file=sys.stderr)
    if not console.is_terminal:
        console = Console(file=sys.stderr, width=220)
    console.print(table)
    console.print(
        "runs: operator " + ", ".join(f"{r.total:.2f}" for r in ops) + " s; plain chain "
        + ", ".join(f"{f.total:.2f}" for f in floors) + " s; operator container cgroup memory "
        + ", ".join(f"{r.cgroup_mib:.1f}" if r.cgroup_mib is not None else "?" for r in ops) + " MiB"
    )  # fmt: skip
    console.print(
        "a `sleep` pod created -> Ready: mounting a ConfigMap already mounted on the node "
        + ", ".join(f"{t:.2f}" for t in own[""]) + " s; "
        + "; ".join(f"the node's first to mount a {k} " + ", ".join(f"{t:.2f}" for t in own[k]) + " s"
                    for k in own if k)
    )  # fmt: skip


def _mount_waits(state: str, ops: list[OperatorRun]) -> tuple[float, int]:
    """The kubelet's median wait to mount `state`'s own objects, and in how many runs it lost the
    authorizer's race."""
    waits = [r.mount_wait.get(state, 0.0) for r in ops]
    return statistics.median(waits), sum(1 for w in waits if w >= MOUNT_RACE_LOST)


def _validation_runs(state: str, ops: list[OperatorRun]) -> tuple[list[float], list[float]]:
    """Per run, a validation state's relist penalty and its wait for the device in the node's
    allocatable (0 for the driver's validation, or when the device was never seen missing)."""
    relists = [r.relist[state] for r in ops]
    waits = [(r.allocatable_wait or 0.0) if state == DEVICE_PLUGIN_VALIDATION else 0.0 for r in ops]
    return relists, waits


def _mount_column(state: str, ops: list[OperatorRun]) -> str:
    """The kinds of object `state`'s pod is the node's first to mount, with the kubelet's median
    wait to mount them (in how many runs it lost the authorizer's race)."""
    kinds = own_mounts().get(state, ())
    if not kinds:
        return ""
    wait, lost = _mount_waits(state, ops)
    return f"{', '.join(kinds)} +{wait:.2f} s ({lost}/{len(ops)})"


def _validation_column(state: str, ops: list[OperatorRun]) -> str:
    """The breakdown's cell of `_validation_floor`'s parts: the median relist penalty (in how many
    runs a relist fell while the validation ran), and for the workload validation the wait for the
    device in the node's allocatable."""
    if state not in VALIDATIONS:
        return ""
    relists, waits = _validation_runs(state, ops)
    cell = f"+{statistics.median(relists):.2f} s ({sum(1 for t in relists if t)}/{len(ops)})"
    if state == DEVICE_PLUGIN_VALIDATION:
        cell += f" / {statistics.median(waits):.2f} s"
    return cell


def _floor(
    state: str, ops: list[OperatorRun], agents: dict[str, tuple[float, float]], own: dict[str, list[float]]
) -> tuple[float, list[str]]:
    """What `state`'s pod pays that a plain stage's `sleep` does not, measured in this run: its
    agent's own start in its pod (process start -> ready file), and for each kind of object it is
    the node's first pod to mount (`operator_floor.own_mounts`) the kubelet's wait to mount it in
    each run (`kubeletlog`); for a validation, `_validation_floor`.
    (seconds, each part in words)."""
    seconds, parts = 0.0, []
    started = [r.agent_start[state] for r in ops if state in r.agent_start]
    if started and state in agents:
        start, (imported, bare) = statistics.median(started), agents[state]
        seconds += start
        parts.append(
            f"its agent's own start in its pod {start:.2f} s (importing {AGENTS[state]} {imported * 1000:.0f} ms "
            f"vs {bare * 1000:.0f} ms for a bare python)"
        )
    if state in VALIDATIONS:
        more, said = _validation_floor(state, ops)
        seconds += more
        parts += said
    kinds = own_mounts().get(state, ())
    wait, lost = _mount_waits(state, ops)
    if kinds and wait >= MOUNT_RACE_LOST:
        shared = statistics.median(own[""])
        seconds += wait
        parts.append(
            f"the kubelet waited {wait:.2f} s (median; lost in {lost} of {len(ops)} runs) to mount its "
            f"{' and '.join(kinds)}, its pod being the node's first to mount it (its watch's first list refused "
            "by the node authorizer, retried after the reflector's back-off; a `sleep` pod made so here: "
            + ", ".join(f"{kind} {statistics.median(own[kind]):.2f} s" for kind in kinds)
            + f" vs {shared:.2f} s for one already mounted there, created -> Ready, medians of {len(own[''])})"
        )
    return seconds, parts


def _validation_floor(state: str, ops: list[OperatorRun]) -> tuple[float, list[str]]:
    """What a validation state's pod pays that a plain stage's does not, read from each run (the
    median of the runs' sums; each part in words). The kubelet learns of a container's start and
    of its exit by its relist (every second, PLEG): a plain stage's pod is Ready at the first relist
    after its start; a run-to-completion pod is Succeeded at the first relist after its exit, so
    when a relist falls while it runs (seen here as the pod Running, then Succeeded), it is reported
    a whole relist later. The workload validation's pod also asks the scheduler for a device, which
    it cannot place before the kubelet's node status (every second here) put the device plugin's
    devices in the node's allocatable (`ValidationState.held` creates it then)."""
    relists, waits = _validation_runs(state, ops)
    parts = []
    if statistics.median(relists):
        parts.append(
            f"its pod seen Running, then Succeeded a relist later, in {sum(1 for t in relists if t)} of "
            f"{len(ops)} runs (the kubelet reports a pod's end at its first relist after it; a relist fell "
            f"while the validation ran): +{statistics.median(relists):.2f} s median"
        )
    if statistics.median(waits):
        parts.append(
            f"the device in the node's allocatable {statistics.median(waits):.2f} s (median) after the device "
            "plugin's pod was Ready (the kubelet's node status; the scheduler cannot place the pod before)"
        )
    # counted only with the words that say why (a median of sums over parts whose medians are 0 is not)
    return (statistics.median(a + b for a, b in zip(relists, waits, strict=True)) if parts else 0.0), parts


def _gap(measured: list[float], baseline: list[float]) -> float:
    """Seconds the measured side took beyond its baseline: the median of the pairs' differences
    (as the ratio is the median of the pairs' ratios; the medians' difference can be below zero
    while most pairs are above one)."""
    return statistics.median(a - b for a, b in zip(measured, baseline, strict=True))


def _why(
    states: tuple[str, ...],
    gap: float,
    ops: list[OperatorRun],
    agents: dict[str, tuple[float, float]],
    own: dict[str, list[float]],
) -> str:
    """Where `states` take `gap` seconds beyond their plain stages: the floors their pods pay, when
    together they cover the gap; empty otherwise (the figure then says NOT MET)."""
    floors = {s: _floor(s, ops, agents, own) for s in states}
    total = sum(seconds for seconds, _ in floors.values())
    if not total or total < gap:
        return ""
    said = "; ".join(
        (f"{s}: " if len(states) > 1 else "") + ", ".join(parts) for s, (_, parts) in floors.items() if parts
    )
    return f"{said} — {total:.2f} s in all, more than the {gap:.2f} s beyond the plain {'chain' if len(states) > 1 else 'stage'}, whose pods run `sleep` and mount nothing of their own"


def run() -> list[Figure]:
    from sro.kube.client import sync_client
    from sro.local.cluster import LocalCluster
    from sro.local.images import ensure_sro_image

    if os.geteuid() != 0:
        raise RuntimeError("the operator benchmark needs root (the local cluster, /proc of its pods)")
    cluster = LocalCluster.default()
    cluster.ensure_up(_progress)
    image = ensure_sro_image(cluster, _progress)
    _progress(f"sro install --image {image}; a fresh operator pod")
    _install(cluster.kubeconfig, image)
    _restart_operator(cluster)
    client = sync_client(cluster.kubeconfig)
    _leader(client)
    ops: list[OperatorRun] = []
    floors: list[FloorRun] = []
    bare: list[float] = []

    def operator() -> float:
        ops.append(_operator_run(cluster, client))
        bare.append(bare_python_rss())
        _progress(f"operator run {len(ops)}: validated in {ops[-1].total:.2f} s")
        return ops[-1].total

    def plain() -> float:
        floors.append(floor_run(client, image, cluster.node_name))
        _progress(f"plain chain run {len(floors)}: {floors[-1].total:.2f} s")
        return floors[-1].total

    try:
        _delete_sr(cluster, client)
        remove_namespace(client)
        op_totals, fl_totals = paired(operator, plain, PAIRS)
    finally:
        try:
            _delete_sr(cluster, client)
        finally:
            remove_namespace(client)
    agents = _agent_import_floor(PAIRS)
    _progress(
        "a pod that is its node's first to mount a ConfigMap / a Secret, against one mounting a ConfigMap already mounted there"
    )
    try:
        own = own_object_floor(client, image, cluster.node_name, PAIRS)
    finally:
        remove_namespace(client)
    _print_breakdown(ops, floors, agents, own)
    med = statistics.median
    total_gap = _gap(op_totals, fl_totals)
    figures = [
        paired_figure(
            "OPERATOR: SpecialResource created -> node validated (simulated-gpu)",
            "s",
            f"{len(POD_STAGES)} plain DaemonSets one after another, the states' probes",
            op_totals,
            fl_totals,
            GOAL,
            why=_why(POD_STAGES, total_gap, ops, agents, own)
            if med(op_totals) > GOAL * med(fl_totals)
            else "",
        )
    ]
    for n, s in enumerate(POD_STAGES):
        steps, stages = [r.steps[s] for r in ops], [f.stages[n] for f in floors]
        ratio = statistics.median(a / b for a, b in zip(steps, stages, strict=True))
        figures.append(
            paired_figure(
                f"operator state {s} (previous state ready -> ready)",
                "s",
                f"plain DaemonSet {n + 1} create -> Ready",
                steps,
                stages,
                GOAL,
                why=_why((s,), _gap(steps, stages), ops, agents, own) if ratio > GOAL else "",
            )
        )
    figures += [
        paired_figure(
            "operator: kubectl delete sr -> it and its pods gone",
            "s",
            "delete the plain DaemonSets -> pods gone",
            [r.delete for r in ops],
            [f.delete for f in floors],
            None,
        ),
        paired_figure(
            "operator resident memory (leader, node validated)",
            "MiB",
            "bare python3 process",
            [r.rss for r in ops],
            bare,
            None,
        ),
    ]
    return figures
