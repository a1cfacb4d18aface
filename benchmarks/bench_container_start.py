"""A pod's container start on the real local cluster: CDI through containerd, the OCI hook, the runc
wrapper and none, in the same run, as ratios to none (issue 23).

What is timed is what differs between the paths: from the pod's sandbox task started to its
container's task started, both as containerd stamps its own `/tasks/start` events (nanoseconds;
`taskevents`, read from `ctr events` during the run). That span holds the CNI set-up, the kubelet's
image check and CreateContainer/StartContainer: containerd applying the CDI spec, runc and, through
the `sro` runtime class, the launcher with its wrapper and hook. (It was read inside the pod from
/proc/uptime and the pause process's start time before: both tick every 10 ms, as coarse as the
differences measured.) The pod's whole start as a user sees it (create request to first
instruction, read inside the pod) is printed beside it.

Cases, each a busybox pod in the operator's namespace:
  none      no device, the default runtime: the baseline.
  cdi       `sro.dev/simulated-gpu: 1`, the default runtime: the device plugin answers with CDI
            names (its config names no strategy; runtimes.yaml lists the node) and containerd
            applies the live spec the runtime files hold in /var/run/cdi (no sro code runs).
  hook      no plugin device; SRO_MANAGEMENT_DEVICES=0 with `runtimeClassName: sro`, the runtime
            files installed with --mode hook: the launcher's wrapper adds the prestart hook, which
            injects device 0, the libraries and the binary.
  wrapper   the same with --mode cdi: the wrapper writes the device into the OCI spec itself.
Passes go none, cdi, hook, wrapper, the next one in reverse (the runtime files switched between hook
and wrapper), so noise hits each alike and none does not always come first; a pass is one pair:
each case's median over its SRO_BENCH_PODS pods (default 5) against none's in the same pass,
SRO_BENCH_PAIRS passes (default 5); a figure is the median with the spread of the per-pass ratios.
Goal: cdi no slower than none (no sro code runs on that path); hook and wrapper run Python on every
start, and their goals (against one Python start) are bench_hook's. Needs root, the local cluster with containerd >= 1.7
(CDI) and its sro image, and `ctr` (containerd's client); the cdi case is left out, saying why, on an older
containerd.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from benchmarks.harness import PAIRS, Figure, paired_figure
from benchmarks.taskevents import EventStream

PODS = int(os.environ.get("SRO_BENCH_PODS", "5"))
PASSES = PAIRS
NS = "sro-system"
OWNER = "bench-container-start"
CASES = ("none", "cdi", "hook", "wrapper")
SCRIPT = (
    'read up rest < /proc/uptime; echo "START $up"; ls /dev | grep -c sro-simgpu; '
    "test -s /lib/libsimgpu.so.1 && echo HAS-LIB; true"
)


def _progress(message: str) -> None:
    print(f"[bench container-start] {message}", file=sys.__stderr__, flush=True)


def _uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def _pod(name: str, case: str, image: str) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "c", "image": image, "imagePullPolicy": "Never", "command": ["sh", "-c", SCRIPT],
    }  # fmt: skip
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [container],
    }
    if case == "cdi":
        container["resources"] = {"limits": {"sro.dev/simulated-gpu": "1"}}
    if case in ("hook", "wrapper"):
        container["env"] = [{"name": "SRO_MANAGEMENT_DEVICES", "value": "0"}]
        spec["runtimeClassName"] = "sro"
    md = {"name": name, "namespace": NS, "labels": {"app.kubernetes.io/managed-by": "sro-bench"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec}


def _one(cluster: Any, case: str, image: str, events: EventStream) -> tuple[float, float]:
    """(sandbox started -> container started, create -> first instruction) of one pod, in seconds."""
    name = f"bench-start-{case}-{uuid.uuid4().hex[:6]}"
    t0 = _uptime()
    cluster.kubectl("create", "-f", "-", input=json.dumps(_pod(name, case, image)))
    deadline = time.monotonic() + 120
    try:
        while True:
            phase = cluster.kubectl("get", "pod", name, "-n", NS, "-o", "jsonpath={.status.phase}").stdout
            if phase in ("Succeeded", "Failed"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"benchmark: pod {name} ({case}) did not finish: {phase}")
            time.sleep(0.2)
        log = cluster.kubectl("logs", name, "-n", NS).stdout
        jsonpath = "jsonpath={.status.containerStatuses[0].containerID}"
        container = cluster.kubectl("get", "pod", name, "-n", NS, "-o", jsonpath).stdout
    finally:
        cluster.kubectl("delete", "pod", name, "-n", NS, "--wait=false", check=False)
    lines = log.splitlines()
    if phase != "Succeeded" or not lines or not lines[0].startswith("START "):
        raise RuntimeError(f"benchmark: pod {name} ({case}) {phase}: {log[:500]}")
    _, up = lines[0].split()
    if case != "none" and "HAS-LIB" not in log:
        raise RuntimeError(f"benchmark: the {case} pod got no driver files: {log[:500]}")
    return events.span(NS, name, container.removeprefix("containerd://")), float(up) - t0


def _install_runtime(mode: str, python: str) -> None:
    args = [sys.executable, "-m", "sro", "runtime", "install", "--recipe", "simulated-gpu", "--owner", OWNER]
    args += ["--mode", mode, "--cdi-dir", "/var/run/cdi", "--python", python]
    subprocess.run(args, check=True, capture_output=True)


def _plugin(cluster: Any, image: str, node: str) -> list[dict[str, Any]]:
    from sro.manifests import render_text

    text = render_text(
        "device-plugin", image=image, namespace=NS, pull_policy="Never", recipe="simulated-gpu",
        plugin_config="version: v1\n", cdi_nodes=[node],
    )  # fmt: skip
    docs = [d for d in yaml.safe_load_all(text) if d and d["kind"] != "Namespace"]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    return docs


def _allocatable(cluster: Any, node: str) -> int:
    doc = json.loads(cluster.kubectl("get", "node", node, "-o", "json").stdout)
    return int(doc["status"].get("allocatable", {}).get("sro.dev/simulated-gpu", "0"))


Passes = dict[str, tuple[list[float], list[float]]]  # case -> per pass: (median inside, median whole) in ms


def _measure(cluster: Any, image: str, cases: tuple[str, ...], events: EventStream) -> Passes:
    out: Passes = {c: ([], []) for c in cases}
    python = "/usr/bin/python3"
    for p in range(PASSES):
        for case in cases if p % 2 == 0 else tuple(reversed(cases)):
            if case in ("hook", "wrapper"):
                _install_runtime("hook" if case == "hook" else "cdi", python)
            pods = [_one(cluster, case, image, events) for _ in range(PODS)]
            out[case][0].append(1000 * statistics.median(inside for inside, _ in pods))
            out[case][1].append(1000 * statistics.median(whole for _, whole in pods))
            _progress(f"pass {p + 1}/{PASSES} {case}: median {out[case][0][-1]:.0f} ms")
    return out


def run() -> list[Figure]:
    from sro.local.cluster import LocalCluster
    from sro.local.images import ensure_sro_image
    from sro.local.layout import BUSYBOX_IMAGE
    from sro.operator.cdiruntime import reads_cdi

    if os.geteuid() != 0:
        raise RuntimeError("the container-start benchmark needs root (the local cluster)")
    cluster = LocalCluster.default()
    cluster.ensure_up(_progress)
    image = ensure_sro_image(cluster, _progress)
    node = cluster.node_name
    runtime = json.loads(cluster.kubectl("get", "node", node, "-o", "json").stdout)["status"]["nodeInfo"]
    cases = CASES if reads_cdi(runtime["containerRuntimeVersion"]) else tuple(c for c in CASES if c != "cdi")
    if "cdi" not in cases:
        _progress(f"{runtime['containerRuntimeVersion']} reads no CDI specs: the cdi case is left out")
    created_ns = cluster.kubectl("get", "namespace", NS, check=False).returncode != 0
    if created_ns:
        cluster.kubectl("create", "namespace", NS)
    driver = Path("/var/lib/sro/driver/simulated-gpu/devices.json")
    made_driver = not driver.exists()
    if made_driver:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write("count: 2\n")
            f.flush()
            subprocess.run(
                [sys.executable, "-m", "sro", "driver", "simulate", "--config", f.name], check=True
            )
    from sro.api.names import RUNTIME_ROOT
    from sro.node.runtime import hostinstall
    from sro.node.runtime.rootwrites import read_manifest

    before = read_manifest(RUNTIME_ROOT) if os.path.isdir(RUNTIME_ROOT) else None
    docs: list[dict[str, Any]] = []
    events = EventStream(str(cluster.layout.containerd_socket))
    try:
        _install_runtime("hook", "/usr/bin/python3")
        docs = _plugin(cluster, image, node)
        deadline = time.monotonic() + 180
        while _allocatable(cluster, node) != 2:
            if time.monotonic() > deadline:
                raise RuntimeError("benchmark: the device plugin announced no devices in 180 s")
            time.sleep(1)
        for case in cases:  # one unmeasured pod each: the image's pages in the cache
            _one(cluster, case, BUSYBOX_IMAGE, events)
        samples = _measure(cluster, BUSYBOX_IMAGE, cases, events)
    finally:
        events.stop()
        if docs:
            cluster.kubectl(
                "delete", "--ignore-not-found", "-f", "-", input=yaml.safe_dump_all(docs), check=False
            )
        hostinstall.uninstall(RUNTIME_ROOT, owner=OWNER)
        after = read_manifest(RUNTIME_ROOT) if os.path.isdir(RUNTIME_ROOT) else None
        if before is not None and after is not None and after.settings != before.settings:
            # other owners remain: their node-wide settings (the mode) as they were
            hostinstall.install(RUNTIME_ROOT, dict(before.recipes), before.settings, owner=OWNER)
            hostinstall.uninstall(RUNTIME_ROOT, owner=OWNER)
        if made_driver:
            subprocess.run([sys.executable, "-m", "sro", "driver", "simulate", "--remove"], check=False)
        if created_ns:
            cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)

    figures = []
    for case in cases[1:]:
        fig = paired_figure(
            f"container start, {case} (sandbox started -> container started)",
            "ms",
            "none: no device, default runtime",
            samples[case][0],
            samples["none"][0],
            goal=1.0 if case == "cdi" else None,
            target="<= 1.0x none (no sro code runs)" if case == "cdi" else "its goal: bench_hook's",
        )
        figures.append(fig)
    for case in cases[1:]:
        figures.append(
            paired_figure(
                f"pod start, {case} (create -> first instruction)",
                "ms",
                "none",
                samples[case][1],
                samples["none"][1],
                goal=None,
            )
        )
    return figures
