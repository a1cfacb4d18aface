"""`sro local ...`: thin click commands over `cluster.py` and `images.py`."""

from __future__ import annotations

import os
import sys
from contextlib import AbstractContextManager
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from sro.console import progress
from sro.console.progress import Progress
from sro.local import prometheus as local_prometheus
from sro.local import restarts, supervisor
from sro.local.cluster import ClusterError, LocalCluster
from sro.local.hollowconfig import DEFAULT_CONFIG, HollowConfigError, parse_config
from sro.local.images import ImageError
from sro.local.kubebuild import BuildError
from sro.local.layout import Ports

console = Console(stderr=True)


def steps(title: str) -> AbstractContextManager[Progress]:
    """Progress for long steps; a cluster, image or build error ends the command in one line."""
    return progress.steps(console, title, (ClusterError, ImageError, BuildError, HollowConfigError))


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
@click.option(
    "--hollow-nodes",
    type=click.IntRange(min=0),
    default=None,
    help="Run exactly N hollow nodes (kubemark: a real kubelet with a fake runtime) beside the real "
    "node; 0 stops them. Without it, hollow nodes already running are left as they are.",
)
@click.option(
    "--hollow-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The hollow nodes' labels, taints, capacity, kernels/OSes and failure rules (YAML; "
    "`sro local hollow-config` prints the default). Default: the last one given.",
)
@click.option(
    "--kube-api-qps",
    type=click.IntRange(min=0),
    default=None,
    help="API requests per second the controller-manager and scheduler may make (0: their defaults, "
    "20 and 50). Kept until changed; running daemons are restarted with it.",
)
@click.option(
    "--kube-api-burst",
    type=click.IntRange(min=0),
    default=None,
    help="Their API request burst (0: their defaults, 30 and 100).",
)
@click.option(
    "--prometheus/--no-prometheus",
    default=None,
    help="Run Prometheus (Debian's) beside the cluster on 127.0.0.1:9090, scraping sro's exporters and "
    "evaluating sro's alert rules; --no-prometheus stops it. Kept until changed (default: as before).",
)
def up(
    hollow_nodes: int | None,
    hollow_config: Path | None,
    kube_api_qps: int | None,
    kube_api_burst: int | None,
    prometheus: bool | None,
) -> None:
    """Start the cluster (idempotent: a running healthy cluster is left as it is)."""
    config_text = None
    if hollow_config is not None:
        config_text = hollow_config.read_text()
        try:
            parse_config(config_text)
        except HollowConfigError as e:
            raise click.BadParameter(str(e), param_hint="--hollow-config") from e
    cluster = LocalCluster.default()
    with steps("Bringing the local cluster up") as progress:
        limits = cluster.set_api_limits(kube_api_qps, kube_api_burst)
        if prometheus is not None:
            local_prometheus.choose(cluster.layout, prometheus, progress)
        cluster.ensure_up(progress)
        if limits.flags():
            progress(f"API rate limits: {limits.describe()}")
        if hollow_nodes is not None or config_text is not None:
            names = cluster.scale_hollow(hollow_nodes, config_text, progress)
            if names:
                progress(f"{len(names)} hollow nodes Ready: {_span(names)}")
        if local_prometheus.wanted(cluster.layout):
            progress(local_prometheus.describe(cluster.layout))
    click.echo('Ready. Use it with: eval "$(sro local env)"; kubectl get nodes')


