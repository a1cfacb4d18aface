"""A pod gets only the devices it was allocated (issue 21 §1), on the real cluster.

Pods with `runtimeClassName: sro` (the runc wrapper and the hook `sro runtime install` puts on the
host) beside the simulated device plugin's DaemonSet, all with `SRO_VISIBLE_DEVICES=all`:
  * no resource request: no /dev/sro-simgpu* node, no driver library, and a node of the driver's
    major it makes itself cannot be opened (the device cgroup: EPERM);
  * asking for 1: exactly its one device (and the control node), the driver's files, ENXIO on open;
  * privileged: every device and the driver's files (its own env is believed; README, Security model);
  * the management request `SRO_MANAGEMENT_DEVICES=all` is nothing in the default namespace, even
    with a pod annotation naming the operator's namespace as containerd's sandbox-namespace key.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

import pytest

from sro.local.cluster import LocalCluster
from sro.node.runtime.activation import SANDBOX_NAMESPACE
from tests.e2e import test_device_plugin, test_runtime_class

RESOURCE = test_device_plugin.RESOURCE
# their fixtures, used here under the same names: the simulated driver (4 devices), the plugin's
# DaemonSet, the busybox image, and the runtime files `sro runtime install` puts on the host
driver = test_device_plugin.driver
plugin = test_device_plugin.plugin
busybox = test_device_plugin.busybox
runtime = test_runtime_class.runtime

pytestmark = [pytest.mark.e2e, pytest.mark.root]

SCRIPT = (
    "ls /dev | grep sro- | tr '\\n' ' '; echo; test -s /lib/libsimgpu.so.1 && echo HAS-LIB; "
    'for d in /dev/sro-simgpu[0-9]*; do test -e $d && echo "NODE $d $(cat $d 2>&1 >/dev/null)"; done; '
    'mknod /dev/forged c {major} 0 && echo "FORGED $(cat /dev/forged 2>&1 >/dev/null)"; true'
)


def _run(
    cluster: LocalCluster,
    image: str,
    major: int,
    *,
    env: dict[str, str],
    gpus: int = 0,
    privileged: bool = False,
    annotations: dict[str, str] | None = None,
) -> str:
    name = f"sro-e2e-isolation-{uuid.uuid4().hex[:6]}"
    container: dict[str, Any] = {
        "name": "c",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", SCRIPT.format(major=major)],
        "env": [{"name": k, "value": v} for k, v in env.items()],
    }
    if gpus:
        container["resources"] = {"limits": {RESOURCE: str(gpus)}}
    if privileged:
        container["securityContext"] = {"privileged": True}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "runtimeClassName": "sro",
            "containers": [container],
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    try:
        deadline = time.monotonic() + 120
        while True:
            doc = json.loads(cluster.kubectl("get", "pod", name, "-o", "json").stdout)
            phase = doc.get("status", {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"pod {name} did not finish: {json.dumps(doc.get('status'))[:2000]}")
            time.sleep(1)
        out = cluster.kubectl("logs", name, check=False).stdout
        assert phase == "Succeeded", f"{json.dumps(doc['status'])[:2000]}\n{out}"
        return out
    finally:
        cluster.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=false", check=False)


def _nodes(out: str) -> dict[str, str]:
    return dict(re.findall(r"^NODE (\S+) (.*)$", out, re.M))


def test_unallocated_pod_gets_no_device_whatever_its_env_says(
    cluster: LocalCluster, runtime: str, plugin: int, driver: dict[str, Any], busybox: str
) -> None:
    out = _run(cluster, busybox, driver["major"], env={"SRO_VISIBLE_DEVICES": "all"})
    assert not out.splitlines()[0].strip(), out  # no sro- node at all
    assert _nodes(out) == {} and "HAS-LIB" not in out, out
    assert "FORGED" in out and "Operation not permitted" in out.split("FORGED", 1)[1], out  # cgroup: EPERM


def test_pod_asking_for_one_gets_exactly_its_one(
    cluster: LocalCluster, runtime: str, plugin: int, driver: dict[str, Any], busybox: str
) -> None:
    out = _run(cluster, busybox, driver["major"], env={"SRO_VISIBLE_DEVICES": "all"}, gpus=1)
    nodes = _nodes(out)
    assert len(nodes) == 1, out
    assert all("No such device or address" in err for err in nodes.values()), out  # ENXIO, not EPERM
    first = out.splitlines()[0].split()
    assert sorted(first) == sorted([next(iter(nodes)).removeprefix("/dev/"), "sro-simgpuctl"]), out
    assert "HAS-LIB" in out, out  # the hook injected the driver's files for the allocation


def test_privileged_pod_with_the_env_gets_every_device(
    cluster: LocalCluster, runtime: str, plugin: int, driver: dict[str, Any], busybox: str
) -> None:
    out = _run(cluster, busybox, driver["major"], env={"SRO_VISIBLE_DEVICES": "all"}, privileged=True)
    assert set(_nodes(out)) == {d["deviceNode"] for d in driver["devices"]}, out
    assert "HAS-LIB" in out, out  # believed: the hook injected (a privileged pod sees host /dev anyway)


def test_management_request_outside_the_operators_namespace_gets_nothing(
    cluster: LocalCluster, runtime: str, plugin: int, driver: dict[str, Any], busybox: str
) -> None:
    forged = {SANDBOX_NAMESPACE: "sro-system"}  # a pod annotation: never reaches the OCI spec
    out = _run(cluster, busybox, driver["major"], env={"SRO_MANAGEMENT_DEVICES": "all"}, annotations=forged)
    assert _nodes(out) == {} and "HAS-LIB" not in out, out
