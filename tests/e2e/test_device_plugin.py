"""The device plugin on the real local cluster, with the simulated driver on the host.

The plugin runs as the `device-plugin` DaemonSet of the sro image (imagePullPolicy Never); the
simulated driver is installed on the host with `sro driver simulate` (real device nodes with a
major no kernel driver owns). Checked against the real kubelet and scheduler: capacity, a pod
that gets exactly its two device nodes and the env (open gives ENXIO for them, EPERM for a node it
was not given), a pod asking for too many staying Pending with the scheduler's reason, a fault
dropping allocatable by one and its clearing bringing it back, and re-registration after a kubelet
restart (the time after the socket reappears is printed as a figure).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from sro.api.recipes import SIMULATED_DEVICE_LIST, SIMULATED_GPU
from sro.local.cluster import LocalCluster
from sro.manifests import render_text

pytestmark = [pytest.mark.e2e, pytest.mark.root]

RESOURCE = SIMULATED_GPU.resource
DRIVER_ROOT = Path(SIMULATED_GPU.driver_root)
SRO = [sys.executable, "-m", "sro"]
NS = "sro-system"
DEVICES_YAML = """
driverVersion: "550.0-sim"
defaults: {product: SRO Simulated H100, memoryMiB: 81920, computeCapability: "9.0"}
count: 4
numaNodes: [0, 0, 1, 1]
nvlinkIslands: [[0, 1], [2, 3]]
"""
SHARED = f"{RESOURCE}.shared"


def plugin_config(last_index: int) -> str:
    """Quick recovery for the test, and the last GPU time-sliced in two under `<resource>.shared`."""
    return (
        "version: v1\n"
        "health: {recoverAfterSeconds: 2}\n"
        "sharing:\n"
        "  timeSlicing:\n"
        "    renameByDefault: true\n"
        f"    resources: [{{name: {RESOURCE}, replicas: 2, devices: [{last_index}]}}]\n"
    )


def wait_for(what: str, check: Callable[[], object], timeout: float = 90, every: float = 0.5) -> float:
    start = time.monotonic()
    while True:
        if check():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def node_resource(cluster: LocalCluster, field: str) -> int:
    node = json.loads(cluster.kubectl("get", "node", cluster.node_name, "-o", "json").stdout)
    return int(node["status"].get(field, {}).get(RESOURCE, "0"))


@pytest.fixture(scope="module")
def driver() -> Iterator[dict[str, object]]:
    """The simulated driver on the host (reused when one is installed already, removed if we made it)."""
    existing = (DRIVER_ROOT / SIMULATED_DEVICE_LIST).exists()
    if not existing:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write(DEVICES_YAML)
            f.flush()
            subprocess.run(
                [*SRO, "driver", "simulate", "--config", f.name], check=True, capture_output=True, text=True
            )
    doc = json.loads((DRIVER_ROOT / SIMULATED_DEVICE_LIST).read_text())
    subprocess.run([*SRO, "simulate", "fault", "--all", "--clear"], check=True, capture_output=True)
    yield doc
    subprocess.run([*SRO, "simulate", "fault", "--all", "--clear"], check=False, capture_output=True)
    if not existing:
        subprocess.run([*SRO, "driver", "simulate", "--remove"], check=False, capture_output=True)


@pytest.fixture(scope="module")
def plugin(cluster: LocalCluster, sro_image: str, driver: dict[str, object]) -> Iterator[int]:
    """The device-plugin DaemonSet, until the node announces every simulated device; yields how
    many whole devices it announces (all but the last, which is time-sliced)."""
    manifests = render_text(
        "device-plugin",
        image=sro_image,
        namespace=NS,
        pull_policy="Never",
        recipe="simulated-gpu",
        plugin_config=plugin_config(len(driver["devices"]) - 1),  # type: ignore[arg-type]
    )
    docs = [d for d in yaml.safe_load_all(manifests) if d and d["kind"] != "Namespace"]

    def phase() -> str:
        out = cluster.kubectl("get", "namespace", NS, "-o", "jsonpath={.status.phase}", check=False)
        return out.stdout.strip() if out.returncode == 0 else ""

    # a module that ran before may have left the namespace Terminating (its teardown's wait timed
    # out): what is applied into it now would be deleted with it, the plugin's pod under the tests
    wait_for(f"namespace {NS} not Terminating", lambda: phase() != "Terminating", timeout=300)
    namespace_existed = phase() != ""
    cluster.kubectl("apply", "-f", "-", input=manifests)
    count = len(driver["devices"]) - 1  # type: ignore[arg-type]  # the last one is shared
    try:
        wait_for(
            f"{RESOURCE}={count} allocatable",
            lambda: node_resource(cluster, "allocatable") == count,
            timeout=180,
        )
        yield count
    finally:
        objs = yaml.safe_dump_all(docs)
        cluster.kubectl("delete", "--ignore-not-found", "--wait=true", "-f", "-", input=objs, check=False)
        if not namespace_existed:
            # wait until it is gone: the next test may create it again, and a namespace being
            # terminated refuses new objects
            cluster.kubectl(
                "delete", "namespace", NS, "--ignore-not-found", "--wait=true", "--timeout=180s", check=False
            )


def plugin_logs(cluster: LocalCluster) -> str:
    out = cluster.kubectl(
        "logs", "-n", NS, "-l", "app.kubernetes.io/instance=simulated-gpu", "--tail=-1", check=False
    )
    return out.stdout + out.stderr


def run_pod(
    cluster: LocalCluster, name: str, gpus: int, script: str, image: str, resource: str = RESOURCE
) -> dict[str, object]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"app.kubernetes.io/managed-by": "sro-e2e"},
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "c",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", script],
                    "resources": {"limits": {resource: str(gpus)}},
                }
            ],
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    return pod


def get_pod(cluster: LocalCluster, name: str) -> dict[str, object]:
    return json.loads(cluster.kubectl("get", "pod", name, "-n", "default", "-o", "json").stdout)  # type: ignore[no-any-return]


def run_to_completion(
    cluster: LocalCluster, name: str, gpus: int, script: str, image: str, resource: str = RESOURCE
) -> str:
    """Run a pod asking for `gpus` devices to its end; returns its log and deletes it."""
    run_pod(cluster, name, gpus, script, image, resource)
    try:

        def finished() -> bool:
            return get_pod(cluster, name)["status"].get("phase") in ("Succeeded", "Failed")  # type: ignore[attr-defined]

        wait_for("pod to finish", finished)
        return cluster.kubectl("logs", name, "-n", "default").stdout
    finally:
        delete_pod(cluster, name)


def delete_pod(cluster: LocalCluster, name: str) -> None:
    cluster.kubectl(
        "delete",
        "pod",
        name,
        "-n",
        "default",
        "--ignore-not-found",
        "--wait=true",
        "--grace-period=1",
        check=False,
    )


@pytest.fixture(scope="module")
def busybox(cluster: LocalCluster, sro_image: str) -> str:
    out = subprocess.run(
        ["ctr", "-n", "k8s.io", "images", "ls", "-q"], capture_output=True, text=True, check=False
    )
    return "localhost/busybox:sro" if "localhost/busybox:sro" in out.stdout.split() else sro_image


def test_capacity_shows_the_devices(cluster: LocalCluster, plugin: int) -> None:
    assert node_resource(cluster, "capacity") == plugin
    assert node_resource(cluster, "allocatable") == plugin
    assert "registered with the kubelet" in plugin_logs(cluster)


def test_pod_gets_exactly_two_devices(
    cluster: LocalCluster, plugin: int, driver: dict[str, object], busybox: str
) -> None:
    major = driver["major"]
    by_uuid = {d["uuid"]: d for d in driver["devices"]}  # type: ignore[attr-defined]
    # open each device node it got (the driver has no kernel side: ENXIO), then a node of the same
    # major that it did not get (the device cgroup says no: EPERM)
    script = (
        'echo "VISIBLE=$SRO_VISIBLE_DEVICES"; '
        'for d in /dev/sro-simgpu*; do echo "NODE $d $(cat $d 2>&1 >/dev/null)"; done; '
        f'mknod /dev/sro-other c {major} 200 && echo "OTHER $(cat /dev/sro-other 2>&1 >/dev/null)"; true'
    )
    name = "sro-e2e-two-gpus"
    logs = run_to_completion(cluster, name, 2, script, busybox)
    visible = re.search(r"^VISIBLE=(.*)$", logs, re.M)
    assert visible, logs
    uuids = visible.group(1).split(",")
    assert len(uuids) == 2 and all(u in by_uuid for u in uuids), logs
    nodes = dict(re.findall(r"^NODE (\S+) (.*)$", logs, re.M))
    expected = {by_uuid[u]["deviceNode"] for u in uuids} | {"/dev/sro-simgpuctl"}
    assert set(nodes) == expected, logs
    for path, err in nodes.items():
        assert "No such device or address" in err, f"{path}: {err}"  # ENXIO, not EPERM
    assert "OTHER" in logs and "Operation not permitted" in logs.split("OTHER", 1)[1], logs
    # the kubelet asked for a preferred pair and got an NVLink-joined one (islands [0, 1] and [2, 3])
    assert "GetPreferredAllocation 2 of" in plugin_logs(cluster)
    if len(by_uuid) == 4:  # whole GPUs 0, 1, 2 (3 is shared): the only NVLink pair is 0-1
        assert sorted(by_uuid[u]["index"] for u in uuids) == [0, 1], uuids


def test_time_sliced_device_is_a_resource_of_its_own(
    cluster: LocalCluster, plugin: int, driver: dict[str, object], busybox: str
) -> None:
    node = json.loads(cluster.kubectl("get", "node", cluster.node_name, "-o", "json").stdout)
    assert node["status"]["allocatable"].get(SHARED) == "2"
    last = driver["devices"][-1]  # type: ignore[index]
    name = "sro-e2e-shared"
    script = 'echo "VISIBLE=$SRO_VISIBLE_DEVICES"; ls /dev | grep sro-; true'
    logs = run_to_completion(cluster, name, 2, script, busybox, resource=SHARED)
    # two replicas of one GPU: the GPU once, its node once
    assert f"VISIBLE={last['uuid']}" in logs, logs  # type: ignore[index]
    assert sorted(line for line in logs.splitlines() if line.startswith("sro-")) == [
        Path(last["deviceNode"]).name,  # type: ignore[index]
        "sro-simgpuctl",
    ], logs


def test_too_many_stays_pending_with_the_schedulers_reason(
    cluster: LocalCluster, plugin: int, busybox: str
) -> None:
    name = "sro-e2e-too-many"
    run_pod(cluster, name, plugin + 1, "true", busybox)
    try:

        def unschedulable() -> str:
            for c in get_pod(cluster, name)["status"].get("conditions", []):  # type: ignore[attr-defined]
                if c["type"] == "PodScheduled" and c["status"] == "False":
                    return str(c.get("reason", "")) + ": " + str(c.get("message", ""))
            return ""

        wait_for("the scheduler's verdict", unschedulable, timeout=60)
        verdict = unschedulable()
        assert verdict.startswith("Unschedulable") and f"Insufficient {RESOURCE}" in verdict, verdict
        assert get_pod(cluster, name)["status"]["phase"] == "Pending"  # type: ignore[index]
    finally:
        delete_pod(cluster, name)


def test_fault_drops_allocatable_and_clearing_restores_it(cluster: LocalCluster, plugin: int) -> None:
    subprocess.run(
        [*SRO, "simulate", "fault", "--device", "0", "--xid", "79"], check=True, capture_output=True
    )
    try:
        down = wait_for(
            "allocatable to drop by one", lambda: node_resource(cluster, "allocatable") == plugin - 1
        )
        assert node_resource(cluster, "capacity") == plugin
    finally:
        subprocess.run(
            [*SRO, "simulate", "fault", "--device", "0", "--clear"], check=True, capture_output=True
        )
    up = wait_for("allocatable to come back", lambda: node_resource(cluster, "allocatable") == plugin)
    print(
        f"\nFIGURE fault -> node allocatable {plugin - 1}: {down:.1f}s; clear -> {plugin}: {up:.1f}s (quiet period 2s)"
    )
    logs = plugin_logs(cluster)
    assert "unhealthy (simulated Xid 79)" in logs and "fault cleared" in logs


def test_kubelet_restart_leads_to_reregistration(cluster: LocalCluster, plugin: int) -> None:
    before = len(re.findall(r"registered with the kubelet", plugin_logs(cluster)))
    cluster.restart_kubelet(down_seconds=3)
    wait_for(
        "re-registration",
        lambda: len(re.findall(r"registered with the kubelet", plugin_logs(cluster))) > before,
        timeout=120,
    )
    latencies = [
        float(x)
        for x in re.findall(
            r"registered with the kubelet ([0-9.]+)s after its socket appeared", plugin_logs(cluster)
        )
    ]
    wait_for(
        f"{RESOURCE} allocatable again", lambda: node_resource(cluster, "allocatable") == plugin, timeout=120
    )
    print(
        f"\nFIGURE re-registration after kubelet restart: {latencies[-1]:.3f}s after kubelet.sock reappeared"
    )
    assert latencies[-1] < 30, latencies


def test_plugin_socket_vanishing_is_repaired(cluster: LocalCluster, plugin: int) -> None:
    sock = Path("/var/lib/kubelet/device-plugins") / "sro-sro.dev_simulated-gpu.sock"
    assert sock.is_socket()
    before = len(re.findall(r"registered with the kubelet", plugin_logs(cluster)))
    sock.unlink()
    wait_for(
        "the plugin to notice and register again",
        lambda: len(re.findall(r"registered with the kubelet", plugin_logs(cluster))) > before,
        timeout=60,
    )
    assert sock.is_socket()
    assert "its socket disappeared" in plugin_logs(cluster)
    wait_for(f"{RESOURCE} allocatable", lambda: node_resource(cluster, "allocatable") == plugin, timeout=60)
