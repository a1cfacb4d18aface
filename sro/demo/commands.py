"""`sro demo`: the click command over the stages (`stages.run`), and the tables it ends with.

Each stage prints its time; a failure names the stage and shows what to look at. The GPUs are
simulated (no hardware here) and say so in every label, resource and file. `--nvidia` tells the same
story on the nvidia-gpu recipe over sro's simulated NVIDIA driver (`flavours.NVIDIA`).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from sro.api.names import NAMESPACE, NFD_PREFIX
from sro.demo.flavours import NVIDIA, SIMULATED, Flavour
from sro.demo.monitoring import Monitoring, alert_lines
from sro.demo.stages import WORKLOAD, Outcome, cleanup, run, run_sro
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


def next_steps(flavour: Flavour) -> str:
    """What to try once the demo is up: the fault names the flavour's driver root, where not the default."""
    fault, again = "sro simulate fault --device 0 --xid 79", "sro demo --cleanup"
    if flavour.driver_root != SIMULATED.driver_root:
        fault += f" --driver-root {flavour.driver_root}"
        again = "sro demo --nvidia --cleanup"
    return (
        f'Next: eval "$(sro local env)"; kubectl get sr; kubectl -n {NAMESPACE} get pods; sro status\n'
        f"      {fault:<38}   # watch allocatable drop, then --clear\n"
        f"      {again:<38}   # remove what the demo deployed"
    )


def show(cluster: LocalCluster, outcome: Outcome, flavour: Flavour = SIMULATED) -> None:
    console = Console()
    resource, prefix = flavour.recipe.resource, flavour.recipe.label_prefix
    node, output = outcome.node, outcome.output
    labels = node["metadata"].get("labels", {})
    features = {k: v for k, v in labels.items() if k.startswith(NFD_PREFIX)}
    table = Table(title=f"Node {cluster.node_name}: {len(features)} NFD-compatible feature labels")
    table.add_column("feature (feature.node.kubernetes.io/...)")
    table.add_column("value")
    for key, value in summarize(features):
        table.add_row(key, value)
    console.print(table)

    gpu = Table(title=flavour.gpus_title)
    gpu.add_column("key")
    gpu.add_column("value")
    for key in sorted(k for k in labels if k.startswith(prefix)):
        gpu.add_row(key, labels[key])
    status = node["status"]
    gpu.add_row(f"capacity {resource}", status.get("capacity", {}).get(resource, "0"))
    gpu.add_row(f"allocatable {resource}", status.get("allocatable", {}).get(resource, "0"))
    console.print(gpu)
    console.print(f"[bold]Workload pod {WORKLOAD}[/bold] (asked for {resource}: 2) printed:")
    console.print(output.rstrip() or "(nothing)", markup=False, highlight=False)
    parts = Table(title="Partitioning (spec.partitioning of the SpecialResource)")
    for col in ("tried", "what happened", "evidence"):
        parts.add_column(col)
    for row in outcome.partitioning:
        parts.add_row(*row)
    console.print(parts)
    if outcome.monitored is not None:
        show_monitoring(console, outcome.monitored)
    status = run_sro(cluster, "status", "--no-logs")
    console.print(status.stdout.rstrip(), markup=False, highlight=False)


def show_monitoring(console: Console, m: Monitoring) -> None:
    """The monitoring stage as a table: where the series came from, the alert, the PNG."""
    table = Table(title="Monitoring: the local Prometheus (sro local up --prometheus)")
    table.add_column("what")
    table.add_column("seen")
    table.add_row("scraped target", f"{m.target} (exporter pod {m.exporter_pod})")
    table.add_row("pod holding two devices", ", ".join(f"GPU {d.gpu} {d.uuid}" for d in m.devices))
    table.add_row("alert, firing", "\n".join(alert_lines(m.alert)))
    table.add_row(
        "fired / resolved", f"{m.fired_after:.1f} s after the Xid / {m.resolved_after:.1f} s after --clear"
    )
    table.add_row("report", (m.report_output.strip().splitlines() or [""])[0])
    console.print(table)
    console.print(f"[bold]Report:[/bold] {m.report}", markup=True, highlight=False)


@click.command()
@click.option(
    "--keep/--cleanup", default=True, show_default=True, help="Leave the demo's objects running afterwards."
)
@click.option(
    "--nvidia",
    is_flag=True,
    help="The nvidia-gpu recipe (NVML, nvidia-smi) on sro's simulated NVIDIA driver instead of simulated-gpu.",
)
@click.option(
    "--prometheus/--no-prometheus",
    default=True,
    show_default=True,
    help="Run Prometheus beside the cluster and end with the monitoring stage (an alert, a PNG).",
)
@click.option(
    "--report",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("report.png"),
    show_default=True,
    help="Where the monitoring stage writes its PNG (sro report).",
)
def demo(keep: bool, nvidia: bool, prometheus: bool, report: Path) -> None:
    """Bring up the local cluster, install sro, let the operator walk a SpecialResource, run a GPU workload.

    Ends with tables: the node's features, the simulated GPUs, what the workload saw and `sro status`.
    With Prometheus (the default; `sro local up --prometheus`), a last stage shows monitoring: the
    exporter scraped, an injected Xid firing the SroGpuXidError alert and resolving, and --report
    drawn by `sro report` from Prometheus's samples.
    Needs root on a Debian 12 machine with the packages of scripts/setup-host (`make demo` installs
    them). The first run builds Kubernetes from Debian's source package (about 5 minutes, cached).
    The GPUs are simulated: 8 of them, with NVLink islands and NUMA nodes, as real device nodes.
    With --nvidia: 4 simulated A100s (one in MIG mode) behind NVIDIA's device nodes, a libnvidia-ml.so.1
    and an nvidia-smi, driven by the real nvidia-gpu stack (examples/simulated-nvidia.yaml).
    """
    if prometheus and not report.absolute().parent.is_dir():  # before minutes of work, not after
        raise click.BadParameter(f"{report}: its directory does not exist", param_hint="'--report'")
    flavour = NVIDIA if nvidia else SIMULATED
    cluster = LocalCluster.default()
    with steps("sro demo" + (" --nvidia" if nvidia else "")) as progress:
        outcome = run(cluster, progress, flavour, report if prometheus else None)
        progress("Done")
    show(cluster, outcome, flavour)
    if not keep:
        cleanup(cluster, flavour)
        print("Removed the demo's objects, labels, runtime files and the simulated driver.", file=sys.stderr)
    else:
        print(next_steps(flavour), file=sys.stderr)
        if outcome.monitored is not None:
            report_hint = "sro report --since 15m -o report.png"
            print(f"      {report_hint:<38}   # from the local Prometheus (127.0.0.1:9090)", file=sys.stderr)
