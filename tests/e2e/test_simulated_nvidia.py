"""The nvidia-gpu recipe end to end on sro's simulated NVIDIA driver, through the deployed operator.

From a node with nothing of sro for NVIDIA: the node opts in (`sro.dev/nvidia-gpu.simulated=true`),
examples/simulated-nvidia.yaml is applied and the operator walks every state on the real NVIDIA path
— the simulated driver making /dev/nvidia* and putting libnvidia-ml.so.1 and nvidia-smi under
/run/nvidia/driver, the validations on the `nvml` backend (CUDA skipped, the status row saying why),
the runtime hook, NVML's device plugin, the exporter, GPU feature discovery. Then, in file order on
one installation: a pod asking for one `nvidia.com/gpu` (glibc image, the `sro` runtime class) sees
exactly one /dev/nvidiaN and nvidia-smi lists exactly that GPU; Xid 79 on it (`sro simulate fault`
on the host) takes it out of the node's allocatable while it is lost, clearing brings it back; the
exporter's series for it carry NVML's readings (as nvidia-smi prints them) and the simulated label;
GFD's labels come from NVML; the holder scan finds a pod holding /dev/nvidia0 and the driver upgrade
waits for it, after which a new pod's nvidia-smi shows the new version; deleting everything leaves
the node as it was found (no /dev/nvidia*, nothing under /run/nvidia/driver, no label).
Latencies are printed as FIGURE lines, never asserted tightly.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sro.api.builtin_recipes import SIMULATED_NVIDIA_DRIVER_ROOT
from sro.api.names import (
    SIMULATED_LABEL,
    simulated_driver_opt_in_label,
    upgrade_annotation,
    validated_label,
)
from sro.api.recipes import NVIDIA_GPU
from sro.local.cluster import LocalCluster
from sro.local.layout import GLIBC_IMAGE, RUNTIME_HANDLER
from sro.operator.upgrade.record import Record
from tests.e2e.helpers import condition, figure, get_json, sr_doc, sro, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(1200)]

NS = "sro-system"
APPS = "sro-e2e-simnvidia"
SR = "simulated-nvidia"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "simulated-nvidia.yaml"
OPT_IN = simulated_driver_opt_in_label(NVIDIA_GPU.name)
ROOT = Path(SIMULATED_NVIDIA_DRIVER_ROOT)
RES = NVIDIA_GPU.resource
GPUS = 4  # the example's devicesConfig
LOAD_MIB = 20000  # framebuffer `sro simulate load` puts on the pod's GPU (half a MIG device's)
OLD, NEW = "550.90.07", "555.42.02"
WORKLOAD = "gpu-user"
NO_CUDA = "no CUDA on a simulated driver"
SRO_CLI = [sys.executable, "-m", "sro"]
SAMPLE = re.compile(r"^(\w+)\{(.*)\} (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def host_leftovers() -> list[str]:
    """What of the simulated NVIDIA driver is on the host: its device nodes and its driver files."""
    found = [f"device node {p}" for p in sorted(Path("/dev").glob("nvidia*"))]
    if ROOT.exists():
        found += [f"driver file {p}" for p in sorted(ROOT.rglob("*"))]
    return found


def node(cluster: LocalCluster) -> dict[str, Any]:
    return dict(get_json(cluster, "node", cluster.node_name))


def labels(cluster: LocalCluster) -> dict[str, str]:
    return dict(node(cluster)["metadata"].get("labels", {}))


def allocatable(cluster: LocalCluster) -> int:
    return int(node(cluster)["status"].get("allocatable", {}).get(RES, "0"))


def debug(cluster: LocalCluster) -> str:
    pods = cluster.kubectl("get", "pods,daemonsets", "-A", "-o", "wide", check=False).stdout
    logs = cluster.kubectl(
        "-n", NS, "logs", "-l", "app.kubernetes.io/name=sro-operator", "--tail=300", "--prefix", check=False
    ).stdout
    said = [ln for ln in logs.splitlines() if "/healthz" not in ln][-40:]  # the probes say nothing
    status = json.dumps(sr_doc(cluster, SR).get("status", {}), indent=1)
    return f"{pods}\nstatus: {status}\noperator:\n" + "\n".join(said)


def state_pods(cluster: LocalCluster, state: str) -> list[dict[str, Any]]:
    selector = f"sro.dev/specialresource={SR},sro.dev/state={state}"
    return list(get_json(cluster, "pods", "-n", NS, "-l", selector)["items"])


def pod_log(cluster: LocalCluster, name: str, namespace: str = NS) -> str:
    out = cluster.kubectl("logs", name, "-n", namespace, check=False)
    return out.stdout + out.stderr


def phase(cluster: LocalCluster, name: str, namespace: str = APPS) -> str:
    out = cluster.kubectl("get", "pod", name, "-n", namespace, "-o", "jsonpath={.status.phase}", check=False)
    return out.stdout


def host_devices() -> dict[str, Any]:
    """The simulated driver's own device list (devices.json): uuid -> its record."""
    doc = json.loads((ROOT / "devices.json").read_text())
    return {d["uuid"]: d for d in doc["devices"]}


