"""The campaign's injectors: one function per fault kind, each doing what an admin, a crash or the
hardware would do to the real local cluster, and returning one line for the fault log.

A fault with two halves (a stop and its resume, a device fault and its clearing, an upgrade and its
rollback, a change and its undoing) does both, holding for the schedule's `hold_s`/`stop_s` in
between, so that a schedule is a plain list of calls and no half is ever left behind: the second
half runs in a `finally`. Everything goes through the tools a person would use — kubectl, `sro
install`, `sro upgrade`, `sro simulate fault`, `sro local restart` — or, for a process stop, a signal
to the operator's own PID (found through its pod's cgroup, as the operator benchmark does).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.chaos.hostlooks import operator_pids
from sro.api.names import (
    NAMESPACE,
    OPERATOR_LEASE,
    SPECIALRESOURCE_LABEL,
    STATE_LABEL,
    not_ready_taint,
    state_label,
    validated_label,
)
from sro.api.specialresource import STATE_FIELDS
from sro.local.cluster import LocalCluster

Params = dict[str, str | int | float]
UPGRADE_TAG = "chaos-upgrade"  # the tag the in-place upgrade moves to (the same image, a new name)


@dataclass
class Target:
    """What the injectors act on: the cluster, the SpecialResource (its applied document) and the image."""

    cluster: LocalCluster
    sr: str
    sr_doc: dict[str, Any]
    image: str
    env: dict[str, str] = field(default_factory=dict)

    def kubectl(self, *args: str, check: bool = False, input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:  # fmt: skip
        return self.cluster.kubectl(*args, check=check, input=input, timeout=timeout)

    def sro(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig), **self.env}
        return subprocess.run(
            [sys.executable, "-m", "sro", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def get(self, *args: str) -> Any:
        out = self.kubectl("get", *args, "-o", "json")
        return json.loads(out.stdout) if out.returncode == 0 else {}


def _first_line(out: subprocess.CompletedProcess[str]) -> str:
    text = (out.stderr or out.stdout or "").strip().splitlines()
    return "ok" if out.returncode == 0 else f"rc {out.returncode}: {text[-1] if text else ''}"


def _pods(t: Target, *selector: str) -> list[dict[str, Any]]:
    doc = t.get("pods", "-n", NAMESPACE, "-l", ",".join(selector))
    return [p for p in doc.get("items", []) if not p["metadata"].get("deletionTimestamp")]


def _leader_pod(t: Target, wait_s: float = 45) -> dict[str, Any]:
    """The running pod that holds the Lease; waits for one (a killed leader's Lease names it until
    a standby takes over); {} when none within `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        holder = t.get("lease", "-n", NAMESPACE, OPERATOR_LEASE).get("spec", {}).get("holderIdentity", "")
        pod = t.get("pod", "-n", NAMESPACE, holder) if holder else {}
        running = pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get(
            "deletionTimestamp"
        )
        if running or time.monotonic() > deadline:
            return pod if running else {}
        time.sleep(1)


# ---- the operator ----------------------------------------------------------------------------------
def leader_killed(t: Target, p: Params) -> str:
    pod = _leader_pod(t)
    if not pod:
        return "no leader to kill"
    name = pod["metadata"]["name"]
    out = t.kubectl("delete", "pod", "-n", NAMESPACE, name, "--grace-period=0", "--force", "--wait=false")
    return f"deleted leader pod {name}: {_first_line(out)}"


def leader_stopped(t: Target, p: Params) -> str:
    pod = _leader_pod(t)
    if not pod:
        return "no leader to stop"
    pids = operator_pids([pod["metadata"]["uid"]])
    if not pids:
        return f"no operator process of {pod['metadata']['name']} on this machine"
    stop_s = float(p.get("stop_s", 25))
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(stop_s)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    return f"SIGSTOP leader {pod['metadata']['name']} (pid {pids}) for {stop_s:.1f} s, then SIGCONT"


# ---- operands --------------------------------------------------------------------------------------
def _of_state(t: Target, state: str) -> tuple[str, str]:
    return f"{SPECIALRESOURCE_LABEL}={t.sr}", f"{STATE_LABEL}={state}"


def operand_pod_killed(t: Target, p: Params) -> str:
    state = str(p["state"])
    pods = _pods(t, *_of_state(t, state))
    if not pods:
        return f"no {state} pod to kill"
    name = pods[0]["metadata"]["name"]
    out = t.kubectl("delete", "pod", "-n", NAMESPACE, name, "--grace-period=0", "--force", "--wait=false")
    return f"killed {state} pod {name}: {_first_line(out)}"


def daemonset_deleted(t: Target, p: Params) -> str:
    state = str(p["state"])
    out = t.kubectl(
        "delete", "daemonset", "-n", NAMESPACE, "-l", ",".join(_of_state(t, state)), "--wait=false"
    )
    return f"deleted the {state} DaemonSet: {(out.stdout or out.stderr).strip() or 'none found'}"


def validation_pod_deleted(t: Target, p: Params) -> str:
    """A validation pod deleted while it runs: validation runs only while a node walks, so the
    state's label is taken off first (the operator validates again) and its new pod deleted."""
    state = str(p["state"])
    selector = _of_state(t, state)
    how = "running"
    if not _pods(t, *selector):
        t.kubectl("label", "node", t.cluster.node_name, f"{state_label(t.sr, state)}-")
        how = "after its label was removed"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pods = _pods(t, *selector)
        if pods:
            name = pods[0]["metadata"]["name"]
            out = t.kubectl("delete", "pod", "-n", NAMESPACE, name, "--wait=false")
            return f"deleted {state} pod {name} ({how}): {_first_line(out)}"
        time.sleep(0.3)
    return f"no {state} pod appeared in 30 s ({how})"


# ---- the cluster -----------------------------------------------------------------------------------
def component_restarted(t: Target, p: Params) -> str:
    comp = str(p["component"])
    t0 = time.monotonic()
    out = t.sro("local", "restart", comp, timeout=240)
    return f"restarted {comp} in {time.monotonic() - t0:.1f} s: {_first_line(out)}"


def device_fault(t: Target, p: Params) -> str:
    dev, xid, hold = str(p["device"]), str(p["xid"]), float(p.get("hold_s", 10))
    out = t.sro("simulate", "fault", "--device", dev, "--xid", xid)
    try:
        time.sleep(hold)
    finally:
        # the operator's remediation may have reset it already: clearing a healthy device is a no-op
        t.sro("simulate", "fault", "--device", dev, "--clear")
    return f"Xid {xid} on device {dev} ({_first_line(out)}), cleared after {hold:.1f} s"


def _tag(t: Target, new: str) -> None:
    ctr = [
        "ctr",
        "--address",
        str(t.cluster.layout.containerd_socket),
        "-n",
        "k8s.io",
        "images",
        "tag",
        "--force",
    ]
    subprocess.run([*ctr, t.image, new], check=True, capture_output=True, text=True)


def untag(cluster: LocalCluster, image: str) -> None:
    """Removes the upgrade's tag (after the campaign: the rollback left nothing on it)."""
    ctr = ["ctr", "--address", str(cluster.layout.containerd_socket), "-n", "k8s.io", "images", "rm"]
    subprocess.run([*ctr, f"{image.rsplit(':', 1)[0]}:{UPGRADE_TAG}"], capture_output=True, check=False)


def sro_upgraded(t: Target, p: Params) -> str:
    """`sro install` with a new image tag (the operator and every operand's template change; the
    driver's revision with it), then back to the installed one."""
    repo = t.image.rsplit(":", 1)[0]
    new = f"{repo}:{UPGRADE_TAG}"
    _tag(t, new)
    hold = float(p.get("hold_s", 20))
    up = t.sro("install", "--image", new, "--timeout", "240")
    try:
        time.sleep(hold)
    finally:
        back = t.sro("install", "--image", t.image, "--timeout", "240")
    return (
        f"sro install --image {new} ({_first_line(up)}), rolled back after {hold:.1f} s ({_first_line(back)})"
    )


# ---- what sro owns on the node and in the spec -------------------------------------------------------
def node_label_edited(t: Target, p: Params) -> str:
    node, what, action = t.cluster.node_name, str(p["what"]), str(p["action"])
    if what == "not-ready-taint":
        key = not_ready_taint(t.sr)
        arg = f"{key}-" if action == "removed" else f"{key}=chaos:NoSchedule"
        out = t.kubectl("taint", "node", node, arg, "--overwrite")
        return f"taint {arg} on {node}: {_first_line(out)}"
    key = validated_label(t.sr) if what == "validated" else state_label(t.sr, "device-plugin")
    arg = f"{key}-" if action == "removed" else f"{key}=chaos"
    out = t.kubectl("label", "node", node, arg, "--overwrite")
    return f"label {arg} on {node}: {_first_line(out)}"


def _patch(t: Target, spec: dict[str, Any]) -> str:
    return _first_line(t.kubectl("patch", "sr", t.sr, "--type=merge", "-p", json.dumps({"spec": spec})))


def spec_changed(t: Target, p: Params) -> str:
    change, hold = str(p["change"]), float(p.get("hold_s", 10))
    spec = t.sr_doc["spec"]
    if change == "state-toggled":
        key = STATE_FIELDS[str(p["state"])]
        changed: dict[str, Any] = {key: {"enabled": False}}
        back: dict[str, Any] = {key: {"enabled": spec.get(key, {}).get("enabled", True)}}
    elif change == "device-plugin-config":
        config = spec.get("devicePlugin", {}).get("config", "")
        changed = {"devicePlugin": {"config": config + "# chaos\n"}}
        back = {"devicePlugin": {"config": config}}
    else:
        version = spec.get("driver", {}).get("version")
        changed = {"driver": {"version": f"{version or 'default'}-chaos"}}
        back = {"driver": {"version": version}}
    first = _patch(t, changed)
    try:
        time.sleep(hold)
    finally:
        second = _patch(t, back)
    return f"spec {json.dumps(changed)} ({first}), undone after {hold:.1f} s ({second})"


def upgrade_paused(t: Target, p: Params) -> str:
    """A driver upgrade started and paused under way, resumed after `hold_s`; the new version stays
    (the next change of the version rolls it back)."""
    hold = float(p.get("hold_s", 10))
    spec = t.sr_doc["spec"]
    version = spec.get("driver", {}).get("version")
    new = f"{version or 'default'}-paused"
    first = _patch(t, {"driver": {"version": new}})
    time.sleep(2)  # let the first node start
    pause = t.sro("upgrade", "pause", "--sr", t.sr)
    try:
        time.sleep(hold)
    finally:
        resume = t.sro("upgrade", "resume", "--sr", t.sr)
        undo = _patch(t, {"driver": {"version": version}})
    return (
        f"driver version {new} ({first}), paused ({_first_line(pause)}), resumed after {hold:.1f} s "
        f"({_first_line(resume)}), version back ({undo})"
    )


# A delete slower than this keeps the operator replicas' logs of it: most take 9-12 s here, a few
# (right after a leader was killed) near a minute, and why is in the new leader's log.
SLOW_DELETE_S = 30.0


def _operator_logs(t: Target, since_s: int) -> str:
    parts = []
    for pod in _pods(t, "app.kubernetes.io/name=sro-operator"):
        name = pod["metadata"]["name"]
        out = t.kubectl("logs", "-n", NAMESPACE, name, f"--since={since_s}s", "--timestamps")
        parts.append(f"==== {name}\n{out.stdout}{out.stderr}")
    return "\n".join(parts)


def sr_reapplied(t: Target, p: Params) -> str:
    t0 = time.monotonic()
    gone = t.kubectl("delete", "sr", t.sr, "--timeout=180s", timeout=200)
    took = time.monotonic() - t0
    slow = ""
    if took > SLOW_DELETE_S:
        fd, path = tempfile.mkstemp(prefix="sro-chaos-slow-delete-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(_operator_logs(t, int(took) + 15))
        slow = f"; slow: the operator replicas' logs of it are in {path}"
    out = t.kubectl("apply", "-f", "-", input=json.dumps(t.sr_doc))
    return (
        f"SpecialResource deleted in {took:.1f} s ({_first_line(gone)}) and applied again ({_first_line(out)})"
        + slow
    )


INJECTORS: dict[str, Callable[[Target, Params], str]] = {
    "leader-killed": leader_killed,
    "leader-stopped": leader_stopped,
    "operand-pod-killed": operand_pod_killed,
    "daemonset-deleted": daemonset_deleted,
    "validation-pod-deleted": validation_pod_deleted,
    "component-restarted": component_restarted,
    "device-fault": device_fault,
    "sro-upgraded": sro_upgraded,
    "node-label-edited": node_label_edited,
    "spec-changed": spec_changed,
    "upgrade-paused": upgrade_paused,
    "sr-reapplied": sr_reapplied,
}
