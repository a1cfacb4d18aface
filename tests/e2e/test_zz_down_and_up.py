"""`sro local down` leaves nothing behind, and `up` refuses an occupied port cleanly.

Runs last in the session (file name): it takes the shared cluster down, checks that no process, mount
or listening port of the cluster remains, checks that `up` names an occupied port and starts nothing,
then brings the cluster back up so the session ends the way it started.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from sro.local import cleanup, prometheus, supervisor
from sro.local.cluster import ClusterError, LocalCluster

pytestmark = pytest.mark.e2e

OUR_EXES = ("etcd", "containerd", "containerd-shim-runc-v2", "kube-apiserver", "kube-controller-manager",
            "kube-scheduler", "kubelet", "kube-proxy", "pause")  # fmt: skip


def _our_processes() -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            exe = os.path.basename(os.readlink(entry / "exe").removesuffix(" (deleted)"))
        except OSError:
            continue
        if exe in OUR_EXES:
            found.append(f"{exe} (pid {entry.name})")
    return found


def test_down_leaves_no_process_mount_or_port_then_up_restores(cluster: LocalCluster) -> None:
    # a pod (with a sandbox, a netns and a token tmpfs) makes the teardown non-trivial
    cluster.kubectl("run", "down-probe", "--image=localhost/busybox:sro", "--image-pull-policy=Never",
                    "--restart=Never", "--", "sleep", "3600")  # fmt: skip
    cluster.kubectl("wait", "--for=condition=Ready", "pod/down-probe", "--timeout=90s", timeout=100)
    assert cleanup.managed_mounts(cluster.layout), "a running pod should have mounts to clean up"
    # Prometheus and its targets loop (sro local up --prometheus) go with the rest; by pid, since a
    # Prometheus of another test may run on this machine at the same time
    had_prometheus = prometheus.wanted(cluster.layout)
    prometheus.choose(cluster.layout, True, lambda _: None)
    cluster.ensure_up()
    names = (prometheus.PROMETHEUS, prometheus.TARGETS)
    monitoring = [p.pid for n in names if (p := supervisor.running(cluster.layout, n)) is not None]
    assert len(monitoring) == 2

    cluster.down()
    try:
        assert _our_processes() == []
        assert [pid for pid in monitoring if supervisor.cmdline(pid)] == []
        assert cleanup.managed_mounts(cluster.layout) == []
        busy = {
            name: port for name, port in cluster.layout.ports.all().items() if supervisor.port_owner(port)
        }
        assert busy == {}
        assert not list(cluster.layout.run.glob("*.pid"))

        # an occupied port: a clear message naming it, and nothing left running
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", cluster.layout.ports.apiserver))
            s.listen()
            with pytest.raises(ClusterError, match=f"port {cluster.layout.ports.apiserver}"):
                cluster.up()
            assert _our_processes() == []
    finally:
        prometheus.choose(cluster.layout, had_prometheus, lambda _: None)
        assert cluster.up() is True
    assert cluster.is_healthy()
    cluster.kubectl("delete", "pod", "down-probe", "--grace-period=0", "--force", check=False)
