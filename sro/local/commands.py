"""`sro local ...`: thin click commands over `cluster.py` and `images.py`."""

from __future__ import annotations

import os
import sys
from contextlib import AbstractContextManager

import click
from rich.console import Console
from rich.table import Table

from sro import progress
from sro.local.cluster import ClusterError, LocalCluster
from sro.local.images import ImageError
from sro.local.kubebuild import BuildError
from sro.progress import Progress

console = Console(stderr=True)


def steps(title: str) -> AbstractContextManager[Progress]:
    """Progress for long steps; a cluster, image or build error ends the command in one line."""
    return progress.steps(console, title, (ClusterError, ImageError, BuildError))


@click.group()
@click.pass_context
def local(ctx: click.Context) -> None:
    """A real single-node Kubernetes on this machine (needs root).

    Built from Debian's own packages: etcd, containerd, runc and CNI plugins from the archive; the
    Kubernetes 1.20 control plane and kubelet compiled from Debian's `kubernetes` source package (once
    per machine, cached under /var/cache/sro). TLS with a generated CA, RBAC, and the admission plugins
    ExtendedResourceToleration, ResourceQuota, Priority and NodeRestriction are on.
    """
    # the daemons, mounts and state are root's: say so before touching any of it (`env` only prints)
    if ctx.invoked_subcommand != "env" and os.geteuid() != 0:
        raise click.ClickException(
            f"sro local {ctx.invoked_subcommand} needs root (running as uid {os.geteuid()})"
        )


@local.command()
def up() -> None:
    """Start the cluster (idempotent: a running healthy cluster is left as it is)."""
    with steps("Bringing the local cluster up") as progress:
        LocalCluster.default().ensure_up(progress)
    click.echo('Ready. Use it with: eval "$(sro local env)"; kubectl get nodes')


@local.command()
@click.option(
    "--purge", is_flag=True, help="Also delete the cluster's data (etcd, kubelet, containerd state)."
)
def down(purge: bool) -> None:
    """Stop every process the cluster started, unmount its mounts, remove its network state.

    The Kubernetes build cache is kept either way; remove /var/cache/sro to drop it.
    """
    with steps("Taking the local cluster down") as progress:
        LocalCluster.default().down(purge=purge, progress=progress)


@local.command()
def status() -> None:
    """Show each daemon of the local cluster and the node's readiness as a table."""
    cluster = LocalCluster.default()
    table = Table(title=f"sro local cluster (node {cluster.node_name})")
    for col in ("component", "state", "detail"):
        table.add_column(col, overflow="fold")
    rows = cluster.status()
    for name, state, detail in rows:
        color = {"running": "green", "stopped": "dim"}.get(state, "red")
        table.add_row(name, f"[{color}]{state}[/{color}]", detail)
    out = Console()
    out.print(table)
    dead = [name for name, state, _ in rows if state == "dead"]
    for name in dead:
        out.print(f"\n[bold red]{name} died[/bold red]; the end of {cluster.layout.log(name)}:")
        out.print(cluster.death_report(name), markup=False, highlight=False, soft_wrap=True)
    if dead:
        out.print(f"\nRun `sro local up` to restart {', '.join(dead)} (what still runs is kept as it is).")
    up = all(state == "running" for _, state, _ in rows)
    ready = up and cluster.node_ready()
    click.echo(f"node {cluster.node_name}: {'Ready' if ready else 'not ready'}")
    sys.exit(0 if ready else 3)


@local.command()
def env() -> None:
    """Print shell exports for using the local cluster: eval "$(sro local env)"."""
    cluster = LocalCluster.default()
    click.echo(f"export KUBECONFIG={cluster.kubeconfig}")
    click.echo(f"export PATH={cluster.layout.bin}:$PATH")


@local.command()
def image() -> None:
    """Build the sro image (only if the project changed) and import it into the local containerd."""
    from sro.local.images import ensure_sro_image

    with steps("Building the sro image") as progress:
        cluster = LocalCluster.default()
        if not cluster.layout.containerd_socket.exists():
            raise ClusterError("containerd of the local cluster is not running: run `sro local up` first")
        name = ensure_sro_image(cluster, progress)
    click.echo(name)
