"""`sro operator`: run the special resource operator (in a Deployment, or from a shell for development).

Leader election first (unless disabled), then kopf with our registry; losing the lease stops the
process (exit 1) so that the Deployment restarts it as a standby and only one replica ever acts.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys

import click

from sro.api.names import IMAGE, NAMESPACE

log = logging.getLogger("sro.operator")
LEASE_NAME = "sro-operator"


async def _run(namespace: str, image: str, metrics_port: int, health_port: int, elect: bool) -> int:
    import kopf

    from sro.kube.client import async_client, async_http, count_requests, lightkube_http
    from sro.operator.cluster.cache import ClusterCache
    from sro.kube.leases import LeaderElection
    from sro.operator.cluster.specialresources import SpecialResourceIO
    from sro.operator import metrics
    from sro.operator.handlers import Operator, build_registry
    from sro.operator.nfd_handlers import register as register_nodefeaturerules
    from sro.operator.openshift_handlers import register as register_openshift

    client = async_client()
    if metrics_port:
        metrics.serve(metrics_port)
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    election = LeaderElection(client, namespace, LEASE_NAME, identity)
    if elect:
        # a standby is healthy too: answer the liveness probe until kopf takes the port over
        standby = await _standby_health(health_port) if health_port else None
        try:
            await election.acquire()
        finally:
            if standby is not None:
                standby.close()
                await standby.wait_closed()
    metrics.LEADER.set(1)
    http = async_http()
    for counted in (http, lightkube_http(client)):
        count_requests(counted, lambda verb, resource: metrics.API_REQUESTS.labels(verb, resource).inc())
    cache = ClusterCache(http, namespace)
    op = Operator(SpecialResourceIO(client, cache, namespace, image))
    stop = asyncio.Event()
    watching = asyncio.create_task(cache.run())
    running = asyncio.create_task(
        kopf.operator(
            registry=register_openshift(
                register_nodefeaturerules(build_registry(op), client, cache), client, namespace
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
