"""`sro local status` tells a dead daemon (started by `up`, gone since) from a stopped one, and shows
how it ended: the crash line of a Go fatal error, then the last lines of its log."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from sro.local import commands, supervisor
from sro.local.cluster import LocalCluster
from sro.local.components import NodeFacts
from sro.local.layout import Layout
from sro.local.supervisor import crash_summary

GO_CRASH = [
    "==== 2024-01-01T00:00:00 starting kube-apiserver --old-run",
    "fatal error: an older run",
    "==== 2024-01-02T00:00:00 starting kube-apiserver --secure-port=6443",
    "I0102 00:00:01.000000 1 server.go:1] serving",
    "fatal error: fault",
    "[signal SIGSEGV: segmentation violation code=0x1 addr=0x118 pc=0x41d2c5]",
    "",
    *[f"goroutine {i} [running]:" for i in range(40)],
]


def _cluster(tmp_path: Path) -> LocalCluster:
    layout = Layout(state=tmp_path / "state", containerd_state=tmp_path / "containerd")
    layout.run.mkdir(parents=True)
    layout.logs.mkdir(parents=True)
    return LocalCluster(layout, NodeFacts("node-a", "10.1.2.3"))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    c = _cluster(tmp_path)
    # kube-apiserver: started by `up`, died since (its pid is gone)
    gone = subprocess.Popen(["/bin/true"])
    gone.wait()
    c.layout.pidfile("kube-apiserver").write_text(f"{gone.pid} 12345\n")
    c.layout.log("kube-apiserver").write_text("\n".join(GO_CRASH) + "\n")
    # containerd: alive, but its socket does not answer
    alive = subprocess.Popen(["/bin/sleep", "60"])
    started = supervisor._start_time(alive.pid)
    c.layout.pidfile("containerd").write_text(f"{alive.pid} {started}\n")
    try:
        yield c
    finally:
        alive.kill()
        alive.wait()


def test_rows_name_dead_unhealthy_and_stopped_daemons(cluster: LocalCluster) -> None:
    rows = {name: (state, detail) for name, state, detail in cluster.status()}
    assert rows["kube-apiserver"][0] == "dead"
    assert str(cluster.layout.log("kube-apiserver")) in rows["kube-apiserver"][1]
    assert rows["containerd"][0] == "unhealthy"
    assert rows["etcd"] == ("stopped", "")
    assert not cluster.is_healthy()


def test_the_death_report_shows_the_crash_line_and_the_tail(cluster: LocalCluster) -> None:
    report = cluster.death_report("kube-apiserver", lines=5).splitlines()
    assert report[:2] == [
        "fatal error: fault",
        "[signal SIGSEGV: segmentation violation code=0x1 addr=0x118 pc=0x41d2c5]",
    ]
    assert report[-1] == "goroutine 39 [running]:" and "..." in report
    assert "an older run" not in "\n".join(report), "only the latest run counts"


def test_crash_summary_without_a_crash_line_is_the_tail() -> None:
    log = "==== start\n" + "\n".join(f"line {i}" for i in range(30))
    assert crash_summary(log, 3) == "line 27\nline 28\nline 29"
    assert crash_summary("", 3) == ""
    near_end = "==== start\nok\npanic: boom\nmain.main()\n"
    assert crash_summary(near_end, 3) == "ok\npanic: boom\nmain.main()", "no repetition when the tail has it"


def test_status_command_prints_the_log_tail_and_what_to_run(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(LocalCluster, "default", classmethod(lambda cls: cluster))
    r = CliRunner().invoke(commands.local, ["status"])
    assert r.exit_code == 3, r.output
    assert "dead" in r.output and "kube-apiserver died" in r.output
    assert "fatal error: fault" in r.output and "goroutine 39 [running]:" in r.output
    assert "sro local up" in r.output and "node node-a: not ready" in r.output
