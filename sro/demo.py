"""`sro demo`: the whole story on the embedded local cluster, in one command.

Brings the local cluster up (building Kubernetes once per machine), builds and imports the sro image,
deploys sro's node agents as DaemonSets of that one image, and shows what they found as a table.
Each stage says what it is doing and how long it took; a failure says which stage and what to run.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping

import click
from rich.console import Console
from rich.table import Table

from sro.api.names import IMAGE, NAMESPACE, NFD_PREFIX
from sro.local.cluster import ClusterError, LocalCluster
from sro.local.commands import steps
from sro.manifests import render_text


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


def _wait_rollout(cluster: LocalCluster, namespace: str, name: str, timeout: int = 180) -> None:
    cluster.kubectl(
        "-n",
        namespace,
        "rollout",
        "status",
        f"daemonset/{name}",
        f"--timeout={timeout}s",
        timeout=timeout + 10,
    )


def _pod_log(cluster: LocalCluster, namespace: str, app: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        pod = cluster.kubectl(
            "-n", namespace, "get", "pods", "-l", f"app.kubernetes.io/name={app}",
            "--field-selector", f"spec.nodeName={cluster.node_name}", "-o", "jsonpath={.items[0].metadata.name}",
        ).stdout.strip()  # fmt: skip
        log = cluster.kubectl("-n", namespace, "logs", pod, check=False).stdout if pod else ""
        if log.strip().endswith("}") or time.monotonic() > deadline:
            return log
        time.sleep(1)


@click.command()
@click.option(
    "--keep/--cleanup", default=True, show_default=True, help="Leave the demo's objects running afterwards."
)
def demo(keep: bool) -> None:
    """Bring up the local cluster, deploy sro's node agents on it, and show what they found.

    Needs root on a Debian 12 machine with the packages of scripts/setup-host (`make demo` installs
    them). The first run builds Kubernetes from Debian's source package (about 5 minutes, cached).
    """
    cluster = LocalCluster.default()
    with steps("sro demo") as progress:
        progress("Stage 1/3: the local Kubernetes cluster")
        cluster.ensure_up(progress)
        progress("Stage 2/3: the sro image")
        from sro.local.images import ensure_sro_image

        image = ensure_sro_image(cluster, progress)
        progress("Stage 3/3: the node-report DaemonSet (sro discover on every node)")
        manifests = render_text("node-report", namespace=NAMESPACE, image=image, pull_policy="Never")
        cluster.kubectl("apply", "-f", "-", input=manifests)
        _wait_rollout(cluster, NAMESPACE, "sro-node-report")
        log = _pod_log(cluster, NAMESPACE, "sro-node-report")
        progress("DaemonSet ready; reading its pod's log")
    try:
        labels = json.loads(log)
    except ValueError:
        raise ClusterError(f"the node-report pod did not print its labels as JSON; its log:\n{log}") from None
    table = Table(title=f"Node {cluster.node_name}: {len(labels)} features found by the sro image ({IMAGE})")
    table.add_column("feature (feature.node.kubernetes.io/...)")
    table.add_column("value")
    for key, value in summarize(labels):
        table.add_row(key, value)
    Console().print(table)
    if not keep:
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", input=manifests)
    print(f'Next: eval "$(sro local env)"; kubectl -n {NAMESPACE} get pods -o wide', file=sys.stderr)
