"""Publishing: the pure plan, and the publisher/daemon against an in-memory Node with resourceVersions.

The real API server is exercised by tests/e2e/test_discovery_e2e.py; here a small fake Node store
(merge-patch semantics, 409 on a stale resourceVersion, an "API server away" switch) drives every
branch quickly.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path

import pytest

from sro.host.root import HostRoot
from sro.kube.nodes import NodeApiError, NodeMeta
from sro.nfd.ownership import RULES_OWNED_ANNOTATION, Owned
from sro.nfd.ownership import decode_owned as decode_rules_owned
from sro.node.discovery.commands import ConfigLoader, run_daemon
from sro.node.discovery.publishing import (
    OWNED_ANNOTATION,
    Backoff,
    Publisher,
    cleanup_plan,
    decode_owned,
    encode_owned,
    plan,
)

pytestmark = pytest.mark.timeout(30)

NFD = "feature.node.kubernetes.io/"
A, B, C = NFD + "pci-0302_10de.present", NFD + "cpu-cpuid.AVX", "example.com/mine"


class FakeNodes:
    """One Node in memory with merge-patch and resourceVersion semantics."""

    def __init__(
        self, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
    ) -> None:
        self.labels = dict(labels or {})
        self.annotations = dict(annotations or {})
        self.rv = 1
        self.down = False
        self.patches = 0
        self.before_patch: list[dict[str, str]] = []  # labels someone else adds just before our next patch

    def read(self, name: str) -> NodeMeta:
        if self.down:
            raise NodeApiError("read node n1: API server unreachable (ConnectError: refused)")
        return NodeMeta(name, dict(self.labels), dict(self.annotations), str(self.rv))

    def patch(
        self,
        name: str,
        labels: Mapping[str, str | None],
        annotations: Mapping[str, str | None],
        resource_version: str = "",
    ) -> NodeMeta:
        if self.down:
            raise NodeApiError("patch node n1: API server unreachable")
        if self.before_patch:
            self.labels.update(self.before_patch.pop(0))
            self.rv += 1
        if resource_version and resource_version != str(self.rv):
            raise NodeApiError("patch node n1: 409 Conflict", conflict=True)
        for store, changes in ((self.labels, labels), (self.annotations, annotations)):
            for k, v in changes.items():
                if v is None:
                    store.pop(k, None)
                else:
                    store[k] = v
        self.rv += 1
        self.patches += 1
        return self.read(name)


def test_owned_record_round_trip() -> None:
    assert encode_owned({A, C}) == "example.com/mine,pci-0302_10de.present"
    assert decode_owned("example.com/mine, pci-0302_10de.present,") == {A, C}


def test_plan_adds_updates_removes_only_owned() -> None:
    node = NodeMeta("n1", {A: "true", B: "true", "kubernetes.io/hostname": "n1", C: "theirs"},
                    {OWNED_ANNOTATION: encode_owned({A, B})})  # fmt: skip
    p = plan(node, {A: "true", NFD + "memory-numa": "true", C: "ours"})
    assert p.set_labels == {NFD + "memory-numa": "true"}
    assert p.remove_labels == (B,)
    assert p.foreign == (C,)  # exists, not ours: left alone
    assert set(p.owned) == {A, NFD + "memory-numa"}
    assert p.changed


def test_plan_keeps_stale_labels_of_a_degraded_source() -> None:
    node = NodeMeta("n1", {A: "true", B: "true"}, {OWNED_ANNOTATION: encode_owned({A, B})})
    p = plan(node, {}, keep=lambda k: k == A)
    assert p.remove_labels == (B,) and p.kept == (A,) and p.owned == (A,)


def test_unchanged_plan_is_not_published() -> None:
    node = NodeMeta("n1", {A: "true"}, {OWNED_ANNOTATION: encode_owned({A})})
    assert not plan(node, {A: "true"}).changed


def test_cleanup_removes_exactly_ours() -> None:
    node = NodeMeta("n1", {A: "1", B: "1", C: "x"}, {OWNED_ANNOTATION: encode_owned({A, B, NFD + "gone"})})
    p = cleanup_plan(node)
    assert p.remove_labels == (B, A) or set(p.remove_labels) == {A, B}
    assert p.annotation is None and p.record_changed and p.other_annotations == {}


def test_cleanup_also_removes_the_labels_the_operator_applied_from_the_nodefeature() -> None:
    """The default install: the operator applied discovery's labels; after `sro uninstall` nothing
    keeps them, and `sro discover --cleanup` takes them away too (the rest of its record stays)."""
    applied = Owned(labels=frozenset({A, NFD + "gone"}), annotations=frozenset({"example.com/note"})).encode()
    assert applied is not None
    node = NodeMeta("n1", {A: "1", C: "x"}, {RULES_OWNED_ANNOTATION: applied})
    p = cleanup_plan(node)
    assert p.remove_labels == (A,) and p.changed and not p.record_changed
    rest = decode_rules_owned(p.other_annotations[RULES_OWNED_ANNOTATION])
    assert rest.labels == frozenset() and rest.annotations == {"example.com/note"}
    only_labels = Owned(labels=frozenset({A})).encode()
    assert only_labels is not None
    p = cleanup_plan(NodeMeta("n1", {A: "1"}, {RULES_OWNED_ANNOTATION: only_labels}))
    assert p.other_annotations == {RULES_OWNED_ANNOTATION: None}


def test_publisher_replans_on_conflict_and_never_clobbers() -> None:
    nodes = FakeNodes()
    nodes.before_patch = [{C: "someone-else"}]
    pub = Publisher(nodes, "n1")
    pub.publish({A: "true", C: "ours"})
    assert nodes.labels[C] == "someone-else"  # the re-plan saw it and left it alone
    assert nodes.labels[A] == "true"
    assert decode_owned(nodes.annotations[OWNED_ANNOTATION]) == {A}
    before = nodes.patches
    pub.publish({A: "true", C: "ours"})
    assert nodes.patches == before  # nothing changed: nothing sent
    pub.cleanup()
    assert nodes.labels == {C: "someone-else"} and OWNED_ANNOTATION not in nodes.annotations


def test_backoff() -> None:
    b = Backoff(cap=5)
    assert [b.next() for _ in range(5)] == [1, 2, 4, 5, 5]
    b.reset()
    assert b.next() == 1


def _host(tmp_path: Path) -> HostRoot:
    (tmp_path / "etc").mkdir(parents=True, exist_ok=True)
    (tmp_path / "etc/os-release").write_text("ID=debian\nVERSION_ID=12\n")
    return HostRoot.at(tmp_path)


def test_daemon_survives_api_outage_and_bad_config(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = _host(tmp_path)
    conf = tmp_path / "nfd-worker.conf"
    conf.write_text("core: {sleepInterval: never}\n")
    nodes = FakeNodes({"kubernetes.io/hostname": "n1"})
    nodes.down = True
    stop = threading.Event()
    attempts: list[int] = []

    def factory() -> FakeNodes:
        attempts.append(1)
        if len(attempts) == 3:
            nodes.down = False  # the API server comes back on the third pass
        if nodes.down:
            raise NodeApiError("connect to API server: refused")
        stop.set()  # stop after this pass
        return nodes

    caplog.set_level(logging.WARNING)
    rc = run_daemon(host, ConfigLoader(conf), "n1", factory, oneshot=False, stop=stop, interval=0.01)
    assert rc == 0
    assert len(attempts) == 3
    assert nodes.labels[NFD + "system-os_release.ID"] == "debian"
    assert nodes.labels["kubernetes.io/hostname"] == "n1"
    assert "core.sleepInterval" in caplog.text  # the bad field is named
    assert caplog.text.count("refused") == 2  # each outage reported, the daemon kept going


def test_daemon_removes_label_when_local_feature_file_goes(tmp_path: Path) -> None:
    host = _host(tmp_path)
    features = tmp_path / "etc/kubernetes/node-feature-discovery/features.d"
    features.mkdir(parents=True)
    (features / "e2e").write_text("sro-test=yes\n")
    nodes = FakeNodes({NFD + "user-set": "keep-me"})
    stop = threading.Event()
    run_daemon(host, ConfigLoader(None), "n1", lambda: nodes, oneshot=True, stop=stop)
    assert nodes.labels[NFD + "sro-test"] == "yes"
    (features / "e2e").unlink()
    run_daemon(host, ConfigLoader(None), "n1", lambda: nodes, oneshot=True, stop=stop)
    assert NFD + "sro-test" not in nodes.labels
    assert nodes.labels[NFD + "user-set"] == "keep-me"


def test_daemon_keeps_labels_when_a_read_fails(tmp_path: Path) -> None:
    host = _host(tmp_path)
    features = tmp_path / "etc/kubernetes/node-feature-discovery/features.d"
    features.mkdir(parents=True)
    (features / "e2e").write_text("sro-test=yes\n")
    nodes = FakeNodes()
    run_daemon(host, ConfigLoader(None), "n1", lambda: nodes, oneshot=True, stop=threading.Event())
    (features / "e2e").unlink()
    (features / "e2e").mkdir()  # now unreadable as a file: a failed read, not a removed feature
    rc = run_daemon(host, ConfigLoader(None), "n1", lambda: nodes, oneshot=True, stop=threading.Event())
    assert rc == 0
    assert nodes.labels[NFD + "sro-test"] == "yes"


def test_oneshot_fails_when_api_is_away(tmp_path: Path) -> None:
    nodes = FakeNodes()
    nodes.down = True
    assert run_daemon(_host(tmp_path), ConfigLoader(None), "n1", lambda: nodes, oneshot=True,
                      stop=threading.Event()) == 1  # fmt: skip
