"""Devices injected by containerd from the device plugin's CDI names, on the real local cluster.

Needs containerd >= 1.7 with `enable_cdi` (scripts/setup-host installs Debian 13's, `sro local up`
configures it); skipped, saying so, on a node whose runtime reads no CDI. What runs is what a node
runs: the runtime state's DaemonSet (sro's image: `sro runtime install --cdi-dir /var/run/cdi
--wait`, which writes and keeps the live spec, and its report container) and the device plugin's,
whose config names no strategy: the ConfigMap's runtimes.yaml lists this node, so the plugin answers
with `cdi-annotations` (and the device nodes). The runtime state names a host "python3" that counts
its runs before it execs the real one: every hook, wrapper and ldcache run on the node goes through
it, so a count that does not move proves no sro code ran on a container's start (and a pod of the
`sro` runtime class moves it: the control).

Checked: a pod that only requests `sro.dev/simulated-gpu: 1` (no runtime class, no env) sees
exactly one device node, the control node, the driver's libraries and binary (only the CDI spec
gives those to a pod of the default runtime) and the plugin's SRO_VISIBLE_DEVICES; a pod's own `cdi.k8s.io/*` annotation gets it nothing (the kubelet
puts only the plugin's annotations on the container; containerd does not read the pod's); a
malformed spec on the node is refused by containerd (the pod's events say why, the container never
starts), then repaired by the runtime state, whose report container's termination message is what
the SpecialResource's row shows, and the same pod starts with its device.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sro.api.names import REPORT_CONTAINER, RUNTIME_ROOT
from sro.api.recipes import SIMULATED_GPU
from sro.local.cluster import LocalCluster
from sro.local.layout import BUSYBOX_IMAGE, RUNTIME_HANDLER
from sro.manifests import render_text
from sro.node.runtime import hostinstall
from sro.node.runtime.rootwrites import read_manifest
from sro.operator.cdiruntime import reads_cdi
from sro.operator.observed import pod_from_json
from tests.e2e.helpers import figure, simulated_driver_on_host, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.root]

SRO = [sys.executable, "-m", "sro"]
NS = "sro-system"
OWNER = "sro-e2e-cdi"  # the runtime DaemonSet's name, hence its claim on the runtime files
RESOURCE = SIMULATED_GPU.resource
COUNTING = Path("/var/lib/sro-e2e-cdi")
PYTHON = COUNTING / "python3"
CALLS = COUNTING / "calls"
SPEC = Path("/var/run/cdi/sro.dev-simulated-gpu.yaml")
SCRIPT = (
    "ls /dev | grep sro- | tr '\\n' ' '; echo; for d in /dev/sro-simgpu0 /dev/sro-simgpu1; do "
    "[ -e $d ] && { cat $d 2>&1 | head -1; }; done; "
    "test -s /lib/libsimgpu.so.1 && echo HAS-LIB; test -s /lib/libsimgpu-ml.so.1 && echo HAS-ML; "
    "test -x /bin/simgpu-smi && echo HAS-SMI; echo VISIBLE=$SRO_VISIBLE_DEVICES; true"
)


def _kubectl_json(cluster: LocalCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


@pytest.fixture(scope="module")
def cdi_node(cluster: LocalCluster) -> str:
    node = _kubectl_json(cluster, "get", "node", cluster.node_name)
    runtime = node["status"]["nodeInfo"]["containerRuntimeVersion"]
    if not reads_cdi(runtime):
        pytest.skip(
            f"node {cluster.node_name} runs {runtime}: containerd reads CDI specs from 1.7 on "
            "(scripts/setup-host installs Debian 13's; `sro local up` enables CDI)"
        )
    config = (cluster.layout.config / "containerd.toml").read_text()
    if "enable_cdi = true" not in config:
        pytest.skip(f"{runtime} runs without enable_cdi: restart the cluster with `sro local up`")
    figure(f"cdi e2e on {runtime}")
    return str(node["metadata"]["name"])


@pytest.fixture(scope="module")
def driver() -> Iterator[None]:
    with simulated_driver_on_host(clear_faults=True):
        yield


def hook_runs() -> int:
    """How often the counting interpreter has run (every hook, wrapper or ldcache run of sro)."""
    try:
        return len(CALLS.read_text().splitlines())
    except FileNotFoundError:
        return 0


def _namespace(cluster: LocalCluster) -> Iterator[None]:
    existed = cluster.kubectl("get", "namespace", NS, check=False).returncode == 0
    if not existed:
        cluster.kubectl("create", "namespace", NS)
    yield
    if not existed:
        cluster.kubectl(
            "delete", "namespace", NS, "--ignore-not-found", "--wait=true", "--timeout=180s", check=False
        )


@pytest.fixture(scope="module")
def namespace(cluster: LocalCluster) -> Iterator[None]:
    yield from _namespace(cluster)


def _runtime_pod(cluster: LocalCluster) -> dict[str, Any]:
    pods = _kubectl_json(cluster, "get", "pods", "-n", NS, "-l", f"app.kubernetes.io/instance={OWNER}")
    return pods["items"][0] if pods["items"] else {}


@pytest.fixture(scope="module")
def runtime_state(cluster: LocalCluster, cdi_node: str, sro_image: str, driver: None, namespace: None) -> Iterator[None]:  # fmt: skip
    """The runtime state's DaemonSet, with the counting interpreter as the host's python3."""
    COUNTING.mkdir(parents=True, exist_ok=True)
    PYTHON.write_text(f'#!/bin/sh\necho "$$" >> {CALLS}\nexec /usr/bin/python3 "$@"\n')
    PYTHON.chmod(0o755)
    before = read_manifest(RUNTIME_ROOT) if os.path.isdir(RUNTIME_ROOT) else None
    manifests = render_text(
        "runtime", image=sro_image, namespace=NS, pull_policy="Never", name=OWNER,
        recipe=SIMULATED_GPU.name, python=str(PYTHON),
    )  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=manifests)

    def ready() -> bool:
        pod = _runtime_pod(cluster)
        return bool(pod) and pod_from_json(pod).ready and SPEC.exists()

    took = wait_for("the runtime state's pod ready and its live CDI spec", ready, timeout=180)
    figure(f"runtime state ready with {SPEC} in {took:.1f}s")
    try:
        yield
    finally:
        docs = [d for d in yaml.safe_load_all(manifests) if d and d["kind"] == "DaemonSet"]
        cluster.kubectl("delete", "--wait=true", "-f", "-", input=yaml.safe_dump_all(docs), check=False)
        wait_for("the runtime pod gone", lambda: not _runtime_pod(cluster), timeout=120)
        after = read_manifest(RUNTIME_ROOT) if os.path.isdir(RUNTIME_ROOT) else None
        if before is not None and after is not None and after.settings != before.settings:
            # other owners remain: their settings (python, CDI dir) as they were, through a claim
            # taken and dropped again
            hostinstall.install(RUNTIME_ROOT, dict(before.recipes), before.settings, owner=OWNER)
            hostinstall.uninstall(RUNTIME_ROOT, owner=OWNER)
        last = read_manifest(RUNTIME_ROOT) if os.path.isdir(RUNTIME_ROOT) else None
        if last is None or last.settings.python != str(PYTHON):  # nothing runs it any more
            shutil.rmtree(COUNTING, ignore_errors=True)


@pytest.fixture(scope="module")
def plugin(cluster: LocalCluster, cdi_node: str, sro_image: str, runtime_state: None) -> Iterator[None]:
    """The device plugin's DaemonSet; its config names no strategy, runtimes.yaml names this node."""
    manifests = render_text(
        "device-plugin", image=sro_image, namespace=NS, pull_policy="Never", recipe=SIMULATED_GPU.name,
        plugin_config="version: v1\n", cdi_nodes=[cdi_node],
    )  # fmt: skip
    docs = [d for d in yaml.safe_load_all(manifests) if d and d["kind"] != "Namespace"]
    # `sro install` owns the plugin's ServiceAccount in sro-system: one that was there stays there
    # (deleting it left the operator's device-plugin DaemonSet unable to create pods afterwards)
    installed = (
        cluster.kubectl("get", "serviceaccount", "-n", NS, "sro-device-plugin", check=False).returncode == 0
    )
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    if installed:
        docs = [d for d in docs if d["kind"] != "ServiceAccount"]

    def allocatable() -> int:
        node = _kubectl_json(cluster, "get", "node", cdi_node)
        return int(node["status"].get("allocatable", {}).get(RESOURCE, "0"))

    try:
        wait_for(f"{RESOURCE} allocatable", lambda: allocatable() == 2, timeout=180)
        yield
    finally:
        cluster.kubectl("delete", "--ignore-not-found", "--wait=true", "-f", "-", input=yaml.safe_dump_all(docs), check=False)  # fmt: skip