def host_version() -> str:
    try:
        return str(json.loads((ROOT / "devices.json").read_text()).get("driverVersion", ""))
    except (OSError, ValueError):
        return ""


def gpu_pod(name: str, command: str, restart: str = "Always") -> dict[str, Any]:
    """A glibc pod of the `sro` runtime class (the hook injects the driver's nvidia-smi and NVML)
    asking for one nvidia.com/gpu."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": APPS, "labels": {"app.kubernetes.io/managed-by": "sro-e2e"}},
        "spec": {
            "restartPolicy": restart,
            "runtimeClassName": RUNTIME_HANDLER,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "work",
                    "image": GLIBC_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", command],
                    "resources": {"limits": {RES: "1"}},
                }
            ],
        },
    }


def holder_pod(image: str) -> dict[str, Any]:
    """A pod that requests no GPU (no eviction takes it) but holds /dev/nvidia0 open (O_PATH, which
    needs no device permission), as a monitoring agent with the host's device might."""
    code = (
        "import os, time; fd = os.open('/dev/nvidia0', os.O_PATH); "
        "st = os.fstat(fd); print('held', os.major(st.st_rdev), os.minor(st.st_rdev), flush=True); "
        "time.sleep(3600)"
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "holder", "namespace": APPS},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "hold",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", code],
                    "volumeMounts": [{"name": "gpu", "mountPath": "/dev/nvidia0"}],
                }
            ],
            "volumes": [{"name": "gpu", "hostPath": {"path": "/dev/nvidia0", "type": "CharDevice"}}],
        },
    }


def apply(cluster: LocalCluster, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))


def exec_in(cluster: LocalCluster, pod: str, command: str) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("exec", "-n", APPS, pod, "--", "sh", "-c", command, check=False)


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m and m.group(1) == name:
            out.append((dict(LABEL.findall(m.group(2))), float(m.group(3))))
    return out


def record(cluster: LocalCluster) -> Record | None:
    return Record.from_json(node(cluster)["metadata"].get("annotations", {}).get(upgrade_annotation(SR), ""))


def ours(found: dict[str, str], now: dict[str, str]) -> list[str]:
    """Labels of sro or GFD on the node now that it did not have when the module started."""
    return sorted(k for k in now if k.startswith(("sro.dev/", "nvidia.com/")) and k not in found)


@pytest.fixture(scope="module")
def installed(cluster: LocalCluster, sro_image: str) -> Iterator[dict[str, str]]:
    """sro installed from the local image on a node with nothing of sro for NVIDIA; yields the node's
    labels as found. At the end the node is left as it was found."""
    assert not host_leftovers(), f"the node has NVIDIA device nodes or driver files: {host_leftovers()}"
    found = labels(cluster)
    assert not [k for k in found if k.startswith("nvidia.com/")] and OPT_IN not in found, found
    root_existed = ROOT.exists()
    cluster.kubectl("delete", "sr", SR, "--ignore-not-found", "--timeout=120s", check=False)
    out = sro(cluster, "install", "--image", sro_image, "--timeout", "240")
    assert out.returncode == 0, out.stdout + out.stderr
    cluster.kubectl("create", "namespace", APPS, check=False)
    try:
        yield found
    finally:
        subprocess.run(
            [*SRO_CLI, "simulate", "fault", "--all", "--clear", "--driver-root", str(ROOT)],
            check=False,
            capture_output=True,
        )
        cluster.kubectl("delete", "namespace", APPS, "--ignore-not-found", "--timeout=120s", check=False)
        cluster.kubectl("delete", "sr", SR, "--ignore-not-found", "--timeout=180s", check=False)
        cluster.kubectl("label", "node", cluster.node_name, f"{OPT_IN}-", check=False)
        out = sro(cluster, "uninstall", "--timeout", "180")
        wait_for(
            "the simulated NVIDIA driver gone from the host",
            lambda: not host_leftovers(),
            90,
            why=lambda: "\n".join(host_leftovers()),
        )
        # the driver root the driver's pod was given (the kubelet made it): empty; gone, as found
        # (/run/nvidia above it is sro-discovery's hostPath on every node, made by `sro install`)
        if not root_existed and ROOT.exists():
            ROOT.rmdir()
        assert out.returncode == 0, out.stdout + out.stderr


