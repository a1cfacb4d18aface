"""The stages of `sro demo`: the whole story on the embedded local cluster, through the operator.

Stages: the local cluster (Kubernetes built once per machine) → the sro image → `sro install` (the
SpecialResource CRD, RBAC, feature discovery, the operator with two replicas) → the SpecialResource
of examples/simulated-gpu.yaml, walked by the operator state by state on the node (the simulated
GPU driver, its validation, the runtime files, the device plugin, a validation workload, the
discovery labels), each state printed as it becomes ready there → a workload pod that asks for two
GPUs and gets an NVLink pair (`workload.py`: where the node's runtime reads CDI — the operator's own
rule on `status.nodeInfo.containerRuntimeVersion` — the pod carries nothing but its request and
containerd injects the devices from the node's CDI spec; on containerd 1.6 it names the `sro`
runtime class, whose hook does it; the stage says which and checks it) → partitioning (a
CPU pod kept off, a GPU pod let on, a quota refusing, a preemption) → monitoring (`monitoring.py`:
the local Prometheus scraping the exporter, an Xid alert firing and resolving, report.png; with a
`report` path, which `sro demo` gives unless --no-prometheus) → `sro status`.
Each stage prints its time; a failure names the stage and shows what to look at. The GPUs are
simulated (no hardware here) and say so in every label, resource and file.

`sro demo --nvidia` tells the same story with the NVIDIA flavour (`flavours.NVIDIA`): the node opts in
to sro's simulated NVIDIA driver, the SpecialResource is examples/simulated-nvidia.yaml (recipe
nvidia-gpu on the `nvml` backend), and the workload runs nvidia-smi in a glibc image.
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

from sro.api.names import NAMESPACE, STATE_NAMES, state_label, validated_label
from sro.console.progress import Progress
from sro.demo import monitoring, partitioning
from sro.demo.flavours import SIMULATED, Flavour
from sro.demo.polling import until
from sro.demo.workload import WORKLOAD, RuntimePath, check, runtime_path, workload_pod
from sro.local import prometheus as local_prometheus
from sro.local.cluster import ClusterError, LocalCluster
from sro.local.layout import GLIBC_IMAGE

__all__ = ["WORKLOAD", "Outcome", "cleanup", "run", "run_sro", "walk_states", "workload_pod"]
RESOURCE = SIMULATED.recipe.resource


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


@dataclass(frozen=True)
class Outcome:
    node: dict[str, Any]  # the Node after the workload ran
    output: str  # what the workload printed
    partitioning: list[tuple[str, str, str]]  # scenario, result, evidence
    monitored: monitoring.Monitoring | None = None  # the monitoring stage, where it ran
    path: RuntimePath | None = None  # how the workload got its devices (CDI or the runtime class)


def _opt_in(cluster: LocalCluster, flavour: Flavour, on: bool) -> None:
    """Set (or take away) the node label by which the flavour's node opts in, where it has one."""
    if flavour.opt_in:
        label = f"{flavour.opt_in}=true" if on else f"{flavour.opt_in}-"
        cluster.kubectl("label", "node", cluster.node_name, label, "--overwrite", check=on)


def run(
    cluster: LocalCluster, progress: Progress, flavour: Flavour = SIMULATED, report: Path | None = None
) -> Outcome:
    """The stages; returns what the tables show. With `report` (a PNG to write), Prometheus runs
    beside the cluster and a last stage shows monitoring."""
    resource = flavour.recipe.resource
    total = 6 if report is None else 7
    progress(
        f"Stage 1/{total}: the local Kubernetes cluster" + ("" if report is None else ", with Prometheus")
    )
    if report is not None:
        local_prometheus.choose(cluster.layout, True, progress)
    cluster.ensure_up(progress)
    progress(f"Stage 2/{total}: the sro image")
    from sro.local.images import ensure_sro_image, glibc_image

    image = ensure_sro_image(cluster, progress)
    if flavour.image == GLIBC_IMAGE:
        glibc_image(cluster.layout, progress)  # a base image added after clusters that are still up
    progress(
        f"Stage 3/{total}: sro install (CRD, RBAC, feature discovery, the operator: 2 replicas, one leads)"
    )
    out = run_sro(cluster, "install", "--image", image)
    if out.returncode != 0:
        raise ClusterError(f"sro install failed:\n{out.stdout}{out.stderr}")
    sr = flavour.special_resource()
    name = sr["metadata"]["name"]
    if flavour.opt_in:
        progress(f"  node {cluster.node_name} opts in: {flavour.opt_in}=true")
        _opt_in(cluster, flavour, True)
    progress(
        f"Stage 4/{total}: SpecialResource {name} (examples/{flavour.example.name}); the operator walks its states"
    )
    cluster.kubectl("apply", "-f", "-", input=json.dumps(sr))
    walk_states(cluster, name, progress)
    path = runtime_path(_node(cluster)["status"].get("nodeInfo", {}).get("containerRuntimeVersion", ""))
    progress(f"Stage 5/{total}: a workload asking for {resource}: 2, {path.words()}")
    cluster.kubectl("delete", "pod", WORKLOAD, "--ignore-not-found", "--wait=true", check=False)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(workload_pod(flavour, cdi=path.cdi)))

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
    pod = json.loads(cluster.kubectl("get", "pod", WORKLOAD, "-o", "json").stdout)
    problems, evidence = check(pod, output, flavour, path)
    if problems:
        described = cluster.kubectl("describe", "pod", WORKLOAD, check=False).stdout
        raise ClusterError(
            f"the workload did not get its devices {path.words()}: " + "; ".join(problems)
            + f"\nit printed:\n{output}\n{described}"
        )  # fmt: skip
    progress(f"  {WORKLOAD}: {evidence}")
    node = _node(cluster)
    cluster.kubectl("delete", "pod", WORKLOAD, "--ignore-not-found", "--grace-period=1", check=False)
    progress(f"Stage 6/{total}: partitioning — a taint, priorities and a quota on the GPU node")
    rows = partitioning.run(cluster, name, progress, resource)
    if report is None:
        return Outcome(node, output, rows, path=path)
    progress(f"Stage 7/7: monitoring — the local Prometheus, an alert firing and resolving, {report.name}")
    watched = monitoring.run(cluster, progress, resource, flavour.driver_root, report)
    return Outcome(node, output, rows, watched, path)


def cleanup(cluster: LocalCluster, flavour: Flavour = SIMULATED) -> None:
    """Remove the workload, the SpecialResource (the operator's finalizer takes its states away:
    driver, runtime files, plugin, labels), the node's opt-in the demo set, and then sro itself."""
    cluster.kubectl("delete", "pod", WORKLOAD, "--ignore-not-found", "--grace-period=1", check=False)
    name = flavour.special_resource()["metadata"]["name"]
    cluster.kubectl("delete", "sr", name, "--ignore-not-found", "--timeout=120s", check=False)
    _opt_in(cluster, flavour, False)
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
