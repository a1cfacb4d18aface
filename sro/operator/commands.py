"""`sro operator`, `sro status` and `sro upgrade`: the operator's commands.

`sro operator` runs the special resource operator (in a Deployment, or from a shell for
development): leader election first (unless disabled), then kopf with our registry; losing the lease
stops the process (exit 1) so that the Deployment restarts it as a standby and only one replica ever
acts. `sro status` prints every SpecialResource, then where each node stands, as tables
(`sro.operator.status_table`). `sro upgrade status|pause|resume|retry` shows and steers the driver
rollout: each node's upgrade state and step times live on the Node (label
`sro.dev/<sr>.upgrade-state`, annotation `sro.dev/<sr>.upgrade`), written by the operator, so the
table is right even while the operator restarts; `pause`/`resume` set the SpecialResource's
`spec.driver.upgradePolicy.paused`; `retry` puts a failed node back to `upgrade-required`, which is
all the operator needs to try it again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from sro.api.names import (
    IMAGE,
    NAMESPACE,
    OPERATOR_LEASE,
    STATE_NAMES,
    upgrade_annotation,
    upgrade_state_label,
)
from sro.operator.observed import NodeInfo, SpecialResourceInfo
from sro.operator.status_table import SHORT, node_rows, quota_rows, summary_rows, upgrade_rows
from sro.operator.upgrade.record import FAILED, UPGRADE_REQUIRED, Record

if TYPE_CHECKING:
    from sro.kube.objects import Objects

log = logging.getLogger("sro.operator")
LEASE_NAME = OPERATOR_LEASE
KUBECONFIG = click.option(
    "--kubeconfig", default=None, help="Default: $KUBECONFIG, in-cluster, ~/.kube/config."
)
SR_OPTION = click.option("--sr", "sr_name", default=None, help="The SpecialResource (default: the only one).")


async def _run(namespace: str, image: str, metrics_port: int, health_port: int, elect: bool) -> int:
    import kopf

    from sro.kube.client import async_client, async_http, count_requests, lean_transport, lightkube_http
    from sro.kube.leases import KubeLease, LeaderElection
    from sro.kube.objects import AsyncObjects
    from sro.operator import metrics
    from sro.operator.cluster.cache import ClusterCache
    from sro.operator.cluster.specialresources import SpecialResourceIO
    from sro.operator.handlers import Operator, build_registry
    from sro.operator.identity import replica_name, user_agent
    from sro.operator.nfd_handlers import register as register_nodefeaturerules
    from sro.operator.openshift_handlers import register as register_openshift

    # one name for this replica: the Lease's holderIdentity and every request's User-Agent
    identity = replica_name()
    agent = user_agent(identity)
    # requests go over sro.kube.http11's keep-alive pool (httpx's held a 1,000-node wave of node
    # patches to ~28 a second); the two watches stream over httpx's own
    transport = lean_transport()
    client = async_client(user_agent=agent, transport=transport)
    if metrics_port:
        metrics.serve(metrics_port)
    election = LeaderElection(KubeLease(client, namespace, LEASE_NAME), identity)
    stop = asyncio.Event()  # kopf's stop flag; SIGTERM/SIGINT set it until kopf handles them itself
    _stop_on_signals(stop)
    if elect:
        # a standby is healthy too: answer the liveness probe until kopf takes the port over
        standby = await _standby_health(health_port) if health_port else None
        try:
            await _until_stopped(election.acquire(), stop)
        finally:
            if standby is not None:
                standby.close()
                await standby.wait_closed()
        if stop.is_set():  # signalled while standing by, or as the lease came: hand back what we hold
            log.warning("stopping: signalled while standing by")
            await election.release()
            return 0
    metrics.LEADER.set(1)
    http = async_http(user_agent=agent)
    # the cache's node reads and patches go through the lightkube client's httpx (the pool above)
    writes = lightkube_http(client)
    for counted in (http, writes):
        count_requests(counted, lambda verb, resource: metrics.API_REQUESTS.labels(verb, resource).inc())
    cache = ClusterCache(http, namespace, writes=writes)
    io = SpecialResourceIO(client, cache, namespace, image)
    if elect:
        io.held = election.held  # each batch of a plan's writes is sent only while the lease is held
    op = Operator(io)
    watching = asyncio.create_task(cache.run())
    running = asyncio.create_task(
        kopf.operator(
            registry=register_openshift(
                register_nodefeaturerules(build_registry(op), AsyncObjects(client), cache), client, namespace
            ),
            standalone=True,
            # NFD's namespaced kinds are watched in our namespace; the SpecialResources are
            # cluster-scoped and watched whatever this says (Nodes and our pods: the cache)
            namespaces=[namespace],
            stop_flag=stop,
            liveness_endpoint=f"http://0.0.0.0:{health_port}/healthz" if health_port else None,
        )
    )
    tasks: set[asyncio.Task[None]] = {running}
    keeping = asyncio.create_task(election.keep()) if elect else None
    if keeping is not None:
        tasks.add(keeping)
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        if keeping is not None and keeping in done:
            stop.set()
            await running
            return 1
        return 0
    finally:
        watching.cancel()
        if keeping is not None:
            keeping.cancel()
        metrics.LEADER.set(0)
        if elect:
            await election.release()


def _stop_on_signals(stop: asyncio.Event) -> None:
    """SIGTERM and SIGINT set `stop`. Why: in its pod the operator is PID 1, and the kernel ignores a
    signal PID 1 has no handler for, so a standby replica waiting for the lease (before kopf installs
    its own handlers) ignored SIGTERM and was only stopped by SIGKILL at the end of its grace period:
    30 s of every `sro uninstall`, operator rollout and namespace delete."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