@pytest.fixture(scope="module")
def ready(cluster: LocalCluster, installed: dict[str, str]) -> None:
    cluster.kubectl("label", "node", cluster.node_name, f"{OPT_IN}=true", "--overwrite")
    cluster.kubectl("apply", "-f", str(EXAMPLE))
    took = wait_for(
        "the SpecialResource Ready",
        lambda: condition(sr_doc(cluster, SR), "Ready").get("status") == "True",
        420,
        why=lambda: debug(cluster),
    )
    figure(f"simulated NVIDIA: label + kubectl apply -> SpecialResource Ready (node validated): {took:.1f} s")


@pytest.fixture(scope="module")
def workload(cluster: LocalCluster, ready: None) -> dict[str, str]:
    """A sleeping pod holding one GPU; what it saw: the env, its /dev, `nvidia-smi -L`."""
    apply(cluster, gpu_pod(WORKLOAD, "sleep 3600"))
    wait_for(
        "the GPU pod Running", lambda: phase(cluster, WORKLOAD) == "Running", 120, why=lambda: debug(cluster)
    )
    out = exec_in(cluster, WORKLOAD, 'echo "VISIBLE=$NVIDIA_VISIBLE_DEVICES"; ls /dev; nvidia-smi -L')
    return {"output": out.stdout + out.stderr, "rc": str(out.returncode)}


def granted(workload: dict[str, str]) -> str:
    m = re.search(r"^VISIBLE=(\S+)$", workload["output"], re.M)
    assert m, workload["output"]
    return m.group(1)


def test_ready_with_every_state_validated_on_nvml(cluster: LocalCluster, ready: None) -> None:
    doc = sr_doc(cluster, SR)
    status = doc["status"]
    assert status["resource"] == RES and status["validatedCount"] == 1, status
    (row,) = status["nodes"]
    assert row["name"] == cluster.node_name and row["state"] == "validated", row
    assert NO_CUDA in row.get("note", "") and "cuda" in row.get("note", ""), row  # skipped, saying why
    assert condition(doc, "Degraded").get("status") == "False"
    assert labels(cluster).get(validated_label(SR)) == "true"
    # the validations ran on the nvml backend: NVML through the driver root's libnvidia-ml.so.1
    (driver_check,) = state_pods(cluster, "driver-validation")
    log = pod_log(cluster, driver_check["metadata"]["name"])
    assert f"PASS inventory: nvml backend: {GPUS} devices" in log, log
    (workload_check,) = state_pods(cluster, "device-plugin-validation")
    log = pod_log(cluster, workload_check["metadata"]["name"])
    assert "PASS nvml: libnvidia-ml.so.1 loads and lists the granted GPU" in log, log
    assert f"SKIP cuda sample: {NO_CUDA}" in log, log
    # every object the operator made for it says simulated
    for ds in get_json(cluster, "daemonsets", "-n", NS, "-l", f"sro.dev/specialresource={SR}")["items"]:
        assert ds["metadata"]["labels"].get(SIMULATED_LABEL) == "true", ds["metadata"]["name"]
    # the host: NVIDIA's device nodes, the driver root laid out like a driver container's
    for i in range(GPUS):
        st = Path(f"/dev/nvidia{i}").stat()
        assert (st.st_rdev >> 8) & 0xFFF == 195, f"/dev/nvidia{i}"
    assert (ROOT / "usr/bin/nvidia-smi").exists() and (ROOT / "run/sro-simnvml/state").exists()
    assert "SIMULATED" in (ROOT / "proc/driver/nvidia/version").read_text()
    assert allocatable(cluster) == GPUS
    out = sro(cluster, "status", SR, "--no-logs")
    words = re.sub(r"[\s│]+", " ", out.stdout)  # the detail cell may wrap over lines
    assert out.returncode == 0 and "validated since" in words and f"cuda sample: {NO_CUDA}" in words, (
        out.stdout + out.stderr
    )


