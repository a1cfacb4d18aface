"""`sro discover` and the NodeFeature API: the object it writes, when it writes it, and with
`core.noNodeLabels` the labels in it and the Node never written; against in-memory fakes of the Node
and the NodeFeature store (the real API server: tests/e2e/test_nodefeaturerule.py)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from sro.cli import cli
from sro.host.root import HostRoot
from sro.kube.nodefeatures import NodeFeatureApiError
from sro.kube.nodes import NodeApiError, NodeMeta
from sro.node.discovery.commands import ConfigLoader, Publishing, run_daemon
from sro.node.discovery.config import Config, parse_config
from sro.node.discovery.custom import nfd_features
from sro.node.discovery.nodefeature import NodeFeatureWriter, differs, node_feature
from sro.node.discovery.publishing import OWNED_ANNOTATION, decode_owned
from sro.node.discovery.sources import scan
from tests.unit.test_discovery_publishing import FakeNodes

pytestmark = pytest.mark.timeout(30)

NFD = "feature.node.kubernetes.io/"
HOSTS = Path(__file__).resolve().parent.parent / "hosts"
GPU = HOSTS / "nvidia-8gpu" / "root"


class Nodes(FakeNodes):
    def read(self, name: str) -> NodeMeta:
        meta = super().read(name)
        return NodeMeta(meta.name, meta.labels, meta.annotations, meta.resource_version, uid="uid-n1")


class FakeNodeFeatures:
    """NodeFeature objects in memory; `crd` False: the kind is not served."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.crd = True
        self.writes = 0

    def _check(self) -> None:
        if not self.crd:
            raise NodeFeatureApiError("read NodeFeature: not served", missing_crd=True)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._check()
        return self.objects.get((namespace, name))

    def create(self, doc: Mapping[str, Any]) -> None:
        self._check()
        self.writes += 1
        self.objects[(doc["metadata"]["namespace"], doc["metadata"]["name"])] = {
            **doc,
            "metadata": {**doc["metadata"], "resourceVersion": "1"},
        }

    def replace(self, doc: Mapping[str, Any]) -> None:
        self._check()
        key = (doc["metadata"]["namespace"], doc["metadata"]["name"])
        assert doc["metadata"]["resourceVersion"] == self.objects[key]["metadata"]["resourceVersion"]
        self.writes += 1
        self.objects[key] = {**doc, "metadata": {**doc["metadata"], "resourceVersion": str(self.writes + 1)}}


def _host(tmp_path: Path) -> HostRoot:
    (tmp_path / "etc").mkdir(parents=True, exist_ok=True)
    (tmp_path / "etc/os-release").write_text("ID=debian\nVERSION_ID=12.4\n")
    return HostRoot.at(tmp_path)


def test_config_options_and_flags() -> None:
    c = parse_config("core: {enableNodeFeatureApi: true, noNodeLabels: true}")
    assert c.enable_nodefeature_api and c.no_node_labels and c.problems == ()
    c = parse_config("core: {noNodeLabels: true}")  # labels would go nowhere: refused, named
    assert not c.no_node_labels and "core.noNodeLabels" in str(c.problems)
    assert "core.enableNodeFeatureApi" in str(
        parse_config("core: {enableNodeFeatureApi: yes please}").problems
    )
    on = Config(enable_nodefeature_api=True)
    assert Publishing().resolve(Config()) == (False, True)
    assert Publishing().resolve(on) == (True, True)
    assert Publishing().resolve(Config(enable_nodefeature_api=True, no_node_labels=True)) == (True, False)
    assert Publishing(node_labels=False).resolve(Config()) == (False, True)  # never nowhere
    assert Publishing(nodefeature_api=True, node_labels=False).resolve(Config()) == (True, False)
    assert Publishing(nodefeature_api=False).resolve(on) == (False, True)


def test_the_object_is_nfds_shape_named_for_the_node_and_owned_by_it() -> None:
    results = scan(HostRoot.at(GPU), Config())
    doc = node_feature("n1", "sro-system", nfd_features(results), node_uid="uid-n1")
    assert doc["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1" and doc["kind"] == "NodeFeature"
    md = doc["metadata"]
    assert (md["name"], md["namespace"]) == ("n1", "sro-system")
    assert md["labels"]["nfd.node.kubernetes.io/node-name"] == "n1"
    assert md["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-n1"}]
    f = doc["spec"]["features"]
    assert f["flags"]["cpu.cpuid"]["elements"]["AVX2"] == {}
    assert f["flags"]["kernel.loadedmodule"]["elements"].keys() >= {"nvidia", "mlx5_ib"}
    assert f["attributes"]["kernel.version"]["elements"]["major"] == "5"
    assert f["attributes"]["system.osrelease"]["elements"]["VERSION_ID.major"] == "22"  # as NFD's worker
    gpus = [
        e["attributes"]
        for e in f["instances"]["pci.device"]["elements"]
        if e["attributes"]["vendor"] == "10de"
    ]
    assert sum(g["class"] == "0302" for g in gpus) == 8
    assert not any(
        name.startswith("custom.") for kind in f.values() for name in kind
    )  # custom.d text is not a feature
    assert "labels" not in doc["spec"]
    with_labels = node_feature("n1", "sro-system", {}, {"b": "2", "a": "1"})
    assert (
        list(with_labels["spec"]["labels"]) == ["a", "b"] and "ownerReferences" not in with_labels["metadata"]
    )


