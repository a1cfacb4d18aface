"""Process supervision by pid file: start, detect staleness (crash, recycled pid), stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sro.local import supervisor
from sro.local.components import Component, Health
from sro.local.layout import Layout


def test_start_stop_and_stale_pidfile(tmp_path: Path) -> None:
    layout = Layout(state=tmp_path)
    comp = Component("sleeper", ("/bin/sleep", "300"), Health())
    proc = supervisor.start(layout, comp)
    assert supervisor.running(layout, "sleeper") == proc
    assert supervisor.stop(layout, "sleeper", timeout=5)
    assert supervisor.running(layout, "sleeper") is None
    assert not layout.pidfile("sleeper").exists()

    proc = supervisor.start(layout, comp)
    os.kill(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while supervisor.running(layout, "sleeper") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert supervisor.stale_pidfile(layout, "sleeper"), "a crashed daemon's pid file must read as stale"


def test_a_recycled_pid_is_not_mistaken_for_our_daemon(tmp_path: Path) -> None:
    layout = Layout(state=tmp_path)
    layout.run.mkdir(parents=True)
    # our own pid, but a start time that is not ours: as if the daemon died and the pid was reused
    layout.pidfile("x").write_text(f"{os.getpid()} 1\n")
    assert supervisor.running(layout, "x") is None
    assert not supervisor.stop(layout, "x")


def test_port_owner_names_a_listener() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        owner = supervisor.port_owner(s.getsockname()[1])
    assert owner is not None and f"pid {os.getpid()}" in owner


def test_up_refuses_a_daemon_of_the_same_kind_it_did_not_start(tmp_path: Path) -> None:
    import subprocess

    import pytest

    from sro.local.cluster import ClusterError, LocalCluster
    from sro.local.components import NodeFacts

    cluster = LocalCluster(Layout(state=tmp_path), NodeFacts("n", "10.0.0.1"))
    stray = subprocess.Popen(["/bin/sleep", "30"])
    try:
        with pytest.raises(ClusterError, match=rf"sleep is already running \(pid [0-9 ]*{stray.pid}.*kill"):
            cluster._check_free(Component("sleeper", ("/bin/sleep", "1"), Health()))
    finally:
        stray.kill()
        stray.wait()


def test_a_zombie_whose_other_threads_still_exit_is_not_gone_yet() -> None:
    """A daemon's main thread can be a zombie while its other threads still hold its sockets: it is
    gone only once they are done (a restart before then found the old port still listening)."""
    code = (
        "import ctypes, threading, time\n"
        "threading.Thread(target=time.sleep, args=(1.0,)).start()\n"
        "ctypes.CDLL(None).pthread_exit(None)\n"  # the main thread ends, the other goes on
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 5
        while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the main thread did not end"
            time.sleep(0.01)
        assert supervisor._start_time(proc.pid) is not None  # its other thread still runs
        while supervisor._start_time(proc.pid) is not None:
            assert time.monotonic() < deadline, "the process never counted as gone"
            time.sleep(0.01)
    finally:
        assert proc.wait(5) == 0