def _span(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"


@local.command("hollow-config")
def hollow_config() -> None:
    """Print the default hollow node config (a start for --hollow-config)."""
    click.echo(DEFAULT_CONFIG, nl=False)


@local.command("rules-server", hidden=True)
@click.option(
    "--config", "config", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True
)
@click.option("--port", type=click.IntRange(1, 65535), default=Ports().hollow_rules, show_default=True)
def rules_server(config: Path, port: int) -> None:
    """The hollow nodes' failure rules for operand probes (started by `up --hollow-nodes`)."""
    from sro.local.rulesserver import serve

    serve(config, port)


@local.command("prometheus-targets", hidden=True)
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The file_sd file to keep current (its directory is created).",
)
@click.option("--port", type=click.IntRange(1, 65535), default=Ports().prometheus_targets, show_default=True)
def prometheus_targets(kubeconfig: Path, output: Path, port: int) -> None:
    """Keep the local Prometheus's file_sd targets current from the exporter Services' Endpoints
    (started by `up --prometheus`)."""
    import asyncio

    from sro.local.scrapetargets import watch

    try:  # the cluster's first `up --prometheus` has no directory yet: the loop starts before Prometheus
        output.absolute().parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise click.BadParameter(
            f"{output}: cannot create its directory ({e.strerror})", param_hint="'--output'"
        ) from e
    asyncio.run(watch(kubeconfig, output, port))


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
    hollow = cluster.hollow()
    nodes = hollow.nodes()
    if nodes:
        ready_hollow = hollow.ready_nodes()
        config = hollow.config()
        htable = Table(title=f"hollow nodes ({len(nodes)}; failure rules on port {hollow.rules_port()})")
        for col in ("node", "process", "kubelet port", "kernel / OS", "Ready"):
            htable.add_column(col, overflow="fold")
        for n in nodes:
            i = int(n.name.rsplit("-", 1)[1]) if n.name.rsplit("-", 1)[-1].isdigit() else 0
            system = config.system(i) if config.systems else None
            htable.add_row(
                n.name,
                f"[green]pid {n.pid}[/green]" if n.pid else "[red]dead[/red]",
                str(n.port),
                f"{system.kernel} / {system.os_id} {system.os_version}" if system else "",
                "yes" if n.name in ready_hollow else "[red]no[/red]",
            )
        out.print(htable)
    up = all(state == "running" for _, state, _ in rows)
    ready = up and cluster.node_ready()
    click.echo(f"node {cluster.node_name}: {'Ready' if ready else 'not ready'}")
    sys.exit(0 if ready else 3)


@local.command()
@click.argument("component")
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="Wait until its health check passes again (the same check `sro local status` makes).",
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=restarts.GRACE,
    show_default=True,
    help="Seconds between SIGTERM and SIGKILL.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=restarts.HEALTH_TIMEOUT,
    show_default=True,
    help="Seconds to wait for it to be healthy (exit 1 after that, with its log's end).",
)
def restart(component: str, wait: bool, grace: float, timeout: float) -> None:
    """Stop one daemon of the running cluster by pid and start it again with the flags `up` gives it.

    COMPONENT: etcd, containerd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet or
    kube-proxy (as `sro local status` names them). Running containers are kept (kubelet, containerd);
    clients reconnect (kube-apiserver, etcd). One line per step, with its time; exit 2 when the
    component is unknown or not running, 1 when it does not come back healthy.
    """
    cluster = LocalCluster.default()
    try:
        comp = restarts.find(cluster.components(), component)
        restarts.check(component, supervisor.running(cluster.layout, component) is not None)
    except restarts.RestartRefused as e:
        click.echo(f"error: {e}", err=True)  # one line, however narrow the terminal
        sys.exit(2)
    with steps(f"Restarting {component}") as progress:
        try:
            restarts.restart(cluster.layout, comp, progress, wait=wait, grace=grace, health_timeout=timeout)
        except TimeoutError as e:
            raise ClusterError(str(e)) from e


@local.command()
def env() -> None:
    """Print shell exports for using the local cluster: eval "$(sro local env)"."""
    cluster = LocalCluster.default()
    click.echo(f"export KUBECONFIG={cluster.kubeconfig}")
    click.echo(f"export PATH={cluster.layout.bin}:$PATH")
    if local_prometheus.wanted(cluster.layout):  # sro report and sro status ask it with no flag
        click.echo(f"export PROMETHEUS_URL={local_prometheus.url(cluster.layout)}")


@local.command()
def image() -> None:
    """Build the sro image (only if the project changed) and import it into the local containerd."""
    from sro.local.images import ensure_sro_image, glibc_image

    with steps("Building the sro image") as progress:
        cluster = LocalCluster.default()
        if not cluster.layout.containerd_socket.exists():
            raise ClusterError("containerd of the local cluster is not running: run `sro local up` first")
        name = ensure_sro_image(cluster, progress)
        glibc_image(cluster.layout, progress)  # a base image added after clusters that are still up
    click.echo(name)
