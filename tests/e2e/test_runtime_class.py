"""Pods with `runtimeClassName: sro` get their devices through the runc wrapper, on the real cluster.

containerd's runtime handler `sro` runs the launcher at RUNTIME_LAUNCHER (the local cluster registers
it with a RuntimeClass), which `sro runtime install` writes with the hook zipapp for the host's python3,
as the runtime state's DaemonSet does on a node (installed here for the owner `e2e-runtime-class`,
whose claim is dropped again at the end: another owner's install stays). The simulated driver is on the host (likewise installed here when absent). Checked: the device node asked for is there
and the device cgroup allows it (ENXIO, not EPERM), the library and the binary are there, a pod
asking for nothing and a pod on the default runtime get nothing, and an unknown device id fails the
container's creation with the hook's reason in the pod status. The requests name devices with
SRO_MANAGEMENT_DEVICES in the operator's namespace: the one request an unprivileged pod makes without
a device plugin allocation that the hook believes (issue 21 §1; SRO_VISIBLE_DEVICES alone, the open
path these tests used before, gets nothing now: tests/e2e/test_device_isolation.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sro.api.names import RUNTIME_LAUNCHER, RUNTIME_ROOT
from sro.api.recipes import SIMULATED_GPU
from sro.local.cluster import LocalCluster
from sro.local.layout import BUSYBOX_IMAGE, RUNTIME_HANDLER
from tests.e2e.helpers import simulated_driver_on_host

pytestmark = [pytest.mark.e2e, pytest.mark.root]

SRO = [sys.executable, "-m", "sro"]
SCRIPT = (
    "ls /dev | grep sro- | tr '\\n' ' '; echo; cat /dev/sro-simgpu0 2>&1; "
    "test -s /lib/libsimgpu.so.1 && echo HAS-LIB; test -x /bin/simgpu-smi && echo HAS-SMI; true"
)


@pytest.fixture(scope="module")
def driver() -> Iterator[None]:
    with simulated_driver_on_host():
        yield


@pytest.fixture(scope="module")
def runtime(cluster: LocalCluster, driver: None) -> Iterator[str]:
    """The handler's files, installed by the code the runtime state runs (`sro runtime install`)."""
    config = (cluster.layout.config / "containerd.toml").read_text()
    binary = re.search(r'BinaryName = "([^"]+)"', config)
    assert binary and os.path.realpath(binary[1]) == os.path.realpath(RUNTIME_LAUNCHER), (
        f"containerd's handler runs {binary and binary[1]}, not {RUNTIME_LAUNCHER}: a cluster started "
        "before `sro runtime install` existed; restart it"
    )
    args = ["--root", RUNTIME_ROOT, "--recipe", SIMULATED_GPU.name, "--owner", "e2e-runtime-class"]
    subprocess.run([*SRO, "runtime", "install", *args], check=True, capture_output=True)
    assert f"{RUNTIME_ROOT}/sro-hook.pyz" in Path(RUNTIME_LAUNCHER).read_text()
    rc = json.loads(cluster.kubectl("get", "runtimeclass", RUNTIME_HANDLER, "-o", "json").stdout)
    assert rc["handler"] == RUNTIME_HANDLER
    yield RUNTIME_HANDLER
    subprocess.run([*SRO, "runtime", "uninstall", *args], check=False, capture_output=True)


MANAGEMENT_NS = "sro-system"


@pytest.fixture(scope="module")
def management_ns(cluster: LocalCluster) -> Iterator[str]:
    """The operator's namespace (the hook's default management namespace), made if absent."""
    existed = cluster.kubectl("get", "namespace", MANAGEMENT_NS, check=False).returncode == 0
    if not existed:
        cluster.kubectl("create", "namespace", MANAGEMENT_NS)
        for _ in range(60):  # the namespace controller makes its default service account
            if cluster.kubectl("get", "sa", "default", "-n", MANAGEMENT_NS, check=False).returncode == 0:
                break
            time.sleep(1)
    yield MANAGEMENT_NS
    if not existed:
        # wait until it is gone: the next module may create it again, and a namespace being
        # terminated refuses new objects (test_device_isolation's plugin)
        cluster.kubectl(
            "delete",
            "namespace",
            MANAGEMENT_NS,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=180s",
            check=False,
        )