@pytest.fixture
def pods(cluster: LocalCluster) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        cluster.kubectl(
            "delete", "pod", name, "--ignore-not-found", "--wait=true", "--grace-period=1", check=False
        )


def start_pod(
    cluster: LocalCluster,
    pods: list[str],
    gpus: int = 1,
    annotations: dict[str, str] | None = None,
    runtime_class: str | None = None,
) -> str:
    name = f"sro-e2e-cdi-{uuid.uuid4().hex[:6]}"
    container: dict[str, Any] = {
        "name": "c", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", SCRIPT],
    }  # fmt: skip
    if gpus:
        container["resources"] = {"limits": {RESOURCE: str(gpus)}}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [container],
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    md: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "labels": {"app.kubernetes.io/managed-by": "sro-e2e"},
    }
    if annotations:
        md["annotations"] = annotations
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec}),
    )
    pods.append(name)
    return name


def finished(cluster: LocalCluster, name: str, timeout: float = 120) -> tuple[dict[str, Any], str]:
    """The pod once it ran to its end, and its log."""

    def done() -> bool:
        phase = _kubectl_json(cluster, "get", "pod", name)["status"].get("phase")
        return phase in ("Succeeded", "Failed")

    wait_for(f"pod {name} to finish", done, timeout=timeout, why=lambda: json.dumps(_kubectl_json(cluster, "get", "pod", name)["status"])[:2000])  # fmt: skip
    pod = _kubectl_json(cluster, "get", "pod", name)
    return pod, cluster.kubectl("logs", name, check=False).stdout


