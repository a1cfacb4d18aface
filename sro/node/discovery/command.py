"""`sro discover`: print this node's feature labels, or keep its Node labelled (a daemon).

Thin glue: parse options, run a pass (`discover`), then print or hand the labels to the publisher.
The daemon never exits on bad input: an invalid config, an odd sysfs entry or an API server that
went away is a warning naming the field, path or server, and the next pass comes anyway.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click
import yaml

from sro.host.reading import Problem, Recording
from sro.host.root import HostRoot
from sro.node.discovery.config import Config, parse_config, parse_duration
from sro.node.discovery.labeling import Labeling, build_labels, keep_stale
from sro.node.discovery.sources import SOURCE_NAMES, SOURCES, scan

if TYPE_CHECKING:
    from sro.node.discovery.publishing import NodeApi

log = logging.getLogger("sro.discover")


def discover(host: HostRoot, config: Config, recording: Recording | None = None) -> Labeling:
    """One full discovery pass: every enabled source, then labeling."""
    return build_labels(scan(host, config, SOURCES, recording), config, SOURCES)


class ConfigLoader:
    """The worker config file, re-read when it changes (a ConfigMap update needs no restart)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._config = Config()

    def load(self) -> Config:
        if self.path is None:
            return self._config
        try:
            st = self.path.stat()
            stamp = (st.st_ino, st.st_mtime_ns)
            if stamp != self._stamp:
                self._config = parse_config(self.path.read_text(), str(self.path))
                self._stamp = stamp
        except OSError as e:
            if self._stamp != (0, 0):
                self._config = Config(
                    problems=(Problem(str(self.path), f"unreadable ({e.strerror}); defaults"),)
                )
                self._stamp = (0, 0)
        return self._config


def _report(labeling: Labeling, seen: set[str]) -> set[str]:
    """Log problems and warnings once each until they go away (a daemon must not spam)."""
    now = set()
    for p in (*labeling.problems, *labeling.warnings):
        msg = str(p)
        now.add(msg)
        if msg not in seen:
            log.warning("%s", msg)
    return now


def _render(labels: dict[str, str], output: str) -> str:
    if output == "json":
        return json.dumps(labels, indent=2, sort_keys=True)
    if output == "yaml":
        return yaml.safe_dump(labels, sort_keys=True, default_flow_style=False).rstrip()
    return "\n".join(f"{k}={v}" for k, v in sorted(labels.items()))


def run_daemon(
    host: HostRoot,
    loader: ConfigLoader,
    node_name: str,
    api_factory: Callable[[], NodeApi],
    *,
    oneshot: bool,
    stop: threading.Event,
    interval: float | None = None,
) -> int:
    from sro.node.discovery.publishing import Backoff, Publisher, wait

    publisher: Publisher | None = None
    backoff = Backoff(cap=30.0)
    seen: set[str] = set()
    while True:
        config = loader.load()
        labeling = discover(host, config)
        seen = _report(labeling, seen)
        every = config.sleep_interval if interval is None else interval
        delay = every
        try:
            if publisher is None:
                publisher = Publisher(api_factory(), node_name)
            if config.no_publish:
                log.info(
                    "core.noPublish is set: %d label(s) discovered, none published", len(labeling.labels)
                )
            else:
                publisher.publish(labeling.labels, keep=keep_stale(labeling, SOURCE_NAMES))
            backoff.reset()
        except Exception as e:  # API server away, bad kubeconfig, RBAC: warn, keep running
            delay = min(backoff.next(), every) if every > 0 else backoff.next()
            log.warning("publishing labels to node %s failed: %s; retrying in %gs", node_name, e, delay)
            publisher = None  # a fresh client next time: re-reads a rotated service-account token
            if oneshot:
                return 1
        if oneshot:
            return 0
        if wait(stop, delay):
            return 0


@click.command("discover")
@click.option(
    "--host-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/"),
    show_default=True,
    help="Where the node's / is mounted (the DaemonSet uses /host).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="NFD worker config (YAML: core.labelWhiteList, sources.pci.deviceClassWhitelist, ...).",
)
@click.option(
    "--output",
    "-o",
    type=click.Choice(["labels", "json", "yaml"]),
    default="labels",
    show_default=True,
    help="Format of the printed labels.",
)
@click.option("--features", is_flag=True, help="Print the raw features (JSON) instead of labels.")
@click.option("--publish", is_flag=True, help="Label this node's Node object, re-scanning every interval.")
@click.option("--oneshot", is_flag=True, help="With --publish: publish once and exit.")
@click.option("--cleanup", is_flag=True, help="Remove every label sro published on the node, then exit.")
@click.option("--node-name", envvar="NODE_NAME", help="The Node to label [default: $NODE_NAME].")
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False),
    envvar="KUBECONFIG",
    help="Kubeconfig [default: $KUBECONFIG, else in-cluster].",
)
@click.option("--sleep-interval", help="Override core.sleepInterval (e.g. 60s, 10s).")
def discover_command(
    host_root: Path,
    config_path: Path | None,
    output: str,
    features: bool,
    publish: bool,
    oneshot: bool,
    cleanup: bool,
    node_name: str | None,
    kubeconfig: str | None,
    sleep_interval: str | None,
) -> None:
    """Discover this node's features; print NFD-compatible labels or publish them on its Node."""
    host = HostRoot.at(host_root)
    if config_path is not None and not config_path.exists() and not publish:
        raise click.BadParameter(f"{config_path}: no such file", param_hint="--config")
    loader = ConfigLoader(config_path)
    interval = None
    if sleep_interval is not None:
        try:
            interval = parse_duration(sleep_interval)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--sleep-interval") from e

    if publish or cleanup:
        if not node_name:
            raise click.UsageError("--node-name (or $NODE_NAME) is required to publish or clean up")

        def api_factory() -> NodeApi:
            from sro.kube.client import sync_client
            from sro.kube.nodes import NodeLabels

            return NodeLabels(sync_client(kubeconfig, timeout=15))

        if cleanup:
            from sro.node.discovery.publishing import Publisher

            p = Publisher(api_factory(), node_name).cleanup()
            click.echo(f"node {node_name}: removed {len(p.remove_labels)} label(s)")
            return
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one GET per pass is not news
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        log.info(
            "discovering features of node %s every %s", node_name, sleep_interval or "core.sleepInterval"
        )
        sys.exit(
            run_daemon(host, loader, node_name, api_factory, oneshot=oneshot, stop=stop, interval=interval)
        )

    config = loader.load()
    if features:
        results = scan(host, config)
        click.echo(json.dumps({r.source: r.features.as_dict() for r in results}, indent=2))
        return
    labeling = discover(host, config)
    for problem in (*labeling.problems, *labeling.warnings):
        click.echo(f"warning: {problem}", err=True)
    text = _render(dict(labeling.labels), output)
    if text:
        click.echo(text)
