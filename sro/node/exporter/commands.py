"""`sro exporter`: Prometheus metrics of a recipe's devices, with dcgm-exporter's names and labels.

Thin: options in, a `Collector` (sources → snapshot every `--interval`) and a `MetricsServer` (the
snapshot's bytes at `/metrics`) run until SIGTERM/SIGINT; SIGUSR1 collects at once. `--once` is the
dry run: one collection printed as exposition text (or written to `--output`), for goldens and for
a quick look at a node.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import click

from sro.api.recipes import SIMULATED_DEVICE_LIST, Recipe
from sro.console.options import load_recipe, recipe_options
from sro.devices import driverstate
from sro.devices.model import Backend, DeviceUUID
from sro.devices.telemetry import Telemetry
from sro.host import podresources
from sro.host.podresources import Assignment
from sro.node import signals
from sro.node.exporter import nodefacts
from sro.node.exporter.collecting import (
    CONFIG,
    DEVICES,
    BackendOpener,
    Collector,
    NodeReader,
    PodLister,
    ResetsReader,
)
from sro.node.exporter.recipeview import NoReadings, view_of
from sro.node.exporter.serving import MetricsServer, parse_address

log = logging.getLogger(__name__)

PRIME_SECONDS = 0.3  # the simulated backend reports active faults at once; NVML has no history
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_interval(text: str) -> float:
    """'30s', '500ms', '2m', '1h' or plain seconds; at least 100 ms."""
    m = _DURATION.match(text.strip())
    if not m:
        raise click.BadParameter(f"{text!r}: expected a duration such as 30s, 500ms or 2m")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds < 0.1:
        raise click.BadParameter(f"{text!r}: at least 100ms")
    return seconds


def backend_opener(recipe: Recipe, driver_root: Path | None, seed: str) -> BackendOpener:
    telemetry = view_of(recipe).telemetry

    def open_devices() -> tuple[Backend, Telemetry]:
        from sro.devices import open_backend
        from sro.devices.telemetry import open_telemetry

        backend = open_backend(recipe, driver_root)
        # health only: no readings asked for (a devnodes backend has none to give)
        return backend, open_telemetry(backend, seed) if telemetry else NoReadings()

    return open_devices


def resets_reader(recipe: Recipe, driver_root: Path | None) -> ResetsReader:
    """The reset counts of sro's simulated driver (either personality: simulated-gpu, a simulated
    device class, the simulated NVIDIA driver behind nvidia-gpu), found by its device list under the
    driver root at each collection (it may be installed after the exporter starts). On real hardware
    (nvml on a real driver, devnodes) no one counts resets, so None: the series is left out."""
    root = driver_root or Path(recipe.driver_root)

    def read() -> Mapping[DeviceUUID, int] | None:
        if recipe.backend == "devnodes" or not (root / SIMULATED_DEVICE_LIST).is_file():
            return None
        return driverstate.read_resets(root)

    return read


def node_reader(node_name: str, domain: str, srs: tuple[str, ...]) -> NodeReader:
    """Reads this Node through sro/kube/ (a `get`); where the API is is found on first use and kept."""
    from sro.kube.nodestatus import ApiAccess, api_access, read_node_status

    access: list[ApiAccess] = []

    def read() -> nodefacts.NodeFacts:
        if not access:
            access.append(api_access())
        status = read_node_status(access[0], node_name)
        return nodefacts.facts(status.labels, status.allocatable, domain, srs)

    return read


def pod_lister(path: Path) -> PodLister:
    def list_pods() -> list[Assignment]:
        return podresources.list_assignments(path)

    return list_pods


@click.command("exporter")
@recipe_options(default="nvidia-gpu")
@click.option(
    "--driver-root", type=click.Path(path_type=Path), help="Where this process sees the driver root."
)
@click.option(
    "--pod-resources-socket",
    type=click.Path(path_type=Path),
    default=podresources.DEFAULT_SOCKET,
    show_default=True,
    help="The kubelet's pod-resources socket (pod, namespace and container labels).",
)
@click.option(
    "--node-name",
    envvar="NODE_NAME",
    default="",
    help="This node ($NODE_NAME): Hostname label, allocatable and stack state from the Node.",
)
@click.option(
    "--sr",
    "srs",
    multiple=True,
    help="SpecialResource whose states to report even before the node has its labels (repeatable).",
)
@click.option("--address", default=":9400", show_default=True, help="[HOST]:PORT to serve /metrics on.")
@click.option("--interval", default="30s", show_default=True, help="How often to collect (30s, 500ms, 2m).")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Health policy (the `health` section of a device-plugin config file; re-read when it changes).",
)
@click.option(
    "--ready-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Exists while /metrics serves (written after the first collection; a readiness probe tests it).",
)
@click.option("--seed", default="sro", show_default=True, help="Seed of the simulated readings' noise.")
@click.option("--once", is_flag=True, help="Collect once, print the exposition text and exit.")
@click.option(
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="With --once: write the text to this file instead of stdout.",
)
def exporter(
    recipe_name: str,
    recipe_file: Path | None,
    driver_root: Path | None,
    pod_resources_socket: Path,
    node_name: str,
    srs: tuple[str, ...],
    address: str,
    interval: str,
    config_path: Path | None,
    ready_file: Path | None,
    seed: str,
    once: bool,
    output: Path | None,
) -> None:
    """Serve Prometheus metrics of a recipe's devices (dcgm-exporter's names and labels), per pod."""
    recipe = load_recipe(recipe_name, recipe_file)
    seconds = parse_interval(interval)
    try:
        bind = parse_address(address)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e
    if output is not None and not once:
        raise click.UsageError("--output goes with --once")
    domain = recipe.resource.partition("/")[0]
    collector = Collector(
        backend_opener(recipe, driver_root, seed),
        domain=domain,
        hostname=node_name or socket.gethostname(),
        simulated=recipe.simulated,
        list_pods=pod_lister(pod_resources_socket),
        read_node=node_reader(node_name, domain, srs) if node_name else None,
        config_path=config_path,
        view=view_of(recipe),
        read_resets=resets_reader(recipe, driver_root),
    )
    if once:
        collector.prime(PRIME_SECONDS)
        text = collector.collect().text
        collector.close()
        # the dry run fails on what the user gave (the devices, the config); the kubelet and the
        # Node are optional (their labels are left out, and the log says why)
        for source in (DEVICES, CONFIG):
            why = collector.problem(source)
            if why is not None:
                raise click.ClickException(f"{source} unavailable: {why}")
        if output is not None:
            try:
                output.write_bytes(text)
            except OSError as e:
                raise click.ClickException(f"cannot write {output}: {e.strerror}") from e
        else:
            sys.stdout.buffer.write(text)
            sys.stdout.flush()
        return
    _serve(collector, bind, seconds, recipe, ready_file)


def _mark_ready(ready_file: Path | None, ready: bool) -> None:
    """The readiness probe's file: there once /metrics serves a collection, gone when it stops.

    Why a file and not an HTTP probe: the kubelet probes on a fixed period from a random start, so
    an HTTP readiness probe saw a started exporter up to a whole period late; the exec check in the
    DaemonSet waits for this file and flips within 0.1 s of it (the liveness probe still asks /healthz).
    """
    if ready_file is None:
        return
    try:
        if ready:
            ready_file.write_text("ready\n")
        else:
            ready_file.unlink(missing_ok=True)
    except OSError as e:  # not fatal: /metrics serves all the same; the probe says not ready
        log.warning("ready file %s: %s", ready_file, e.strerror)


def _serve(
    collector: Collector, bind: tuple[str, int], interval: float, recipe: Recipe, ready_file: Path | None
) -> None:
    stop = threading.Event()

    def on_stop() -> None:
        log.info("stopping (SIGTERM or SIGINT)")
        stop.set()
        collector.request()

    signals.route({signal.SIGTERM: on_stop, signal.SIGINT: on_stop, signal.SIGUSR1: collector.request})
    _mark_ready(ready_file, False)  # one a restarted container left in its pod's emptyDir
    collector.prime(PRIME_SECONDS)
    collector.collect()

    def healthy() -> bool:
        return time.monotonic() - collector.snapshot.at < 3 * interval + 30

    try:
        server = MetricsServer(bind, lambda: collector.snapshot.text, healthy)
    except OSError as e:
        collector.close()
        raise click.ClickException(f"cannot serve on {bind[0] or '*'}:{bind[1]}: {e.strerror}") from e
    server.start()
    _mark_ready(ready_file, True)
    log.info(
        "sro exporter: recipe %s, serving :%d/metrics, collecting every %gs (pid %d; SIGUSR1 collects now)",
        recipe.name,
        server.port,
        interval,
        os.getpid(),
    )
    try:
        collector.run(stop, interval, immediately=False)
    finally:
        _mark_ready(ready_file, False)
        server.stop()
        collector.close()