def _pod(
    cluster: LocalCluster, env: dict[str, str], runtime_class: str | None, namespace: str = "default"
) -> str:
    name = f"sro-e2e-runtime-{uuid.uuid4().hex[:6]}"
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "c",
                "image": BUSYBOX_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", SCRIPT],
                "env": [{"name": k, "value": v} for k, v in env.items()],
            }
        ],
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    return name


def _wait(
    cluster: LocalCluster, name: str, timeout: float = 120, namespace: str = "default"
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        pod: dict[str, Any] = json.loads(
            cluster.kubectl("get", "pod", name, "-n", namespace, "-o", "json").stdout
        )
        status = pod.get("status", {})
        if status.get("phase") in ("Succeeded", "Failed"):
            return pod
        for cs in status.get("containerStatuses", []):
            waiting = cs.get("state", {}).get("waiting", {})
            if waiting.get("reason") in ("RunContainerError", "CreateContainerError", "StartError"):
                return pod
            if cs.get("state", {}).get("terminated"):
                return pod
        if time.monotonic() > deadline:
            raise AssertionError(f"pod {name} did not finish: {json.dumps(status)[:2000]}")
        time.sleep(1)


@pytest.fixture
def pods(cluster: LocalCluster) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for n in names:
        ns, _, name = n.rpartition("/")
        cluster.kubectl(
            "delete", "pod", name, "-n", ns or "default", "--ignore-not-found", "--wait=false", check=False
        )


def _logs(cluster: LocalCluster, name: str, namespace: str = "default") -> str:
    return cluster.kubectl("logs", name, "-n", namespace, check=False).stdout


def test_pod_gets_its_device_through_the_wrapper(
    cluster: LocalCluster, runtime: str, management_ns: str, pods: list[str]
) -> None:
    name = _pod(cluster, {"SRO_MANAGEMENT_DEVICES": "0"}, runtime, management_ns)
    pods.append(f"{management_ns}/{name}")
    pod = _wait(cluster, name, namespace=management_ns)
    out = _logs(cluster, name, management_ns)
    assert pod["status"]["phase"] == "Succeeded", json.dumps(pod["status"])[:2000]
    first = out.splitlines()[0].split()
    assert "sro-simgpu0" in first and "sro-simgpuctl" in first and "sro-simgpu1" not in first, out
    assert "No such device or address" in out and "Operation not permitted" not in out, out
    assert "HAS-LIB" in out and "HAS-SMI" in out, out


def test_no_request_or_default_runtime_gets_nothing(
    cluster: LocalCluster, runtime: str, pods: list[str]
) -> None:
    pods.append(asks_nothing := _pod(cluster, {}, runtime))
    pods.append(default_runtime := _pod(cluster, {"SRO_VISIBLE_DEVICES": "0"}, None))
    for name in (asks_nothing, default_runtime):
        pod = _wait(cluster, name)
        out = _logs(cluster, name)
        assert pod["status"]["phase"] == "Succeeded", json.dumps(pod["status"])[:2000]
        assert "sro-" not in out.splitlines()[0] and "HAS-LIB" not in out, out


def test_unknown_device_fails_the_container_with_the_reason(
    cluster: LocalCluster, runtime: str, management_ns: str, pods: list[str]
) -> None:
    name = _pod(cluster, {"SRO_MANAGEMENT_DEVICES": "99"}, runtime, management_ns)
    pods.append(f"{management_ns}/{name}")
    pod = _wait(cluster, name, namespace=management_ns)
    status = json.dumps(pod["status"])
    assert pod["status"].get("phase") != "Succeeded"
    assert "unknown device id '99'" in status, status[:3000]
