"""`sro local restart`: which daemons it takes, what it refuses, and a real stop-and-start of a small
daemon (a unix-socket server standing in for containerd) with its health check, grace and SIGKILL."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from sro.local import restarts, supervisor
from sro.local.components import Component, Health, NodeFacts, components
from sro.local.layout import Layout

SERVER = (  # like containerd: removes its old socket, listens, serves until stopped
    "import os, socket, sys, time; p = sys.argv[1]; os.path.exists(p) and os.unlink(p); "
    "s = socket.socket(socket.AF_UNIX); s.bind(p); s.listen(); time.sleep(300)"
)


def test_every_daemon_of_the_cluster_can_be_restarted_by_its_status_name(tmp_path: Path) -> None:
    names = [c.name for c in components(Layout(state=tmp_path), NodeFacts("n", "10.0.0.1"), Path("/b"))]
    assert sorted(names) == sorted(restarts.CLUSTER_DAEMONS)
    for wanted in (
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubelet",
        "containerd",
    ):
        assert wanted in restarts.CLUSTER_DAEMONS


def test_an_unknown_or_stopped_daemon_is_refused_in_one_line(tmp_path: Path) -> None:
    comps = components(Layout(state=tmp_path), NodeFacts("n", "10.0.0.1"), Path("/b"))
    with pytest.raises(
        restarts.RestartRefused, match=r"unknown component 'kubelett': one of etcd, .*kubelet"
    ):
        restarts.find(comps, "kubelett")
    with pytest.raises(restarts.RestartRefused, match="unknown component 'prometheus'"):
        restarts.find((*comps, Component("prometheus", ("/bin/true",), Health())), "prometheus")
    assert restarts.find(comps, "kubelet").name == "kubelet"
    with pytest.raises(restarts.RestartRefused, match="kubelet is not running: the local cluster is not up"):
        restarts.check("kubelet", running=False)
    restarts.check("kubelet", running=True)


def _server(tmp_path: Path, argv: tuple[str, ...] | None = None) -> tuple[Layout, Component]:
    layout = Layout(state=tmp_path / "state")
    sock = tmp_path / "d.sock"
    comp = Component(
        "containerd",  # a cluster daemon's name: the refusal of other names is checked above
        argv or (sys.executable, "-c", SERVER, str(sock)),
        Health(socket=sock),
        files={tmp_path / "conf" / "d.conf": "written at each start\n"},
    )
    return layout, comp


def test_a_running_daemon_is_stopped_and_started_again_and_waited_for(tmp_path: Path) -> None:
    layout, comp = _server(tmp_path)
    old = supervisor.start(layout, comp)
    while not supervisor.healthy(layout, comp.health):
        time.sleep(0.05)
    said: list[str] = []
    try:
        r = restarts.restart(layout, comp, said.append, grace=5)
        new = supervisor.running(layout, "containerd")
        assert new is not None and new.pid == r.new_pid != old.pid == r.old_pid
        assert not r.killed and r.healthy_at is not None and r.healthy_at >= r.started_at >= r.stopped_at
        assert supervisor.healthy(layout, comp.health)
        assert (tmp_path / "conf" / "d.conf").read_text() == "written at each start\n"
        assert said[0] == f"containerd: SIGTERM to pid {old.pid}"
        assert said[2] == f"containerd: started, pid {new.pid}"
        assert said[3].startswith("containerd: healthy after ") and len(said) == 4
    finally:
        supervisor.stop(layout, "containerd", timeout=5)


def test_a_daemon_deaf_to_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    deaf = f"import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); {SERVER}"
    layout, comp = _server(tmp_path, (sys.executable, "-c", deaf, str(tmp_path / "d.sock")))
    supervisor.start(layout, comp)
    while not supervisor.healthy(layout, comp.health):  # SIGTERM is ignored from now on
        time.sleep(0.05)
    said: list[str] = []
    try:
        r = restarts.restart(layout, comp, said.append, wait=False, grace=0.5)
        assert r.killed and r.stopped_at >= 0.5 and r.healthy_at is None
        assert "SIGKILL after 0.5 s" in said[1]
        assert len(said) == 3
    finally:
        supervisor.stop(layout, "containerd", timeout=0.5)


def test_a_daemon_that_dies_on_its_restart_is_reported_with_its_log(tmp_path: Path) -> None:
    layout, comp = _server(tmp_path)
    supervisor.start(layout, comp)
    broken = Component(comp.name, ("/bin/sh", "-c", "echo cannot bind; exit 3"), comp.health)
    with pytest.raises(TimeoutError, match=r"containerd exited .*after its restart(.|\n)*cannot bind"):
        restarts.restart(layout, broken, lambda _: None, grace=5, health_timeout=10)
    assert supervisor.running(layout, "containerd") is None


def test_a_stopped_daemon_is_not_started_by_restart(tmp_path: Path) -> None:
    layout, comp = _server(tmp_path)
    with pytest.raises(restarts.RestartRefused, match="not running"):
        restarts.restart(layout, comp, lambda _: None)
    assert not layout.pidfile("containerd").exists()
