"""`sro demo`: the click command over the stages (`stages.run`), and the tables it ends with.

Each stage prints its time; a failure names the stage and shows what to look at. The GPUs are
simulated (no hardware here) and say so in every label, resource and file.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

import click
from rich.console import Console
from rich.table import Table

from sro.api.names import NAMESPACE, NFD_PREFIX
from sro.api.recipes import SIMULATED_GPU
from sro.demo.stages import RESOURCE, WORKLOAD, Outcome, cleanup, run, run_sro
from sro.local.cluster import LocalCluster
from sro.local.commands import steps


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


def show(cluster: LocalCluster, outcome: Outcome) -> None:
    console = Console()
    node, output = outcome.node, outcome.output
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
    console.print(output.rstrip() or "(nothing)", markup=False, highlight=False)
    parts = Table(title="Partitioning (spec.partitioning of the SpecialResource)")
    for col in ("tried", "what happened", "evidence"):
        parts.add_column(col)
    for row in outcome.partitioning:
        parts.add_row(*row)
    console.print(parts)
    status = run_sro(cluster, "status", "--no-logs")
    console.print(status.stdout.rstrip(), markup=False, highlight=False)


@click.command()
@click.option(
    "--keep/--cleanup", default=True, show_default=True, help="Leave the demo's objects running afterwards."
)
def demo(keep: bool) -> None:
    """Bring up the local cluster, install sro, let the operator walk a SpecialResource, run a GPU workload.

    Ends with tables: the node's features, the simulated GPUs, what the workload saw and `sro status`.
    Needs root on a Debian 12 machine with the packages of scripts/setup-host (`make demo` installs
    them). The first run builds Kubernetes from Debian's source package (about 5 minutes, cached).
    The GPUs are simulated: 8 of them, with NVLink islands and NUMA nodes, as real device nodes.
    """
    cluster = LocalCluster.default()
    with steps("sro demo") as progress:
        outcome = run(cluster, progress)
        progress("Done")
    show(cluster, outcome)
    if not keep:
        cleanup(cluster)
        print("Removed the demo's objects, labels, runtime files and the simulated driver.", file=sys.stderr)
    else:
        print(
            f'Next: eval "$(sro local env)"; kubectl get sr; kubectl -n {NAMESPACE} get pods; sro status\n'
            "      sro simulate fault --device 0 --xid 79   # watch allocatable drop, then --clear\n"
            "      sro demo --cleanup                       # remove what the demo deployed",
            file=sys.stderr,
        )