async def _until_stopped(work: Awaitable[None], stop: asyncio.Event) -> bool:
    """Run `work` until it finishes (True) or `stop` is set first (False; `work` is cancelled)."""
    from sro.kube.leases import run_until

    task = await run_until(work, stop.wait())
    if task.cancelled():
        return False
    task.result()  # its exception, if it failed
    return True


async def _standby_health(port: int) -> asyncio.Server:
    """`GET /healthz` -> 200 while this replica waits for the lease (kopf serves it once leading)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 8\r\n\r\nstandby\n")
        await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, "0.0.0.0", port)


@click.command("operator")
@click.option("--namespace", default=lambda: os.environ.get("POD_NAMESPACE", NAMESPACE), show_default=NAMESPACE,
              help="Where operands, validation pods and the lease live.")  # fmt: skip
@click.option("--image", default=lambda: os.environ.get("SRO_IMAGE", IMAGE), show_default=IMAGE,
              help="The image of every state that does not name its own.")  # fmt: skip
@click.option("--metrics-port", default=8080, show_default=True, help="Prometheus /metrics (0: off).")
@click.option("--health-port", default=8081, show_default=True, help="kopf's /healthz (0: off).")
@click.option("--leader-election/--no-leader-election", default=True, show_default=True,
              help="Wait for the sro-operator Lease before acting (needed with more than one replica).")  # fmt: skip
def operator(namespace: str, image: str, metrics_port: int, health_port: int, leader_election: bool) -> None:
    """Run the special resource operator: walk every SpecialResource's states, node by node.

    For each SpecialResource (`kubectl get sr`), on every matching node, in order: driver →
    driver-validation → runtime → device-plugin → device-plugin-validation → feature-discovery;
    a state starts on a node only when the previous one is ready there (node label
    `sro.dev/<sr>.<state>=ready`). `sro install` runs it in the cluster; `sro status` shows the result.
    """
    logging.getLogger().setLevel(min(logging.getLogger().level, logging.INFO))
    logging.getLogger("kopf").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    sys.exit(asyncio.run(_run(namespace, image, metrics_port, health_port, leader_election)))


@click.command("status")
@click.argument("name", required=False)
@KUBECONFIG
@click.option("--logs/--no-logs", default=True, show_default=True, help="Show failing pods' log tails.")
@click.option(
    "--prometheus",
    default=None,
    help="Prometheus with the exporter's metrics, for a utilisation line per node "
    "(default: $PROMETHEUS_URL, else http://127.0.0.1:9090; nothing is shown when unreachable).",
)
def status(name: str | None, kubeconfig: str | None, logs: bool, prometheus: str | None) -> None:
    """SpecialResources and, for each, every matching node's state as a table.

    States in order: driver, driver-validation, runtime, device-plugin, device-plugin-validation,
    monitoring, feature-discovery. "ready" means the node carries sro.dev/<sr>.<state>=ready;
    "-" a disabled state. Exit status 0 when every
    SpecialResource shown is Ready, 3 otherwise.
    """
    from sro.kube.errors import Errors, api_message

    try:
        _, srs, nodes = _read(kubeconfig, name)
    except Errors as e:
        message = api_message(e)
        if message is None:
            raise
        raise click.ClickException(f"{message} (is sro installed? `sro install`)") from e
    console = Console() if sys.stdout.isatty() else Console(width=160)  # logs and pipes: no wrapping
    if not srs:
        click.echo("No SpecialResources. Apply one (see examples/) after `sro install`.")
        sys.exit(3)
    table = Table(title="SpecialResources")
    for col in ("name", "recipe", "resource", "ready", "nodes", "validated", "detail"):
        table.add_column(col)
    for row in summary_rows(srs):
        table.add_row(*row)
    console.print(table)
    for sr in srs:
        t = Table(title=f"{sr.name}: nodes")
        for col in ("node", *(SHORT[s] for s in STATE_NAMES), "detail"):
            t.add_column(col)
        for row in node_rows(sr, nodes):
            t.add_row(*row)
        console.print(t)
        quotas = sr.status.get("quotas") or []
        if quotas:
            q = Table(title=f"{sr.name}: quotas (spec.partitioning.quotas)")
            for col in ("namespace", "resource", "used / hard", "note"):
                q.add_column(col)
            for row in quota_rows(quotas):
                q.add_row(*row)
            console.print(q)
        if logs:
            for row in sr.status.get("nodes") or ():
                if row.get("log"):
                    console.print(f"[bold]{row['name']}[/bold] {row.get('failing')} log tail:")
                    console.print(row["log"].rstrip(), markup=False, highlight=False)
    from sro.report.summary import utilisation_lines

    for line in utilisation_lines(prometheus):
        console.print(line, markup=False, highlight=False)
    sys.exit(0 if all(sr.status.get("ready") == "True" for sr in srs) else 3)


def pick(srs: Sequence[SpecialResourceInfo], name: str | None) -> SpecialResourceInfo:
    if name:
        found = [s for s in srs if s.name == name]
        if not found:
            raise click.ClickException(
                f"no SpecialResource {name!r}; there are: {', '.join(s.name for s in srs) or 'none'}"
            )
        return found[0]
    if len(srs) == 1:
        return srs[0]
    if not srs:
        raise click.ClickException("no SpecialResources; apply one first (see examples/)")
    raise click.ClickException(
        f"several SpecialResources: give --sr, one of {', '.join(s.name for s in srs)}"
    )


def _read(
    kubeconfig: str | None, name: str | None = None
) -> tuple[Objects, list[SpecialResourceInfo], list[NodeInfo]]:
    """The SpecialResources (one, or all) and every Node, and the requests to change them with."""
    from sro.kube.client import sync_client
    from sro.kube.objects import Objects
    from sro.operator.cluster.specialresources import read_for_status

    objects = Objects(sync_client(kubeconfig))
    srs, nodes = read_for_status(objects, name)
    return objects, srs, nodes


@click.group("upgrade")
def upgrade() -> None:
    """Driver upgrades: see the rollout, pause or resume it, retry a failed node.

    A change of spec.driver (version, imageTemplate, devicesConfig, image, args) rolls over the
    nodes one at a time (spec.driver.upgradePolicy): upgrade-required → cordoned → waiting-for-jobs →
    pods-evicted → driver-replaced → validated → uncordoned → done, or failed with the reason. A
    failed node stops the rollout until it is retried.
    """


@upgrade.command("status")
@SR_OPTION
@KUBECONFIG
def upgrade_status(sr_name: str | None, kubeconfig: str | None) -> None:
    """The rollout and every node's upgrade as a table. Exit 0 when no node is failed, 3 otherwise."""
    _, srs, nodes = _read(kubeconfig)
    sr = pick(srs, sr_name)
    summary = sr.status.get("driverUpgrade") or {}
    console = Console() if sys.stdout.isatty() else Console(width=160)
    counts = (
        ", ".join(f"{k} {v}" for k, v in sorted((summary.get("nodes") or {}).items())) or "no node upgrading"
    )
    click.echo(
        f"{sr.name}: driver {summary.get('target') or sr.spec.get('driver', {}).get('version') or 'default'}; {counts}"
    )
    if summary.get("blocked"):
        click.echo(f"blocked: {summary['blocked']}")
    rows = upgrade_rows(sr, nodes)
    table = Table(title=f"{sr.name}: driver upgrades")
    for col in ("node", "state", "driver", "steps", "reason"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    sys.exit(3 if any(r[1] == FAILED for r in rows) else 0)


def _set_paused(sr_name: str | None, kubeconfig: str | None, paused: bool) -> None:
    objects, srs, _ = _read(kubeconfig)
    sr = pick(srs, sr_name)
    objects.merge_patch(
        "SpecialResource", sr.name, {"spec": {"driver": {"upgradePolicy": {"paused": paused}}}}
    )
    if paused:
        click.echo(f"{sr.name}: driver upgrades paused; no node starts (one past its evictions finishes)")
    else:
        click.echo(f"{sr.name}: driver upgrades resumed")


@upgrade.command("pause")
@SR_OPTION
@KUBECONFIG
def pause(sr_name: str | None, kubeconfig: str | None) -> None:
    """Start no further node (sets spec.driver.upgradePolicy.paused: true)."""
    _set_paused(sr_name, kubeconfig, True)


@upgrade.command("resume")
@SR_OPTION
@KUBECONFIG
def resume(sr_name: str | None, kubeconfig: str | None) -> None:
    """Go on with the rollout (sets spec.driver.upgradePolicy.paused: false)."""
    _set_paused(sr_name, kubeconfig, False)


@upgrade.command("retry")
@click.argument("node")
@SR_OPTION
@KUBECONFIG
def retry(node: str, sr_name: str | None, kubeconfig: str | None) -> None:
    """Try a failed NODE again: it goes back to upgrade-required and the rollout goes on."""
    objects, srs, nodes = _read(kubeconfig)
    sr = pick(srs, sr_name)
    found = next((n for n in nodes if n.name == node), None)
    if found is None:
        raise click.ClickException(f"no node {node!r}")
    ann = upgrade_annotation(sr.name)
    rec = Record.from_json(found.annotations.get(ann, ""))
    if rec is None or rec.state != FAILED:
        state = rec.state if rec else "not upgrading"
        raise click.ClickException(f"node {node} is {state}, not failed: nothing to retry")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    reason = f"retried after: {rec.reason[:200]}"
    again = Record(UPGRADE_REQUIRED, rec.from_rev, rec.to_rev, {UPGRADE_REQUIRED: now}, rec.cordoned, reason)
    body = {
        "metadata": {
            "labels": {upgrade_state_label(sr.name): UPGRADE_REQUIRED},
            "annotations": {ann: again.to_json()},
        }
    }
    objects.merge_patch("Node", node, body)
    click.echo(f"node {node}: back to {UPGRADE_REQUIRED}; the operator starts it when the limits allow")