def test_writer_creates_updates_only_on_change_and_keeps_others_labels() -> None:
    api = FakeNodeFeatures()
    w = NodeFeatureWriter(api)
    doc = node_feature("n1", "ns", {}, {"a": "1"}, node_uid="u")
    assert w.publish(doc) == "created"
    assert w.publish(doc) == "unchanged" and api.writes == 1
    api.objects[("ns", "n1")]["metadata"]["labels"]["someone.else/x"] = "y"
    changed = node_feature("n1", "ns", {}, {"a": "2"}, node_uid="u")
    assert differs(changed, api.objects[("ns", "n1")])
    assert w.publish(changed) == "updated"
    stored = api.objects[("ns", "n1")]
    assert stored["spec"]["labels"] == {"a": "2"} and stored["metadata"]["labels"]["someone.else/x"] == "y"


def test_daemon_both_labels_and_nodefeature(tmp_path: Path) -> None:
    nodes, api = Nodes(), FakeNodeFeatures()
    rc = run_daemon(
        _host(tmp_path), ConfigLoader(None), "n1", lambda: nodes, oneshot=True, stop=threading.Event(),
        publishing=Publishing(nodefeature_api=True, namespace="sro-system"), nodefeature_factory=lambda: api,
    )  # fmt: skip
    assert rc == 0
    assert nodes.labels[NFD + "system-os_release.ID"] == "debian"
    doc = api.objects[("sro-system", "n1")]
    assert doc["metadata"]["ownerReferences"][0]["uid"] == "uid-n1"
    assert doc["spec"]["features"]["attributes"]["system.osrelease"]["elements"]["ID"] == "debian"
    assert "labels" not in doc["spec"]  # the agent labels the Node itself


class ReadOnlyNodes(Nodes):
    """A Node the agent may read but not patch: the default discovery role (get nodes, no patch)."""

    def patch(self, *args: Any, **kwargs: Any) -> NodeMeta:
        raise NodeApiError("patch node n1: 403 Forbidden")


def test_daemon_no_node_labels_puts_them_in_the_object_and_never_writes_the_node(tmp_path: Path) -> None:
    host = _host(tmp_path)
    nodes, api = Nodes(), FakeNodeFeatures()
    run_daemon(host, ConfigLoader(None), "n1", lambda: nodes, oneshot=True, stop=threading.Event())
    assert nodes.labels[NFD + "system-os_release.ID"] == "debian"  # labelled directly before the switch
    patches = nodes.patches
    conf = tmp_path / "nfd-worker.conf"
    conf.write_text("core: {enableNodeFeatureApi: true, noNodeLabels: true}\n")
    rc = run_daemon(host, ConfigLoader(conf), "n1", lambda: nodes, oneshot=True, stop=threading.Event(),
                    nodefeature_factory=lambda: api)  # fmt: skip
    assert rc == 0
    doc = api.objects[("sro-system", "n1")]
    assert doc["spec"]["labels"][NFD + "system-os_release.ID"] == "debian"
    # the Node is left to the operator, which takes over what the agent's record lists
    assert nodes.patches == patches
    assert NFD + "system-os_release.ID" in decode_owned(nodes.annotations[OWNED_ANNOTATION])
    # with the default role (no patch on Nodes) a pass succeeds, owner reference and all, even where
    # an earlier agent's record lists a label no longer discovered (the operator removes it)
    stale = NFD + "gone"
    denied, api = ReadOnlyNodes({stale: "true"}, {OWNED_ANNOTATION: stale}), FakeNodeFeatures()
    rc = run_daemon(host, ConfigLoader(conf), "n1", lambda: denied, oneshot=True, stop=threading.Event(),
                    nodefeature_factory=lambda: api)  # fmt: skip
    assert rc == 0 and api.objects[("sro-system", "n1")]["metadata"]["ownerReferences"][0]["uid"] == "uid-n1"


def test_daemon_without_the_crd_still_labels_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host = _host(tmp_path)
    nodes, api = Nodes(), FakeNodeFeatures()
    api.crd = False
    caplog.set_level(logging.WARNING)
    stop = threading.Event()
    passes: list[int] = []

    def factory() -> FakeNodeFeatures:
        passes.append(1)
        if len(passes) == 3:
            stop.set()
        return api

    rc = run_daemon(host, ConfigLoader(None), "n1", lambda: nodes, oneshot=False, stop=stop, interval=0.01,
                    publishing=Publishing(nodefeature_api=True), nodefeature_factory=factory)  # fmt: skip
    assert rc == 0 and len(passes) == 3
    assert nodes.labels[NFD + "system-os_release.ID"] == "debian"
    assert caplog.text.count("not served") == 1


def test_cli_prints_the_nodefeature_dry_run() -> None:
    out = CliRunner().invoke(
        cli, ["discover", "--host-root", str(GPU), "-o", "nodefeature", "--node-name", "gpu-1"]
    )
    assert out.exit_code == 0, out.output
    doc = yaml.safe_load(out.output)
    assert doc["kind"] == "NodeFeature" and doc["metadata"]["name"] == "gpu-1"
    assert doc["spec"]["features"]["attributes"]["kernel.version"]["elements"]["full"] == "5.15.0-1042-nvidia"
    out = CliRunner().invoke(
        cli, ["discover", "--host-root", str(GPU), "-o", "nodefeature", "--node-name", "gpu-1", "--enable-nodefeature-api", "--no-node-labels"]
    )  # fmt: skip
    assert yaml.safe_load(out.output)["spec"]["labels"][NFD + "pci-0302_10de.present"] == "true"