def test_a_pod_sees_exactly_its_gpu(cluster: LocalCluster, workload: dict[str, str]) -> None:
    output = workload["output"]
    assert workload["rc"] == "0", output
    uuid = granted(workload)
    assert "," not in uuid and uuid.startswith("GPU-"), output
    nodes = re.findall(r"^nvidia(\d+)$", output, re.M)
    assert len(nodes) == 1, output  # exactly one GPU node (besides nvidiactl, nvidia-uvm...)
    assert int(nodes[0]) == host_devices()[uuid]["minor"], (nodes, host_devices()[uuid])
    gpus = re.findall(r"^GPU (\d+): (.+) \(UUID: (\S+)\)$", output, re.M)
    assert len(gpus) == 1, output  # NVML in the container lists only the GPU whose node it has
    assert gpus[0][2] == uuid and gpus[0][0] == "0" and gpus[0][1].endswith("(simulated)"), gpus


def test_xid_79_takes_the_gpu_out_until_cleared(cluster: LocalCluster, workload: dict[str, str]) -> None:
    uuid = granted(workload)
    wait_for(
        f"allocatable {RES} = {GPUS}", lambda: allocatable(cluster) == GPUS, 60, why=lambda: debug(cluster)
    )
    t0 = time.monotonic()
    fault = [*SRO_CLI, "simulate", "fault", "--device", uuid, "--driver-root", str(ROOT)]
    subprocess.run([*fault, "--xid", "79"], check=True, capture_output=True)
    try:
        took = wait_for(
            f"allocatable {RES} = {GPUS - 1}",
            lambda: allocatable(cluster) == GPUS - 1,
            90,
            every=0.2,
            why=lambda: debug(cluster),
        )
        figure(f"simulated NVIDIA: Xid 79 injected -> allocatable {GPUS - 1}: {took:.1f} s")
        # a GPU that fell off the bus stays out while it is lost, past the plugin's quiet period
        # (recoverAfterSeconds: 10 in the example): NVML has no "cleared" event
        time.sleep(15)
        assert allocatable(cluster) == GPUS - 1, "a lost GPU came back while NVML still calls it lost"
        smi = exec_in(
            cluster, WORKLOAD, f"nvidia-smi --query-gpu=memory.total --format=csv,noheader -i {uuid}"
        )
        assert "GPU is lost" in smi.stdout + smi.stderr or smi.returncode != 0, smi
    finally:
        t1 = time.monotonic()
        subprocess.run([*fault, "--clear"], check=True, capture_output=True)
    took = wait_for(
        f"allocatable {RES} = {GPUS} again",
        lambda: allocatable(cluster) == GPUS,
        120,
        every=0.2,
        why=lambda: debug(cluster),
    )
    figure(f"simulated NVIDIA: fault cleared -> allocatable {GPUS} again: {took:.1f} s (quiet period 10 s)")
    figure(
        f"simulated NVIDIA: whole fault cycle: {time.monotonic() - t0:.1f} s ({time.monotonic() - t1:.1f} s after clearing)"
    )


def exporter_url(cluster: LocalCluster) -> str:
    for p in state_pods(cluster, "monitoring"):
        conds = {c["type"]: c["status"] for c in p["status"].get("conditions", [])}
        if conds.get("Ready") == "True" and p["status"].get("podIP"):
            return f"http://{p['status']['podIP']}:9400/metrics"
    return ""


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


