"""The stages of `sro demo`: the whole story on the embedded local cluster, through the operator.

Stages: the local cluster (Kubernetes built once per machine) → the sro image → `sro install` (the
SpecialResource CRD, RBAC, feature discovery, the operator with two replicas) → the SpecialResource
of examples/simulated-gpu.yaml, walked by the operator state by state on the node (the simulated
GPU driver, its validation, the runtime files, the device plugin, a validation workload, the
discovery labels), each state printed as it becomes ready there → a workload pod that asks for two
GPUs and gets an NVLink pair through the kubelet and the `sro` runtime handler → partitioning (a
CPU pod kept off, a GPU pod let on, a quota refusing, a preemption) → `sro status`.
Each stage prints its time; a failure names the stage and shows what to look at. The GPUs are
simulated (no hardware here) and say so in every label, resource and file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sro.api.names import NAMESPACE, STATE_NAMES, state_label, validated_label
from sro.api.recipes import SIMULATED_GPU
from sro.console.progress import Progress
from sro.demo import partitioning
from sro.demo.polling import until
from sro.local.cluster import ClusterError, LocalCluster
from sro.local.layout import BUSYBOX_IMAGE, RUNTIME_HANDLER

WORKLOAD = "sro-demo-workload"
RESOURCE = SIMULATED_GPU.resource
WORKLOAD_SCRIPT = (
    f'echo "{SIMULATED_GPU.visible_devices_env}=${SIMULATED_GPU.visible_devices_env}"; '
    "ls /dev | grep sro-simgpu | tr '\\n' ' '; echo; simgpu-smi"
)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "simulated-gpu.yaml"


def example_special_resource() -> dict[str, Any]:
    """examples/simulated-gpu.yaml (a checkout), or the same document built in (an installed wheel)."""
    if EXAMPLE.exists():
        return dict(yaml.safe_load(EXAMPLE.read_text()))
    return {
        "apiVersion": "sro.dev/v1alpha1",
        "kind": "SpecialResource",
        "metadata": {"name": SIMULATED_GPU.name},
        "spec": {"recipe": SIMULATED_GPU.name, "startupTaint": True},
    }


def _node(cluster: LocalCluster) -> dict[str, Any]:
    return dict(json.loads(cluster.kubectl("get", "node", cluster.node_name, "-o", "json").stdout))


def run_sro(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    return subprocess.run([sys.executable, "-m", "sro", *args], env=env, capture_output=True, text=True)


def _operator_story(cluster: LocalCluster) -> str:
    status = cluster.kubectl("get", "sr", "-o", "yaml", check=False).stdout
    pods = cluster.kubectl("-n", NAMESPACE, "get", "pods", "-o", "wide", check=False).stdout
    logs = cluster.kubectl(
        "-n", NAMESPACE, "logs", "-l", "app.kubernetes.io/name=sro-operator", "--tail=20", check=False
    ).stdout
    return f"{pods}\n{status}\noperator log:\n{logs}\nNext: sro status; kubectl -n {NAMESPACE} describe pods"


def walk_states(cluster: LocalCluster, name: str, progress: Progress, timeout: float = 300) -> None:
    """Print each state as the operator marks it ready on the node, until the node is validated."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while True:
        labels = _node(cluster)["metadata"].get("labels", {})
        for state in STATE_NAMES:
            if state not in seen and labels.get(state_label(name, state)) == "ready":
                seen.add(state)
                progress(f"  {name}: {state} ready on {cluster.node_name}")
        if labels.get(validated_label(name)) == "true":
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for the node to be validated\n"
                               f"{_operator_story(cluster)}")  # fmt: skip
        time.sleep(0.5)


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


@dataclass(frozen=True)
class Outcome:
    node: dict[str, Any]  # the Node after the workload ran
    output: str  # what the workload printed
    partitioning: list[tuple[str, str, str]]  # scenario, result, evidence


def run(cluster: LocalCluster, progress: Progress) -> Outcome:
    """The stages; returns what the tables show."""
    progress("Stage 1/6: the local Kubernetes cluster")
    cluster.ensure_up(progress)
    progress("Stage 2/6: the sro image")
    from sro.local.images import ensure_sro_image

    image = ensure_sro_image(cluster, progress)
    progress("Stage 3/6: sro install (CRD, RBAC, feature discovery, the operator: 2 replicas, one leads)")
    out = run_sro(cluster, "install", "--image", image)
    if out.returncode != 0:
        raise ClusterError(f"sro install failed:\n{out.stdout}{out.stderr}")
    sr = example_special_resource()
    name = sr["metadata"]["name"]
    progress(
        f"Stage 4/6: SpecialResource {name} (examples/simulated-gpu.yaml); the operator walks its states"
    )
    cluster.kubectl("apply", "-f", "-", input=json.dumps(sr))
    walk_states(cluster, name, progress)
    progress(f"Stage 5/6: a workload asking for {RESOURCE}: 2 (runtimeClassName: {RUNTIME_HANDLER})")
    cluster.kubectl("delete", "pod", WORKLOAD, "--ignore-not-found", "--wait=true", check=False)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(workload_pod()))

    def finished() -> bool:
        phase = cluster.kubectl("get", "pod", WORKLOAD, "-o", "jsonpath={.status.phase}", check=False).stdout
        return phase in ("Succeeded", "Failed")

    until(
        "the workload pod",
        finished,
        120,
        lambda: cluster.kubectl("describe", "pod", WORKLOAD, check=False).stdout,
    )
    output = cluster.kubectl("logs", WORKLOAD, check=False).stdout
    node = _node(cluster)
    cluster.kubectl("delete", "pod", WORKLOAD, "--ignore-not-found", "--grace-period=1", check=False)
    progress("Stage 6/6: partitioning — a taint, priorities and a quota on the GPU node")
    rows = partitioning.run(cluster, name, progress)
    return Outcome(node, output, rows)


def cleanup(cluster: LocalCluster) -> None:
    """Remove the workload, the SpecialResource (the operator's finalizer takes its states away:
    driver, runtime files, plugin, labels) and then sro itself."""
    cluster.kubectl("delete", "pod", WORKLOAD, "--ignore-not-found", "--grace-period=1", check=False)
    name = example_special_resource()["metadata"]["name"]
    cluster.kubectl("delete", "sr", name, "--ignore-not-found", "--timeout=120s", check=False)
    run_sro(cluster, "uninstall")
    run_sro(
        cluster,
        "discover",
        "--cleanup",
        "--node-name",
        cluster.node_name,
        "--kubeconfig",
        str(cluster.kubeconfig),
    )
