"""The special resource operator on the real local cluster, installed with `sro install` from the
locally built image (two replicas, leader election), walking a `simulated-gpu` SpecialResource.

The tests run in file order and share one installation and one SpecialResource: it goes Ready
with its states reached in order; a workload gets exactly one device; a deleted state DaemonSet
comes back; a killed driver pod takes the later states' labels away and they come back in order;
a killed leader is replaced; a standby replica exits 0 on SIGTERM; a SpecialResource with a bad custom template is Degraded while the
good one stays Ready; and deleting the SpecialResource leaves nothing behind. Figures (time to
Ready, takeover time) are printed as FIGURE lines.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sro.api.names import (
    DEVICE_PLUGIN,
    DEVICE_PLUGIN_VALIDATION,
    DRIVER_VALIDATION,
    RUNTIME,
    RUNTIME_ROOT,
    STATE_NAMES,
    reached_annotation,
    state_label,
    validated_label,
)
from sro.api.recipes import SIMULATED_GPU
from sro.local.cluster import LocalCluster
from tests.e2e.helpers import condition, figure, get_json, sr_doc, sro, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

NS = "sro-system"
SR = "simulated-gpu"
BAD = "broken-templates"
CHAIN = STATE_NAMES  # the example turns every state on: the whole chain, in order
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "simulated-gpu.yaml"
DRIVER_ROOT = Path(SIMULATED_GPU.driver_root)


def node_labels(cluster: LocalCluster) -> dict[str, str]:
    return dict(get_json(cluster, "node", cluster.node_name)["metadata"].get("labels", {}))


def debug(cluster: LocalCluster) -> str:
    pods = cluster.kubectl("-n", NS, "get", "pods", "-o", "wide", check=False).stdout
    logs = cluster.kubectl(
        "-n", NS, "logs", "-l", "app.kubernetes.io/name=sro-operator", "--tail=30", check=False
    )
    return f"{pods}\n{json.dumps(sr_doc(cluster).get('status', {}), indent=1)}\noperator:\n{logs.stdout}"


def is_ready(cluster: LocalCluster, name: str = SR) -> bool:
    return condition(sr_doc(cluster, name), "Ready").get("status") == "True"


def converged(cluster: LocalCluster) -> bool:
    """Ready, with every state DaemonSet's pods ready.

    The status alone can be stale for a moment: a deleted DaemonSet is re-created in the same pass
    that takes its state away, and a reader may see the new DaemonSet before that pass's status.
    Once the new DaemonSets' pods are ready, a Ready status is the operator's answer to them.
    """
    daemonsets = get_json(cluster, "daemonsets", "-n", NS, "-l", f"sro.dev/specialresource={SR}")["items"]
    pods_ready = all(
        ds["status"].get("numberReady", 0) == ds["status"].get("desiredNumberScheduled", 0)
        and ds["status"].get("observedGeneration") == ds["metadata"]["generation"]
        for ds in daemonsets
    )
    return bool(daemonsets) and pods_ready and is_ready(cluster)


def leftovers(cluster: LocalCluster) -> list[str]:
    """Anything of the SpecialResource still on the cluster or the host."""
    found = []
    mine = [
        k for k in node_labels(cluster) if k in {state_label(SR, s) for s in CHAIN} | {validated_label(SR)}
    ]
    found += [f"label {k}" for k in mine]
    node = get_json(cluster, "node", cluster.node_name)
    found += [
        f"taint {t['key']}" for t in node["spec"].get("taints", []) if t["key"].startswith(f"sro.dev/{SR}.")
    ]
    found += (
        [f"annotation {reached_annotation(SR)}"]
        if reached_annotation(SR) in node["metadata"].get("annotations", {})
        else []
    )
    for kind in ("daemonsets", "pods", "configmaps"):
        items = get_json(cluster, kind, "-n", NS, "-l", f"sro.dev/specialresource={SR}")["items"]
        found += [f"{kind}/{i['metadata']['name']}" for i in items]
    runtime = Path(RUNTIME_ROOT)
    if runtime.exists():
        found += [f"runtime file {p}" for p in runtime.rglob("*") if p.is_file() and p.name != "sro-runtime"]
    found += [f"device node {p}" for p in Path("/dev").glob("sro-simgpu*")]
    return found


@pytest.fixture(scope="module")
def installed(cluster: LocalCluster, sro_image: str) -> Iterator[None]:
    """sro installed from the local image, on a node with no sro component of this recipe."""
    for name in (SR, BAD):
        cluster.kubectl("delete", "sr", name, "--ignore-not-found", "--timeout=120s", check=False)
    assert not list(Path("/dev").glob("sro-simgpu*")), "a simulated driver is installed on the node already"
    t0 = time.monotonic()
    out = sro(cluster, "install", "--image", sro_image, "--timeout", "240")
    assert out.returncode == 0, out.stdout + out.stderr
    figure(f"sro install: {time.monotonic() - t0:.1f} s")
    yield
    for name in (SR, BAD):
        cluster.kubectl("delete", "sr", name, "--ignore-not-found", "--timeout=120s", check=False)
    out = sro(cluster, "uninstall", "--timeout", "180")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.fixture(scope="module")
def ready(cluster: LocalCluster, installed: None) -> float:
    t0 = time.monotonic()
    cluster.kubectl("apply", "-f", str(EXAMPLE))
    took = wait_for("the SpecialResource Ready", lambda: is_ready(cluster), 300, why=lambda: debug(cluster))
    figure(f"kubectl apply -> SpecialResource Ready (node validated): {took:.1f} s")
    return time.monotonic() - t0


def reached(cluster: LocalCluster) -> dict[str, str]:
    ann = get_json(cluster, "node", cluster.node_name)["metadata"].get("annotations", {})
    return dict(kv.split("=", 1) for kv in ann.get(reached_annotation(SR), "").split(",") if "=" in kv)


def test_special_resource_goes_ready_with_states_in_order(cluster: LocalCluster, ready: float) -> None:
    doc = sr_doc(cluster)
    status = doc["status"]
    assert status["nodeCount"] == 1 and status["validatedCount"] == 1 and status["ready"] == "True"
    assert status["resource"] == SIMULATED_GPU.resource
    assert status["nodes"] == [
        {"name": cluster.node_name, "state": "validated", "since": status["nodes"][0]["since"]}
    ]
    assert condition(doc, "Degraded")["status"] == "False"
    assert status["states"]["monitoring"] == "enabled"
    assert cluster.kubectl("-n", NS, "get", "service", f"sro-{SR}-monitoring", check=False).returncode == 0
    labels = node_labels(cluster)
    for s in CHAIN:
        assert labels.get(state_label(SR, s)) == "ready", s
    assert labels[validated_label(SR)] == "true"
    # startupTaint: true in the example, and the node is validated: no taint left
    taints = get_json(cluster, "node", cluster.node_name)["spec"].get("taints", [])
    assert not [t for t in taints if t["key"] == f"sro.dev/{SR}.not-ready"]
    times = reached(cluster)
    order = [times["selected"], *(times[s] for s in CHAIN), times["validated"]]
    assert order == sorted(order), times
    # sro status shows the table and exits 0
    out = sro(cluster, "status")
    assert out.returncode == 0, out.stdout + out.stderr
    assert cluster.node_name in out.stdout and "validated since" in out.stdout
    # the leader's metrics say the same (pod IPs are reachable from the node)
    leader = get_json(cluster, "lease", "sro-operator", "-n", NS)["spec"]["holderIdentity"]
    ip = get_json(cluster, "pod", leader, "-n", NS)["status"]["podIP"]
    with urllib.request.urlopen(f"http://{ip}:8080/metrics", timeout=10) as resp:
        text = resp.read().decode()
    assert f'sro_operator_nodes{{specialresource="{SR}",state="validated"}} 1.0' in text, text[-2000:]
    assert f'sro_operator_node_validation_seconds_count{{specialresource="{SR}"}} 1.0' in text
    assert f'sro_operator_reconciliations_total{{specialresource="{SR}"}}' in text
    assert "sro_operator_leader 1.0" in text


def test_a_workload_sees_exactly_its_device(cluster: LocalCluster, ready: float, sro_image: str) -> None:
    name = "sro-e2e-operator-workload"
    script = 'echo "VISIBLE=$SRO_VISIBLE_DEVICES"; ls /dev | grep sro-simgpu; simgpu-smi -L'
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "runtimeClassName": "sro",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "c",
                    "image": "localhost/busybox:sro",
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", script],
                    "resources": {"limits": {SIMULATED_GPU.resource: "1"}},
                }
            ],
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    try:
        wait_for(
            "the workload to finish",
            lambda: (
                get_json(cluster, "pod", name, "-n", "default")["status"].get("phase")
                in ("Succeeded", "Failed")
            ),
            120,
        )
        logs = cluster.kubectl("logs", name, "-n", "default").stdout
        assert get_json(cluster, "pod", name, "-n", "default")["status"]["phase"] == "Succeeded", logs
    finally:
        cluster.kubectl(
            "delete", "pod", name, "-n", "default", "--ignore-not-found", "--grace-period=1", check=False
        )
    visible = re.search(r"^VISIBLE=(\S+)$", logs, re.M)
    assert visible and "," not in visible.group(1), logs
    nodes = re.findall(r"^(sro-simgpu\d+)$", logs, re.M)
    assert len(nodes) == 1, logs  # exactly one device node (besides sro-simgpuctl)
    # the recipe's tool ran in the container and lists exactly the granted device: the one whose
    # node the container has (it reads SRO_VISIBLE_DEVICES; without it, it would list all eight)
    gpus = re.findall(r"^GPU (\d+): .+ \(UUID: (\S+)\) \[simulated\]$", logs, re.M)
    assert len(gpus) == 1, logs
    assert nodes[0] == f"sro-simgpu{gpus[0][0]}" and visible.group(1) in gpus[0], (gpus, logs)


def delete_and_wait_for_return(cluster: LocalCluster, ds: str) -> float:
    """Delete a state's DaemonSet; seconds until the operator has made a new one (a new uid)."""
    uid = get_json(cluster, "daemonset", ds, "-n", NS)["metadata"]["uid"]
    cluster.kubectl("-n", NS, "delete", "daemonset", ds, "--wait=false")

    def back() -> bool:
        out = cluster.kubectl("-n", NS, "get", "daemonset", ds, "-o", "jsonpath={.metadata.uid}", check=False)
        return out.returncode == 0 and out.stdout not in ("", uid)

    return wait_for(f"DaemonSet {ds} to come back", back, 90, why=lambda: debug(cluster))


