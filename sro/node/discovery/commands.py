"""`sro discover`: print this node's feature labels, or keep its Node labelled (a daemon).

Thin glue: parse options, run a pass (`discover`), then print or hand the labels to the publisher;
with the NodeFeature API on (`--enable-nodefeature-api` or `core.enableNodeFeatureApi`) the raw
features also go to the node's NodeFeature object, and with `--no-node-labels` (`core.noNodeLabels`,
as `sro install` configures it) the labels go there instead of on the Node, for the operator to
apply: the agent then only reads its Node (for the NodeFeature's owner reference) and never writes it.
The NodeFeature also carries the device plugins' health reports (`discovery/health.py`), republished
within about a second of one changing, between passes.
The daemon never exits on bad input: an invalid config, an odd sysfs entry or an API server that
went away is a warning naming the field, path or server, and the next pass comes anyway.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import yaml

from sro.api.names import NAMESPACE
from sro.devices.healthreport import HealthReport
from sro.host.reading import Problem, Recording
from sro.host.root import HostRoot
from sro.node import signals
from sro.node.discovery.config import Config, parse_config, parse_duration
from sro.node.discovery.custom import nfd_features
from sro.node.discovery.features import SourceResult
from sro.node.discovery.health import HealthWatch, health_dir, with_health
from sro.node.discovery.inputs import InputWatch
from sro.node.discovery.labeling import Labeling, build_labels, keep_stale
from sro.node.discovery.nodefeature import node_feature
from sro.node.discovery.sources import SOURCE_NAMES, SOURCES, scan

if TYPE_CHECKING:
    from sro.node.discovery.nodefeature import NodeFeatureApi
    from sro.node.discovery.publishing import NodeApi

log = logging.getLogger("sro.discover")


def discover(host: HostRoot, config: Config, recording: Recording | None = None) -> Labeling:
    """One full discovery pass: every enabled source, then labeling."""
    return build_labels(scan(host, config, SOURCES, recording), config, SOURCES)


@dataclass(frozen=True)
class Publishing:
    """Where a pass's results go: the Node's labels, the NodeFeature object, or both (options win
    over the config file's `core.enableNodeFeatureApi` / `core.noNodeLabels`)."""

    nodefeature_api: bool | None = None
    node_labels: bool | None = None
    namespace: str = NAMESPACE

    def resolve(self, config: Config) -> tuple[bool, bool]:
        """(write the NodeFeature, label the Node)."""
        api = config.enable_nodefeature_api if self.nodefeature_api is None else self.nodefeature_api
        labels = (not config.no_node_labels) if self.node_labels is None else self.node_labels
        return api, labels or not api  # without the NodeFeature the labels can only go on the Node


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


def labeling_node_name(results: tuple[SourceResult, ...]) -> str:
    """The node's name as discovery found it (`system.name`), for a dry run without --node-name."""
    for r in results:
        name = r.features.attributes.get("name", {}).get("nodename") if r.source == "custom" else None
        if name:
            return name
    return "localhost"


def _render(labels: dict[str, str], output: str) -> str:
    if output == "json":
        return json.dumps(labels, indent=2, sort_keys=True)
    if output == "yaml":
        return yaml.safe_dump(labels, sort_keys=True, default_flow_style=False).rstrip()
    return "\n".join(f"{k}={v}" for k, v in sorted(labels.items()))


def nodefeature_doc(
    node_name: str,
    namespace: str,
    results: tuple[SourceResult, ...],
    labeling: Labeling,
    *,
    with_labels: bool,
    node_uid: str = "",
    health: Sequence[HealthReport] = (),
) -> dict[str, Any]:
    """The node's NodeFeature: discovery's features, and the device plugins' health reports."""
    doc = node_feature(
        node_name, namespace, nfd_features(results), labeling.labels if with_labels else None, node_uid
    )
    return with_health(doc, health) if health else doc


class NodeFeatureStep:
    """The NodeFeature half of a pass; an absent CRD is said once and retried every pass."""

    def __init__(self, factory: Callable[[], NodeFeatureApi] | None) -> None:
        self.factory = factory
        self.missing_said = False

    def publish(self, doc: dict[str, Any]) -> None:
        from sro.kube.nodefeatures import NodeFeatureApiError
        from sro.node.discovery.nodefeature import NodeFeatureWriter

        if self.factory is None:
            return
        try:
            verb = NodeFeatureWriter(self.factory()).publish(doc)
        except NodeFeatureApiError as e:
            if not e.missing_crd:
                raise
            if not self.missing_said:
                log.warning("%s; the NodeFeature is retried every pass", e)
                self.missing_said = True
            return
        self.missing_said = False
        if verb != "unchanged":
            md = doc["metadata"]
            log.info("NodeFeature %s/%s %s", md["namespace"], md["name"], verb)


def run_daemon(
    host: HostRoot,
    loader: ConfigLoader,
    node_name: str,
    api_factory: Callable[[], NodeApi],
    *,
    oneshot: bool,
    stop: threading.Event,
    interval: float | None = None,
    publishing: Publishing = Publishing(),
    nodefeature_factory: Callable[[], NodeFeatureApi] | None = None,
) -> int:
    from sro.node.discovery.publishing import Backoff, Publisher

    publisher: Publisher | None = None
    backoff = Backoff(cap=30.0)
    seen: set[str] = set()
    nodefeatures = NodeFeatureStep(nodefeature_factory)
    health = HealthWatch(health_dir(host))
    inputs = InputWatch(host)
    while True:
        last_doc: dict[str, Any] | None = None  # this pass's NodeFeature without the reports
        inputs.before_pass()
        config = loader.load()
        results = inputs.scan(config, also=() if loader.path is None else (loader.path,))
        labeling = build_labels(results, config, SOURCES)
        seen = _report(labeling, seen)
        every = config.sleep_interval if interval is None else interval
        delay = every
        try:
            if publisher is None:
                publisher = Publisher(api_factory(), node_name)
            write_object, label_node = publishing.resolve(config)
            keep = keep_stale(labeling, SOURCE_NAMES)
            if config.no_publish:
                log.info(
                    "core.noPublish is set: %d label(s) discovered, none published", len(labeling.labels)
                )
            elif write_object:
                node = publisher.read()
                doc = nodefeature_doc(
                    node_name,
                    publishing.namespace,
                    results,
                    labeling,
                    with_labels=not label_node,
                    node_uid=node.uid,
                )
                last_doc = doc
                nodefeatures.publish(with_health(doc, health.reports()))
                if label_node:
                    publisher.publish(labeling.labels, keep=keep)
                # else: the labels are in the NodeFeature and the agent never writes the Node (its
                # default role may not): the operator applies them, and takes over any label an
                # earlier agent recorded as its own (sro.operator.nodefeaturerules)
            else:
                publisher.publish(labeling.labels, keep=keep)
            backoff.reset()
        except Exception as e:  # API server away, bad kubeconfig, RBAC: warn, keep running
            message = e.format_message() if isinstance(e, click.ClickException) else str(e)
            if oneshot:
                log.error("publishing labels to node %s failed: %s", node_name, message)
                return 1
            delay = min(backoff.next(), every) if every > 0 else backoff.next()
            log.warning("publishing labels to node %s failed: %s; retrying in %gs", node_name, message, delay)
            publisher = None  # a fresh client next time: re-reads a rotated service-account token
        if oneshot:
            return 0
        if _wait_republishing(stop, delay, health, nodefeatures, last_doc, node_name, inputs):
            return 0


def _wait_republishing(
    stop: threading.Event,
    delay: float,
    health: HealthWatch,
    nodefeatures: NodeFeatureStep,
    doc: dict[str, Any] | None,
    node_name: str,
    inputs: InputWatch,
) -> bool:
    """Wait out `delay` (0: until stopped), republishing the NodeFeature with the new reports
    whenever a device plugin's health report changes, and ending the wait at once (a pass now)
    when a file the last pass read changed (`inputs`); True when asked to stop."""
    deadline = time.monotonic() + delay if delay > 0 else None
    changed: list[str] = []  # what the last look found changed (logged, not looked up again)

    def look() -> bool:
        changed[:] = inputs.changed()
        return bool(changed)

    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        woke = health.wait(stop, left, also=look)
        if woke == "also":
            log.info("%s changed: a pass now", ", ".join(changed))
            return False
        if woke != "changed":
            return woke == "stop"
        if doc is None:  # no NodeFeature this pass (labels only, or the API failed): a pass now
            return False
        before = health.recipes
        reports = health.reports()
        if health.recipes != before or health.restarted:  # a plugin came, went or restarted: its
            return False  # devices' labels may change, a pass now
        try:
            nodefeatures.publish(with_health(doc, reports))
        except Exception as e:  # the next pass retries it
            log.warning("publishing node %s's health reports failed: %s", node_name, e)


@click.command("discover")
@click.option(
    "--host-root",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
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
    type=click.Choice(["labels", "json", "yaml", "nodefeature"]),
    default="labels",
    show_default=True,
    help="Format of the printed labels; nodefeature: the NodeFeature object --publish would write (YAML).",
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
@click.option(
    "--enable-nodefeature-api/--disable-nodefeature-api",
    "nodefeature_api",
    default=None,
    help="Also write the raw features as the node's NodeFeature object (nfd.k8s-sigs.io/v1alpha1), "
    "for NodeFeatureRules [default: core.enableNodeFeatureApi, false].",
)
@click.option(
    "--node-labels/--no-node-labels",
    "node_labels",
    default=None,
    help="--no-node-labels: with the NodeFeature API, put the labels in the NodeFeature for the operator "
    "to apply instead of labelling the Node [default: core.noNodeLabels, false].",
)
@click.option(
    "--nodefeature-namespace",
    envvar="POD_NAMESPACE",
    default=NAMESPACE,
    show_default=True,
    help="Namespace of the NodeFeature object [$POD_NAMESPACE].",
)
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
    nodefeature_api: bool | None,
    node_labels: bool | None,
    nodefeature_namespace: str,
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

    publishing = Publishing(nodefeature_api, node_labels, nodefeature_namespace)
    if publish or cleanup:
        if not node_name:
            raise click.UsageError("--node-name (or $NODE_NAME) is required to publish or clean up")

        def api_factory() -> NodeApi:
            from sro.kube.client import sync_client
            from sro.kube.nodes import NodeLabels

            return NodeLabels(sync_client(kubeconfig, timeout=15))

        def nodefeature_factory() -> NodeFeatureApi:
            from sro.kube.client import sync_client
            from sro.kube.nodefeatures import NodeFeatureClient

            return NodeFeatureClient(sync_client(kubeconfig, timeout=15))

        if cleanup:
            from sro.kube.nodes import NodeApiError
            from sro.node.discovery.publishing import Publisher

            try:
                p = Publisher(api_factory(), node_name).cleanup()
            except NodeApiError as e:
                raise click.ClickException(str(e)) from e
            click.echo(f"node {node_name}: removed {len(p.remove_labels)} label(s)")
            return
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one GET per pass is not news
        stop = threading.Event()
        if not oneshot:  # a one-shot pass keeps the default signals: SIGTERM ends it
            signals.route({signal.SIGTERM: stop.set, signal.SIGINT: stop.set})
        log.info(
            "discovering features of node %s every %s", node_name, sleep_interval or "core.sleepInterval"
        )
        sys.exit(
            run_daemon(
                host,
                loader,
                node_name,
                api_factory,
                oneshot=oneshot,
                stop=stop,
                interval=interval,
                publishing=publishing,
                nodefeature_factory=nodefeature_factory,
            )
        )

    config = loader.load()
    if features:
        results = scan(host, config)
        click.echo(json.dumps({r.source: r.features.as_dict() for r in results}, indent=2))
        return
    results = scan(host, config)
    labeling = build_labels(results, config, SOURCES)
    for problem in (*labeling.problems, *labeling.warnings):
        click.echo(f"warning: {problem}", err=True)
    if output == "nodefeature":
        node = node_name or labeling_node_name(results)
        _write_object, label_node = publishing.resolve(config)
        doc = nodefeature_doc(
            node,
            publishing.namespace,
            results,
            labeling,
            with_labels=not label_node,
            health=HealthWatch(health_dir(host)).reports(),
        )
        click.echo(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False).rstrip())
        return
    text = _render(dict(labeling.labels), output)
    if text:
        click.echo(text)
