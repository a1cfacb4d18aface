"""A dead API server is named by `sro local status` (with the end of its log), and `up` brings it back.

Named to run late (before test_zz_down_and_up): it takes the API server away for a few seconds, and
it always leaves the cluster healthy for whatever runs next.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from sro.local import supervisor
from sro.local.cluster import LocalCluster

pytestmark = pytest.mark.e2e


def _wait(what: str, check: object, timeout: float) -> float:
    t0 = time.monotonic()
    while not check():  # type: ignore[operator]
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)
    return time.monotonic() - t0


def test_status_names_a_dead_apiserver_and_up_restarts_it(cluster: LocalCluster) -> None:
    layout = cluster.layout
    before = supervisor.running(layout, "kube-apiserver")
    assert before is not None and cluster.is_healthy()
    t0 = time.monotonic()
    try:
        os.kill(before.pid, signal.SIGKILL)
        _wait("kube-apiserver to be gone", lambda: supervisor.running(layout, "kube-apiserver") is None, 10)
        t_status = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "sro", "local", "status"], capture_output=True, text=True, timeout=60
        )
        t_status = time.monotonic() - t_status
        print(out.stdout)
        assert out.returncode == 3, out.stdout + out.stderr
        assert re.search(r"kube-apiserver\s*│\s*dead\s*│", out.stdout), out.stdout
        assert "kube-apiserver died" in out.stdout and str(layout.log("kube-apiserver")) in out.stdout
        last_line = supervisor.log_tail(layout, "kube-apiserver", 1)
        assert last_line and last_line in out.stdout, "the log tail is shown"
        assert "sro local up" in out.stdout
    finally:
        t_up = time.monotonic()
        cluster.ensure_up()  # restarts what died (controller-manager too, should it have lost its lease)
        t_up = time.monotonic() - t_up
    dead = time.monotonic() - t0
    after = supervisor.running(layout, "kube-apiserver")
    assert after is not None and after.pid != before.pid
    _wait("the cluster healthy again", cluster.is_healthy, 60)
    print(f"apiserver dead for {dead:.1f}s: status took {t_status:.1f}s, `up` {t_up:.1f}s")
