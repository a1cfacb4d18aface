"""`sro device-plugin`: the kubelet device plugin for one recipe's hardware.

Thin: options in, a `lifecycle.Plugin` run until SIGTERM/SIGINT. `--oneshot` prints what the plugin
would announce (resources, ids, health, topology) as JSON and exits: the dry run for goldens and
for a quick look at a node.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from pathlib import Path

import click

from sro.console.options import load_recipe, recipe_options
from sro.devices import open_backend
from sro.devices.health import HealthTracker
from sro.host import podresources
from sro.node import signals
from sro.node.deviceplugin import announcing
from sro.node.deviceplugin.config import ConfigError
from sro.node.deviceplugin.core import HealthBoard
from sro.node.deviceplugin.lifecycle import Plugin, load_config
from sro.node.deviceplugin.reporting import HealthReporter
from sro.node.deviceplugin.server import DEFAULT_PLUGIN_DIR

log = logging.getLogger(__name__)
BACKEND_RETRY = 10.0


@click.command("device-plugin")
@recipe_options(default="nvidia-gpu")
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path, dir_okay=False), help="Plugin config (YAML)."
)
@click.option("--resource-name", help="Announce under this resource name instead of the recipe's.")
@click.option("--plugin-dir", type=click.Path(path_type=Path), default=DEFAULT_PLUGIN_DIR, show_default=True)
@click.option(
    "--driver-root", type=click.Path(path_type=Path), help="Where this process sees the driver root."
)
@click.option(
    "--dev-root",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("/dev"),
    show_default=True,
    help="Where this process sees the host's /dev (the devnodes backend's devices are its nodes).",
)
@click.option(
    "--ready-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Exists while every resource is registered with the kubelet (a readiness probe tests it).",
)
@click.option(
    "--node-name",
    envvar="NODE_NAME",
    default="",
    help="This node's name: finds its runtime in runtimes.yaml beside --config (env NODE_NAME).",
)
@click.option(
    "--health-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Write this node's device health report (<recipe>.json: faults, holders, boot) here, for "
    "discovery to publish in the NodeFeature (the DaemonSet passes /var/lib/sro/health).",
)
@click.option(
    "--pod-resources-socket",
    type=click.Path(path_type=Path, dir_okay=False),
    default=podresources.DEFAULT_SOCKET,
    show_default=True,
    help="The kubelet's pod-resources socket: which pods hold each device, for the health report.",
)
@click.option("--oneshot", is_flag=True, help="Print what would be announced as JSON and exit.")
def device_plugin(
    recipe_name: str,
    recipe_file: Path | None,
    config_path: Path | None,
    resource_name: str | None,
    plugin_dir: Path,
    driver_root: Path | None,
    dev_root: Path,
    ready_file: Path | None,
    node_name: str,
    health_dir: Path | None,
    pod_resources_socket: Path,
    oneshot: bool,
) -> None:
    """Serve the kubelet device-plugin API (v1beta1) for a recipe's devices.

    Started before its driver (a DaemonSet next to the driver's), it waits for it, saying so once
    in the log and retrying, and is not ready (--ready-file absent) until it has registered its
    resources with the kubelet. With --oneshot, no driver is an error (exit 1).
    """
    recipe = load_recipe(recipe_name, recipe_file)
    if oneshot:
        try:
            backend = open_backend(recipe, driver_root, dev_root=dev_root)
        except Exception as e:  # e.g. NVML's library or driver missing
            raise click.ClickException(f"{recipe.backend} backend unavailable: {e}") from e
        try:
            config = load_config(config_path, recipe, resource_name, node_name)
        except ConfigError as e:
            raise click.ClickException(str(e)) from e
        try:
            inv = backend.inventory()
        except Exception as e:  # no driver yet, a device that does not answer: say which, once
            raise click.ClickException(f"{recipe.backend} backend: {e}") from e
        try:
            plans = announcing.plan(inv, config)
        except ConfigError as e:
            raise click.ClickException(str(e)) from e
        board = HealthBoard(HealthTracker(config.ignored_xids, config.recover_after, config.health_enabled))
        stop = threading.Event()

        def drain() -> None:  # the backend reports active faults first; take what it has now
            for ev in backend.events(stop):
                board.apply(ev)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        reader.join(timeout=0.5)
        stop.set()
        reader.join(timeout=2)
        board.tick()
        out = {
            "backend": backend.name,
            "simulated": inv.simulated,
            "driverVersion": inv.driver_version,
            "resources": {
                p.resource: [
                    {
                        "id": a.id,
                        "healthy": board.healthy(a.unit),
                        "unit": a.unit.uuid,
                        "index": a.unit.index,
                        "numa": a.unit.numa_node,
                    }
                    for a in p.devices
                ]
                for p in plans
            },
        }
        click.echo(json.dumps(out, indent=2))
        backend.close()
        return

    stop = threading.Event()
    plugin: Plugin | None = None

    def on_stop() -> None:
        log.info("stopping (SIGTERM or SIGINT)")
        stop.set()

    def on_hangup() -> None:
        if plugin is not None:
            plugin.request_restart()

    signals.route({signal.SIGTERM: on_stop, signal.SIGINT: on_stop, signal.SIGHUP: on_hangup})
    # the driver may still be installing (a driver container starts next to us): wait for it
    last = ""
    while True:
        try:
            backend = open_backend(recipe, driver_root, dev_root=dev_root)
            break
        except Exception as e:
            message = f"{recipe.backend} backend unavailable (retrying every {BACKEND_RETRY:.0f}s): {e}"
            log.log(logging.ERROR if message != last else logging.DEBUG, "%s", message)
            last = message
            if stop.wait(BACKEND_RETRY):
                return
    reporter = None
    if health_dir is not None:
        reporter = HealthReporter(
            health_dir,
            recipe.name,
            node_name,
            driver_root or Path(recipe.driver_root),
            lambda: podresources.list_assignments(pod_resources_socket),
        )
    plugin = Plugin(
        recipe,
        backend,
        plugin_dir,
        config_path,
        resource_name,
        driver_root,
        ready_file=ready_file,
        node_name=node_name,
        reporter=reporter,
    )
    log.info(
        "sro device plugin: recipe %s (%s backend), kubelet dir %s", recipe.name, backend.name, plugin_dir
    )
    plugin.run(stop)