def test_a_deleted_state_daemonset_comes_back(cluster: LocalCluster, ready: float) -> None:
    took = delete_and_wait_for_return(cluster, f"sro-{SR}-device-plugin")
    figure(f"deleted state DaemonSet re-created after {took:.1f} s")
    wait_for("Ready again", lambda: converged(cluster), 180, why=lambda: debug(cluster))


def test_killed_driver_pod_takes_later_states_away_and_they_return_in_order(
    cluster: LocalCluster, ready: float
) -> None:
    wait_for("Ready", lambda: converged(cluster), 180, why=lambda: debug(cluster))
    driver = get_json(cluster, "pods", "-n", NS, "-l", f"sro.dev/specialresource={SR},sro.dev/state=driver")[
        "items"
    ]
    assert len(driver) == 1
    killed_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cluster.kubectl("-n", NS, "delete", "pod", driver[0]["metadata"]["name"], "--wait=false")
    seen_gone: set[str] = set()

    def watch_labels() -> bool:
        labels = node_labels(cluster)
        seen_gone.update(s for s in CHAIN if state_label(SR, s) not in labels)
        return validated_label(SR) not in labels

    wait_for("the node to lose its validated label", watch_labels, 60, every=0.2)

    def validated_again() -> bool:
        watch_labels()
        return node_labels(cluster).get(validated_label(SR)) == "true"

    took = wait_for("the node validated again", validated_again, 240, every=0.2, why=lambda: debug(cluster))
    figure(f"driver pod killed -> node validated again after {took:.1f} s")
    assert {DRIVER_VALIDATION, RUNTIME, DEVICE_PLUGIN, DEVICE_PLUGIN_VALIDATION} <= seen_gone, seen_gone
    times = reached(cluster)
    later = [times[s] for s in CHAIN[1:]]
    assert later == sorted(later) and later[0] >= killed_at, (killed_at, times)