def devices_seen(log: str) -> list[str]:
    return log.splitlines()[0].split() if log.strip() else []


def test_a_pod_with_only_its_request_gets_exactly_its_device_through_cdi_and_no_hook_runs(
    cluster: LocalCluster, plugin: None, pods: list[str]
) -> None:
    runs = hook_runs()
    pod, log = finished(cluster, start_pod(cluster, pods))
    assert pod["status"]["phase"] == "Succeeded", json.dumps(pod["status"])[:2000]
    assert "runtimeClassName" not in pod["spec"] and "env" not in pod["spec"]["containers"][0]
    seen = devices_seen(log)
    gpus = [d for d in seen if d.startswith("sro-simgpu") and d[-1].isdigit()]
    assert len(gpus) == 1 and "sro-simgpuctl" in seen, log
    # its node opens as far as a driverless major goes (ENXIO), not refused by the device cgroup
    assert "No such device or address" in log and "Operation not permitted" not in log, log
    assert "HAS-LIB" in log and "HAS-ML" in log and "HAS-SMI" in log, log
    assert "VISIBLE=GPU-" in log, log  # the plugin's variable names its device (the default adds envvar)
    assert hook_runs() == runs, "an sro hook, wrapper or ldcache hook ran for a CDI pod"
    figure(f"cdi pod: {gpus[0]} with the driver's files, hook runs {hook_runs() - runs}")

    # the control: the same request through the `sro` runtime class runs the wrapper and its hook
    pod, log = finished(cluster, start_pod(cluster, pods, runtime_class=RUNTIME_HANDLER))
    assert pod["status"]["phase"] == "Succeeded", json.dumps(pod["status"])[:2000]
    assert hook_runs() > runs, "the counting python3 is not what the runtime files run"
    assert len([d for d in devices_seen(log) if d[-1].isdigit()]) == 1, log


def test_a_pods_own_cdi_annotation_gets_it_nothing(
    cluster: LocalCluster, plugin: None, pods: list[str]
) -> None:
    forged = {
        "cdi.k8s.io/forged": "sro.dev/simulated-gpu=all",
        "cdi.k8s.io/sro-device-plugin_x": "sro.dev/simulated-gpu=1",
    }
    pod, log = finished(cluster, start_pod(cluster, pods, gpus=0, annotations=forged))
    assert pod["status"]["phase"] == "Succeeded", json.dumps(pod["status"])[:2000]
    assert "sro-" not in " ".join(devices_seen(log)) and "HAS-LIB" not in log, log
    # with an allocation of one, the forged `all` adds nothing either
    pod, log = finished(cluster, start_pod(cluster, pods, gpus=1, annotations=forged))
    assert pod["status"]["phase"] == "Succeeded", json.dumps(pod["status"])[:2000]
    assert len([d for d in devices_seen(log) if d.startswith("sro-simgpu") and d[-1].isdigit()]) == 1, log