def test_the_exporter_carries_nvmls_readings(cluster: LocalCluster, workload: dict[str, str]) -> None:
    uuid = granted(workload)
    wait_for("the exporter pod Ready", lambda: exporter_url(cluster), 120, why=lambda: debug(cluster))
    url = exporter_url(cluster)

    def mine(text: str, name: str) -> list[tuple[dict[str, str], float]]:
        """The whole GPU's series (a MIG device's carry its GPU's UUID too, and GPU_I_ID)."""
        return [s for s in samples(text, name) if s[0].get("UUID") == uuid and "GPU_I_ID" not in s[0]]

    def answering() -> bool:  # the GPU answers NVML again after the fault: its readings are back
        try:
            text = scrape(url)
        except OSError:
            return False
        return bool(mine(text, "DCGM_FI_DEV_FB_USED") and mine(text, "DCGM_FI_DEV_GPU_TEMP"))

    wait_for("the GPU's readings in the exporter's series", answering, 90, why=lambda: debug(cluster))
    # a load on it (`sro simulate load` on the host), so the readings compared are not idle zeros;
    # a MIG GPU's framebuffer is its MIG devices' (the model's rule, as NVML's): load one of those
    migs = host_devices()[uuid].get("mig") or []
    target, memory = (migs[0]["uuid"], migs[0]["memoryMiB"] // 2) if migs else (uuid, LOAD_MIB)
    load = [*SRO_CLI, "simulate", "load", "--driver-root", str(ROOT)]
    subprocess.run([*load, "--device", uuid, "--util", "60"], check=True, capture_output=True)
    subprocess.run([*load, "--device", target, "--memory", str(memory)], check=True, capture_output=True)
    try:

        def loaded() -> bool:
            found = mine(scrape(url), "DCGM_FI_DEV_FB_USED")
            return bool(found) and found[0][1] >= 0.95 * memory

        took = wait_for("the load in the exporter's readings", loaded, 120, why=lambda: debug(cluster))
        figure(f"simulated NVIDIA exporter: sro simulate load -> in the scraped readings: {took:.1f} s")
        text = scrape(url)
        smi = exec_in(
            cluster,
            WORKLOAD,
            "nvidia-smi --query-gpu=uuid,memory.total,memory.used,temperature.gpu --format=csv,noheader,nounits",
        )
    finally:
        subprocess.run([*load, "--all", "--clear"], check=False, capture_output=True)
    assert smi.returncode == 0, smi.stdout + smi.stderr
    got_uuid, total, used, temp = (v.strip() for v in smi.stdout.strip().split(","))
    assert got_uuid == uuid, smi.stdout
    (fb_used,) = mine(text, "DCGM_FI_DEV_FB_USED")
    (fb_free,) = mine(text, "DCGM_FI_DEV_FB_FREE")
    (fb_reserved,) = mine(text, "DCGM_FI_DEV_FB_RESERVED")
    (gpu_temp,) = mine(text, "DCGM_FI_DEV_GPU_TEMP")
    # the framebuffer NVML reports (dcgm-exporter has no total: used + free + reserved is it)
    assert abs(fb_used[1] + fb_free[1] + fb_reserved[1] - int(total)) <= 1, (
        fb_used,
        fb_free,
        fb_reserved,
        total,
    )
    # the model's noise between the exporter's reading and nvidia-smi's: memory ±0.5 % of the
    # framebuffer each; temperature 30 + util/2 with util ±3 points and ±1 °C each, rounded
    assert abs(fb_used[1] - int(used)) <= 0.01 * int(total) + 1, (fb_used, used)
    assert abs(gpu_temp[1] - int(temp)) <= 6 and int(temp) >= 55, (gpu_temp, temp)
    for series_labels, _ in (fb_used, gpu_temp):
        assert series_labels["simulated"] == "true", series_labels
        assert (
            series_labels["modelName"].endswith("(simulated)")
            and series_labels["Hostname"] == cluster.node_name
        )
        assert series_labels.get("pod") == WORKLOAD and series_labels.get("namespace") == APPS, series_labels
    figure(
        f"simulated NVIDIA exporter: {len(text)} bytes; GPU {uuid[:12]}: FB used {fb_used[1]:.0f} MiB, temp {gpu_temp[1]:.0f} C"
    )


def test_gfd_labels_come_from_nvml(cluster: LocalCluster, ready: None) -> None:
    def published() -> bool:
        return labels(cluster).get("nvidia.com/gpu.count") == str(GPUS)

    wait_for("GFD's labels", published, 120, why=lambda: json.dumps(labels(cluster), indent=1))
    found = labels(cluster)
    # a label value cannot hold "(simulated)": GFD's sanitising makes it "-simulated"
    assert found["nvidia.com/gpu.product"].startswith("NVIDIA-A100-SXM4-40GB"), found
    assert "simulated" in found["nvidia.com/gpu.product"], found
    assert found["nvidia.com/gpu.memory"] == "40960" and found["nvidia.com/gpu.family"] == "ampere", found
    assert found["nvidia.com/cuda.driver-version.full"] == OLD, found
    assert found.get(SIMULATED_LABEL) == "true", found


def test_the_upgrade_waits_for_a_pod_holding_a_gpu(
    cluster: LocalCluster, workload: dict[str, str], sro_image: str
) -> None:
    # a bare GPU pod would keep the drain waiting (no controller recreates it): it goes first
    cluster.kubectl("delete", "pod", WORKLOAD, "-n", APPS, "--grace-period=1", "--timeout=120s", check=False)
    holder = holder_pod(sro_image)
    apply(cluster, holder)
    wait_for(
        "the holder pod holding /dev/nvidia0",
        lambda: "held 195 0" in pod_log(cluster, "holder", APPS),
        90,
        why=lambda: debug(cluster) + pod_log(cluster, "holder", APPS),
    )
    uid = get_json(cluster, "pod", "holder", "-n", APPS)["metadata"]["uid"]
    assert host_version() == OLD
    t0 = time.monotonic()
    cluster.kubectl(
        "patch", "sr", SR, "--type=merge", "-p", json.dumps({"spec": {"driver": {"version": NEW}}})
    )

    def blocked() -> bool:
        rec = record(cluster)
        return rec is not None and rec.state == "pods-evicted" and f"in pod {uid}" in rec.reason

    took = wait_for(
        "the upgrade blocked by the holder pod",
        blocked,
        240,
        why=lambda: f"{record(cluster)}\n{debug(cluster)}",
    )
    figure(f"simulated NVIDIA upgrade: spec changed -> holder found: {took:.1f} s")
    rec = record(cluster)
    assert rec is not None and "nvidia0" in rec.reason, rec
    out = sro(cluster, "upgrade", "status", "--sr", SR)
    assert uid in out.stdout or "python" in out.stdout, out.stdout + out.stderr
    assert host_version() == OLD  # not replaced under the holder
    # the process goes at once; the pod object only after the kubelet's next sandbox GC (1.20: up
    # to a minute), which the upgrade has no reason to wait for
    cluster.kubectl("delete", "pod", "holder", "-n", APPS, "--grace-period=1", "--wait=false")

    def done() -> bool:
        rec = record(cluster)
        return rec is not None and rec.state == "done"

    wait_for("the upgrade done", done, 420, why=lambda: f"{record(cluster)}\n{debug(cluster)}")
    figure(
        f"simulated NVIDIA upgrade {OLD} -> {NEW}, one node, holder removed mid-way: {time.monotonic() - t0:.1f} s"
    )
    assert host_version() == NEW
    assert not node(cluster)["spec"].get("unschedulable")
    apply(
        cluster,
        gpu_pod(
            "after-upgrade",
            "nvidia-smi --query-gpu=driver_version --format=csv,noheader; nvidia-smi",
            "Never",
        ),
    )
    wait_for(
        "the new pod done",
        lambda: phase(cluster, "after-upgrade") in ("Succeeded", "Failed"),
        180,
        why=lambda: debug(cluster),
    )
    log = pod_log(cluster, "after-upgrade", APPS)
    assert phase(cluster, "after-upgrade") == "Succeeded", log
    assert log.splitlines()[0].strip() == NEW and f"Driver Version: {NEW}" in log and "SIMULATED" in log, log


def test_deleting_leaves_the_node_as_found(
    cluster: LocalCluster, installed: dict[str, str], ready: None
) -> None:
    t0 = time.monotonic()
    cluster.kubectl("delete", "namespace", APPS, "--ignore-not-found", "--timeout=120s", check=False)
    cluster.kubectl("delete", "sr", SR, "--timeout=180s")
    cluster.kubectl("label", "node", cluster.node_name, f"{OPT_IN}-")
    wait_for(
        "the driver gone from the host",
        lambda: not host_leftovers(),
        90,
        why=lambda: "\n".join(host_leftovers()),
    )
    figure(f"simulated NVIDIA: SpecialResource deleted -> host clean: {time.monotonic() - t0:.1f} s")
    # GFD's labels go with the driver at discovery's next pass (NVML finds no GPU any more)
    took = wait_for(
        "the labels of this module gone",
        lambda: not ours(installed, labels(cluster)),
        180,
        why=lambda: str(ours(installed, labels(cluster))),
    )
    figure(f"simulated NVIDIA: GFD's and sro's labels gone {took:.1f} s after the host was clean")
    taints = node(cluster)["spec"].get("taints", [])
    assert not [t for t in taints if t["key"].startswith((f"sro.dev/{SR}.", RES))], taints
    assert not get_json(cluster, "pods", "-n", NS, "-l", f"sro.dev/specialresource={SR}")["items"]
