"""`sro demo`: the whole node-side story on the embedded local cluster, in one command.

Stages: the local cluster (Kubernetes built once per machine) → the sro image → the simulated GPU
driver and sro's runtime files (the `sro` handler's launcher and hook, `sro runtime install`) on the
node → feature discovery (NFD-compatible labels, published on the Node) → the device plugin
(simulated GPUs become `sro.dev/simulated-gpu` capacity) → a workload pod that asks for two GPUs and
gets them through the kubelet and the `sro` runtime handler. Each stage prints what it does
and its time; a failure names the stage and shows the relevant log. The GPUs are simulated (no
hardware here) and say so in every label, resource and file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

import click
import yaml
from rich.console import Console
from rich.table import Table

from sro.api.names import NAMESPACE, NFD_PREFIX, RUNTIME_ROOT
from sro.api.recipes import SIMULATED_GPU
from sro.local.cluster import ClusterError, LocalCluster
from sro.local.commands import steps
from sro.local.layout import BUSYBOX_IMAGE, RUNTIME_HANDLER
from sro.manifests import render_text

Progress = Callable[[str], None]
WORKLOAD = "sro-demo-workload"
RESOURCE = SIMULATED_GPU.resource
WORKLOAD_SCRIPT = (
    f'echo "{SIMULATED_GPU.visible_devices_env}=${SIMULATED_GPU.visible_devices_env}"; '
    "ls /dev | grep sro-simgpu | tr '\\n' ' '; echo; simgpu-smi"
)
PLUGIN_CONFIG = "version: v1\nhealth: {recoverAfterSeconds: 10}\n"


def summarize(labels: Mapping[str, str]) -> list[tuple[str, str]]:
    """Rows for people: one per label, except cpuid flags, which become one row with a count."""
    rows: list[tuple[str, str]] = []
    cpuid = sorted(k.rsplit(".", 1)[1] for k in labels if k.startswith(NFD_PREFIX + "cpu-cpuid."))
    for key in sorted(labels):
        if key.startswith(NFD_PREFIX + "cpu-cpuid."):
            continue
        rows.append((key.removeprefix(NFD_PREFIX), labels[key]))
    if cpuid:
        shown = ", ".join(cpuid[:8]) + (", ..." if len(cpuid) > 8 else "")
        rows.append(("cpu-cpuid.*", f"{len(cpuid)} flags: {shown}"))
    return rows


def _wait(what: str, check: Callable[[], bool], timeout: float, on_timeout: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}\n{on_timeout()}")
        time.sleep(1)


def _node(cluster: LocalCluster) -> dict[str, Any]:
    return dict(json.loads(cluster.kubectl("get", "node", cluster.node_name, "-o", "json").stdout))


def _logs(cluster: LocalCluster, selector: str) -> str:
    out = cluster.kubectl("-n", NAMESPACE, "logs", "-l", selector, "--tail=20", check=False)
    return f"logs of {selector}:\n{out.stdout}{out.stderr}"


def _apply(cluster: LocalCluster, component: str, **values: str) -> None:
    text = render_text(component, namespace=NAMESPACE, pull_policy="Never", **values)
    cluster.kubectl("apply", "-f", "-", input=text)


def simulated_driver(example: str = "8gpu-nvlink.yaml") -> None:
    """Install the simulated GPU driver on this node (what a driver DaemonSet does on a real one)."""
    config = resources.files("sro.devices") / "examples" / example
    with resources.as_file(config) as path:
        out = subprocess.run(
            [sys.executable, "-m", "sro", "driver", "simulate", "--config", str(path)],
            capture_output=True,
            text=True,
        )
    if out.returncode != 0:
        raise ClusterError(f"sro driver simulate failed: {out.stderr.strip() or out.stdout.strip()}")


def runtime_files() -> None:
    """Install the files containerd's `sro` runtime handler runs: its launcher and the hook zipapp for
    the host's python3, as the runtime state's DaemonSet does on a node (same command)."""
    argv = [sys.executable, "-m", "sro", "runtime", "install", "--root", RUNTIME_ROOT]
    out = subprocess.run(
        [*argv, "--recipe", SIMULATED_GPU.name, "--owner", "demo"], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise ClusterError(f"sro runtime install failed: {out.stderr.strip() or out.stdout.strip()}")


def workload_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": WORKLOAD,
            "namespace": "default",
            "labels": {"app.kubernetes.io/managed-by": "sro"},
        },
        "spec": {
            "restartPolicy": "Never",
            "runtimeClassName": RUNTIME_HANDLER,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "workload",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", WORKLOAD_SCRIPT],
                    "resources": {"limits": {RESOURCE: "2"}},
                }
            ],
        },
    }


def run(cluster: LocalCluster, progress: Progress) -> tuple[dict[str, Any], str]:
    """The stages; returns the Node as it ends up and the workload's output."""
    progress("Stage 1/6: the local Kubernetes cluster")
    cluster.ensure_up(progress)
    progress("Stage 2/6: the sro image")
    from sro.local.images import ensure_sro_image

    image = ensure_sro_image(cluster, progress)
    progress(
        "Stage 3/6: the simulated GPU driver (8 GPUs, 2 NVLink islands, 2 NUMA nodes) and the runtime "
        f"files of the `{RUNTIME_HANDLER}` handler on the node"
    )
    simulated_driver()
    runtime_files()
    progress("Stage 4/6: feature discovery (DaemonSet sro-discovery, publishing labels on the Node)")
    _apply(cluster, "discovery", image=image, sleep_interval="5s")
    gpu_label = f"{SIMULATED_GPU.label_prefix}count"
    _wait(
        "discovery labels on the node",
        lambda: gpu_label in _node(cluster)["metadata"].get("labels", {}),
        180,
        lambda: _logs(cluster, "app.kubernetes.io/name=sro-discovery"),
    )
    progress("Stage 5/6: the device plugin (DaemonSet sro-device-plugin-simulated-gpu)")
    _apply(cluster, "device-plugin", image=image, recipe=SIMULATED_GPU.name, plugin_config=PLUGIN_CONFIG)
    _wait(
        f"{RESOURCE} in the node's allocatable",
        lambda: int(_node(cluster)["status"].get("allocatable", {}).get(RESOURCE, "0")) > 0,
        180,
        lambda: _logs(cluster, "app.kubernetes.io/name=sro-device-plugin"),
    )
    progress(f"Stage 6/6: a workload asking for {RESOURCE}: 2 (runtimeClassName: {RUNTIME_HANDLER})")
    cluster.kubectl("delete", "pod", WORKLOAD, "--ignore-not-found", "--wait=true", check=False)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(workload_pod()))

    def finished() -> bool:
        phase = cluster.kubectl("get", "pod", WORKLOAD, "-o", "jsonpath={.status.phase}", check=False).stdout
        return phase in ("Succeeded", "Failed")

    _wait(
        "the workload pod",
        finished,
        120,
        lambda: cluster.kubectl("describe", "pod", WORKLOAD, check=False).stdout,
    )
    output = cluster.kubectl("logs", WORKLOAD, check=False).stdout
    return _node(cluster), output