def _keeper_pid() -> int:
    """The runtime pod's `sro runtime install --wait` as the host sees it (it is our test's)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"--owner={OWNER}".encode() in args and b"install" in args:
            return int(entry)
    raise AssertionError("the runtime pod's keeper process is not running")


def _events(cluster: LocalCluster, name: str) -> str:
    out = cluster.kubectl("get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "json")
    return "\n".join(f"{e.get('reason')}: {e.get('message')}" for e in json.loads(out.stdout)["items"])


def test_a_malformed_spec_is_refused_then_repaired_and_the_row_says_so(
    cluster: LocalCluster, plugin: None, pods: list[str]
) -> None:
    good = SPEC.read_bytes()
    keeper = _keeper_pid()
    os.kill(keeper, signal.SIGSTOP)  # no repair until the refusal is seen
    try:
        SPEC.write_text("cdiVersion: 0.6.0\nkind: sro.dev/simulated-gpu\ndevices: [{name: '0'\n")
        name = start_pod(cluster, pods)
        wait_for("containerd's refusal in the pod's events", lambda: "CDI" in _events(cluster, name), timeout=120, why=lambda: _events(cluster, name))  # fmt: skip
        events = _events(cluster, name)
        figure(f"refused: {events.splitlines()[-1][:240]}")
        assert "unresolvable CDI devices" in events or "CDI device injection failed" in events, events

        def waiting() -> str:
            (cs,) = _kubectl_json(cluster, "get", "pod", name)["status"]["containerStatuses"]
            return str(cs["state"].get("waiting", {}).get("reason", ""))

        wait_for("the refusal in the pod's status", lambda: waiting() == "CreateContainerError", timeout=60)
        status = _kubectl_json(cluster, "get", "pod", name)["status"]
        (cs,) = status["containerStatuses"]
        assert "running" not in cs["state"] and "terminated" not in cs["state"] and not cs.get("lastState")
        assert cs["state"]["waiting"]["reason"] == "CreateContainerError", json.dumps(status)[:2000]
    finally:
        os.kill(keeper, signal.SIGCONT)
    took = wait_for("the runtime state to repair the spec", lambda: SPEC.read_bytes() == good, timeout=30)
    figure(f"spec repaired {took:.1f}s after the keeper resumed")

    def reported() -> str:
        return pod_from_json(_runtime_pod(cluster)).report

    wait_for("the report container's termination message", reported, timeout=60)
    runtime_pod = _runtime_pod(cluster)
    info = pod_from_json(runtime_pod)
    assert f"repaired CDI spec {SPEC}: changed since sro wrote it" in info.report, info
    assert info.ready, json.dumps(runtime_pod["status"])[:3000]
    report = next(c for c in runtime_pod["status"]["containerStatuses"] if c["name"] == REPORT_CONTAINER)
    # it said so by exiting (terminated now, or restarted with it as its last state); the runtime
    # container itself did not restart
    done = report["state"].get("terminated") or report.get("lastState", {}).get("terminated") or {}
    assert done.get("exitCode") == 0 and "repaired CDI spec" in done.get("message", ""), report
    previous = cluster.kubectl(
        "logs", "-n", NS, runtime_pod["metadata"]["name"], "-c", "runtime", "--previous", check=False
    )
    assert all(
        c["restartCount"] == 0
        for c in runtime_pod["status"]["containerStatuses"]
        if c["name"] != REPORT_CONTAINER
    ), (
        json.dumps(runtime_pod["status"])[:3000] + previous.stdout[-2000:]
    )  # the kubelet retries the creation: the same pod starts, with its one device
    pod, log = finished(cluster, name, timeout=180)
    assert pod["status"]["phase"] == "Succeeded", json.dumps(pod["status"])[:2000]
    assert len([d for d in devices_seen(log) if d.startswith("sro-simgpu") and d[-1].isdigit()]) == 1, log