def test_leader_killed_the_other_replica_takes_over(cluster: LocalCluster, ready: float) -> None:
    lease = get_json(cluster, "lease", "sro-operator", "-n", NS)
    leader = lease["spec"]["holderIdentity"]
    pods = get_json(cluster, "pods", "-n", NS, "-l", "app.kubernetes.io/name=sro-operator")["items"]
    assert leader in {p["metadata"]["name"] for p in pods} and len(pods) == 2, (leader, pods)
    t0 = time.monotonic()
    cluster.kubectl("-n", NS, "delete", "pod", leader, "--wait=false")

    def new_leader() -> bool:
        holder = get_json(cluster, "lease", "sro-operator", "-n", NS)["spec"].get("holderIdentity")
        return bool(holder) and holder != leader

    took = wait_for("another replica to hold the lease", new_leader, 60)
    figure(f"leader deleted -> other replica leads after {took:.1f} s")
    # the new leader acts: a deleted DaemonSet comes back, and the SpecialResource converges
    delete_and_wait_for_return(cluster, f"sro-{SR}-device-plugin")
    wait_for("Ready under the new leader", lambda: converged(cluster), 240, why=lambda: debug(cluster))
    figure(f"leader deleted -> converged again after {time.monotonic() - t0:.1f} s")


def watch_until_deleted(
    cluster: LocalCluster, pod: str, act: Callable[[], object], timeout: float
) -> dict[str, Any]:
    """`act()` with a watch of `pod` open; the pod as its DELETED event showed it (its last status)."""
    argv = [
        str(cluster.kubectl_path()),
        "-n",
        NS,
        "get",
        "pod",
        pod,
        "-w",
        "--output-watch-events",
        "-o",
        "json",
    ]
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    events: queue.Queue[dict[str, Any]] = queue.Queue()

    def read() -> None:
        buffer, decoder = "", json.JSONDecoder()
        for line in proc.stdout or []:
            buffer += line
            while buffer.strip():
                try:
                    event, end = decoder.raw_decode(buffer.lstrip())
                except ValueError:
                    break  # an object not yet complete
                events.put(event)
                buffer = buffer.lstrip()[end:]

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        events.get(timeout=30)  # the watch's first event: it is open
        act()
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            event = events.get(timeout=left)
            if event.get("type") == "DELETED":
                return dict(event["object"])
        raise AssertionError(f"pod {pod} not deleted within {timeout:g} s")
    finally:
        proc.kill()
        proc.wait()
        reader.join(10)  # it ends at the pipe's end
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_standby_replica_stops_on_sigterm(cluster: LocalCluster, ready: float) -> None:
    """The standby waits for the Lease as its container's PID 1: without a handler of its own the
    kernel ignores SIGTERM there, and the replica was SIGKILLed (137) at the end of its 30 s grace
    period in every uninstall and rollout. It now exits 0 on SIGTERM."""
    leader = get_json(cluster, "lease", "sro-operator", "-n", NS)["spec"]["holderIdentity"]

    def standbys() -> list[str]:
        """The live replicas but the leader (a replica an earlier test killed may still be Terminating)."""
        pods = get_json(cluster, "pods", "-n", NS, "-l", "app.kubernetes.io/name=sro-operator")["items"]
        live = [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")]
        return [name for name in live if name != leader]

    wait_for(
        "one standby replica beside the leader", lambda: len(standbys()) == 1, 90, why=lambda: str(standbys())
    )
    standby = standbys()
    gone = watch_until_deleted(
        cluster,
        standby[0],
        lambda: cluster.kubectl("-n", NS, "delete", "pod", standby[0], "--wait=false"),
        90,
    )
    ends = [cs["state"].get("terminated") or {} for cs in gone["status"].get("containerStatuses", [])]
    assert ends and all(e.get("exitCode") == 0 for e in ends), ends
    assert get_json(cluster, "lease", "sro-operator", "-n", NS)["spec"]["holderIdentity"] == leader
    wait_for(
        "two operator replicas running again",
        lambda: (
            sum(
                p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
                for p in get_json(cluster, "pods", "-n", NS, "-l", "app.kubernetes.io/name=sro-operator")[
                    "items"
                ]
            )
            == 2
        ),
        120,
    )


def test_bad_custom_template_is_degraded_while_the_good_one_stays_ready(
    cluster: LocalCluster, ready: float
) -> None:
    wait_for("the good one Ready", lambda: converged(cluster), 180, why=lambda: debug(cluster))
    recipe = (
        "name: broken-templates\nresource: example.com/broken\nbackend: simulated\npciVendor: '1d0f'\n"
        "visibleDevicesEnv: BROKEN_VISIBLE_DEVICES\ndeviceNode: /dev/broken{index}\n"
    )
    cms = {
        "broken-recipe": {"recipe.yaml": recipe},
        "broken-manifests": {
            "device-plugin.0600_extra.yaml": "kind: ConfigMap\nmetadata: {name: {{ no_such_value }}}\n"
        },
    }
    for name, data in cms.items():
        cm = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS},
            "data": data,
        }
        cluster.kubectl("apply", "-f", "-", input=json.dumps(cm))
    bad = {
        "apiVersion": "sro.dev/v1alpha1",
        "kind": "SpecialResource",
        "metadata": {"name": BAD},
        "spec": {
            "recipe": "broken-templates",
            "recipeConfigMap": "broken-recipe",
            "customManifests": "broken-manifests",
            # a custom simulated recipe needs its devices (Degraded SpecInvalid without), so the
            # refusal under test is the template's
            "driver": {"devicesConfig": "count: 1\n"},
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(bad))
    try:
        wait_for(
            "the bad one Degraded",
            lambda: condition(sr_doc(cluster, BAD), "Degraded").get("status") == "True",
            60,
        )
        degraded = condition(sr_doc(cluster, BAD), "Degraded")
        assert degraded["reason"] == "RenderFailed" and "no_such_value" in degraded["message"], degraded
        assert "device-plugin/0600_extra.yaml (custom)" in degraded["message"]
        assert not get_json(cluster, "daemonsets", "-n", NS, "-l", f"sro.dev/specialresource={BAD}")["items"]
        assert converged(cluster), debug(cluster)
    finally:
        cluster.kubectl("delete", "sr", BAD, "--timeout=60s", check=False)
        for name in cms:
            cluster.kubectl("-n", NS, "delete", "configmap", name, "--ignore-not-found", check=False)


def test_deleting_the_special_resource_leaves_nothing(cluster: LocalCluster, ready: float) -> None:
    t0 = time.monotonic()
    cluster.kubectl("delete", "sr", SR, "--timeout=120s")
    figure(f"SpecialResource deleted (finalizer done) in {time.monotonic() - t0:.1f} s")
    wait_for("nothing left", lambda: not leftovers(cluster), 60, why=lambda: "\n".join(leftovers(cluster)))
    assert not (DRIVER_ROOT / "devices.json").exists()