def show(cluster: LocalCluster, node: Mapping[str, Any], output: str) -> None:
    console = Console()
    labels = node["metadata"].get("labels", {})
    features = {k: v for k, v in labels.items() if k.startswith(NFD_PREFIX)}
    table = Table(title=f"Node {cluster.node_name}: {len(features)} NFD-compatible feature labels")
    table.add_column("feature (feature.node.kubernetes.io/...)")
    table.add_column("value")
    for key, value in summarize(features):
        table.add_row(key, value)
    console.print(table)

    gpu = Table(title="Simulated GPUs: labels, capacity and allocatable (no real hardware)")
    gpu.add_column("key")
    gpu.add_column("value")
    for key in sorted(k for k in labels if k.startswith(SIMULATED_GPU.label_prefix)):
        gpu.add_row(key, labels[key])
    status = node["status"]
    gpu.add_row(f"capacity {RESOURCE}", status.get("capacity", {}).get(RESOURCE, "0"))
    gpu.add_row(f"allocatable {RESOURCE}", status.get("allocatable", {}).get(RESOURCE, "0"))
    console.print(gpu)
    console.print(f"[bold]Workload pod {WORKLOAD}[/bold] (asked for {RESOURCE}: 2) printed:")
    console.print(output.rstrip() or "(nothing)")


def cleanup(cluster: LocalCluster) -> None:
    cluster.kubectl("delete", "pod", WORKLOAD, "--ignore-not-found", check=False)
    for component in ("device-plugin", "discovery"):
        docs = yaml.safe_load_all(
            render_text(
                component, namespace=NAMESPACE, image="x", pull_policy="Never", recipe=SIMULATED_GPU.name
            )
        )
        keep = [d for d in docs if d and d["kind"] != "Namespace"]
        cluster.kubectl(
            "delete", "--ignore-not-found", "-f", "-", input=yaml.safe_dump_all(keep), check=False
        )
    subprocess.run([sys.executable, "-m", "sro", "discover", "--cleanup", "--node-name", cluster.node_name,
                    "--kubeconfig", str(cluster.kubeconfig)], capture_output=True, check=False)  # fmt: skip
    uninstall = [
        "runtime",
        "uninstall",
        "--root",
        RUNTIME_ROOT,
        "--recipe",
        SIMULATED_GPU.name,
        "--owner",
        "demo",
    ]
    subprocess.run([sys.executable, "-m", "sro", *uninstall], capture_output=True, check=False)
    subprocess.run(
        [sys.executable, "-m", "sro", "driver", "simulate", "--remove"], capture_output=True, check=False
    )


@click.command()
@click.option(
    "--keep/--cleanup", default=True, show_default=True, help="Leave the demo's objects running afterwards."
)
def demo(keep: bool) -> None:
    """Bring up the local cluster, deploy sro's node agents on it, run a GPU workload, show the result.

    Needs root on a Debian 12 machine with the packages of scripts/setup-host (`make demo` installs
    them). The first run builds Kubernetes from Debian's source package (about 5 minutes, cached).
    The GPUs are simulated: 8 of them, with NVLink islands and NUMA nodes, as real device nodes.
    """
    cluster = LocalCluster.default()
    with steps("sro demo") as progress:
        node, output = run(cluster, progress)
        progress("Done")
    show(cluster, node, output)
    if not keep:
        cleanup(cluster)
        print("Removed the demo's objects, labels, runtime files and the simulated driver.", file=sys.stderr)
    else:
        print(
            f'Next: eval "$(sro local env)"; kubectl -n {NAMESPACE} get pods; kubectl describe node {cluster.node_name}\n'
            "      sro simulate fault --device 0 --xid 79   # watch allocatable drop, then --clear\n"
            "      sro demo --cleanup                       # remove what the demo deployed",
            file=sys.stderr,
        )
