"""The driver state's simulated DaemonSet on the real cluster: its pod installs the SIMULATED driver on
the host, turns Ready on the marker, and takes the driver away again when the DaemonSet is deleted.

It uses a driver root of its own, so it never meets the device-plugin tests' driver under
/var/lib/sro/driver/simulated-gpu. Device nodes have fixed names (/dev/sro-simgpu<N>): when another
simulated driver already holds them, this test makes its nodes in a directory of its own instead of
replacing (and then removing) the other driver's.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sro.local.cluster import LocalCluster
from sro.manifests import render_text

pytestmark = pytest.mark.e2e

DRIVER_ROOT = Path("/var/lib/sro/driver/test-simulated-gpu")
PRIVATE_DEV = Path("/var/lib/sro/driver/test-simulated-gpu-dev")
NAME = "sro-driver-e2e"
DEVICES = 'driverVersion: "1.0-sim"\ncount: 2\nnumaNodes: [0, 0]\n'


def _wait(what: str, check: Callable[[], object], timeout: float) -> float:
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.25)
    return time.monotonic() - t0


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    name = f"sro-e2e-driver-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def dev_root() -> Iterator[Path]:
    """/dev, unless another simulated driver's nodes are there; whatever happens, ours are gone after."""
    taken = sorted(Path("/dev").glob("sro-simgpu*"))
    root = PRIVATE_DEV if taken else Path("/dev")
    if taken:
        print(f"{', '.join(map(str, taken))} belong to another simulated driver: using {root}")
    yield root
    subprocess.run(
        [sys.executable, "-m", "sro", "driver", "simulate", "--remove",
         "--driver-root", str(DRIVER_ROOT), "--dev-root", str(root)],
        capture_output=True, check=False,
    )  # fmt: skip
    if root == PRIVATE_DEV:
        subprocess.run(["rm", "-rf", str(PRIVATE_DEV)], check=False)


def _pod(cluster: LocalCluster, ns: str) -> dict[str, object] | None:
    out = cluster.kubectl(
        "-n", ns, "get", "pods", "-l", f"app.kubernetes.io/instance={NAME}", "-o", "json", check=False
    )
    items = json.loads(out.stdout or "{}").get("items", [])
    return items[0] if items else None


def _ready(pod: dict[str, object] | None) -> bool:
    conditions = (pod or {}).get("status", {}).get("conditions", [])  # type: ignore[attr-defined]
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_simulated_driver_daemonset_installs_and_removes_the_driver(
    cluster: LocalCluster, sro_image: str, namespace: str, dev_root: Path
) -> None:
    manifests = render_text(
        "driver",
        namespace=namespace,
        image=sro_image,
        pull_policy="Never",
        recipe="simulated-gpu",
        name=NAME,
        driver_root=str(DRIVER_ROOT),
        dev_root=str(dev_root),
        devices_config=DEVICES,
    )
    t0 = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=manifests)
    try:
        t_ready = _wait("the driver pod Ready", lambda: _ready(_pod(cluster, namespace)), 120)
    except AssertionError:
        pod = _pod(cluster, namespace)
        name = pod["metadata"]["name"] if pod else ""  # type: ignore[index]
        logs = cluster.kubectl("-n", namespace, "logs", name, check=False).stdout if name else ""
        describe = cluster.kubectl("-n", namespace, "describe", "pods", check=False).stdout
        raise AssertionError(f"driver pod not Ready:\n{logs}\n{describe}") from None

    node = dev_root / "sro-simgpu0"
    assert stat.S_ISCHR(node.lstat().st_mode), f"{node} is not a character device"
    assert stat.S_ISCHR((dev_root / "sro-simgpuctl").lstat().st_mode)
    doc = json.loads((DRIVER_ROOT / "devices.json").read_text())
    assert doc["simulated"] is True and len(doc["devices"]) == 2
    assert (DRIVER_ROOT / ".ready").exists()
    smi = subprocess.run([str(DRIVER_ROOT / "bin" / "simgpu-smi"), "-L"], capture_output=True, text=True)
    assert smi.stdout.count("[simulated]") == 2, smi.stdout + smi.stderr

    t1 = time.monotonic()
    cluster.kubectl("-n", namespace, "delete", "daemonset", NAME, "--wait=true", timeout=90)
    t_gone = _wait("the driver pod gone", lambda: _pod(cluster, namespace) is None, 90)
    t_removed = time.monotonic() - t1
    assert not node.exists() and not (dev_root / "sro-simgpuctl").exists(), "the device nodes are removed"
    # the directory itself stays (the pod's mount point of it cannot be removed from inside), empty
    left = sorted(p.name for p in DRIVER_ROOT.iterdir()) if DRIVER_ROOT.exists() else []
    assert left == [], "the driver files and the ready marker are removed"
    print(
        f"driver DaemonSet: pod Ready {t_ready:.1f}s after apply; deleted and driver removed in "
        f"{t_removed:.1f}s (pod gone after {t_gone:.1f}s); total {time.monotonic() - t0:.1f}s; dev root {dev_root}"
    )
