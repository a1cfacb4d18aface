"""The exporter's HTTP side and CLI: /metrics serves the snapshot, collection runs off the scrape path
(on its interval, at once on request or SIGUSR1), `--once`/`--output` is the dry run, SIGTERM stops it."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sro.node.exporter.commands import exporter, parse_interval
from sro.node.exporter.exposition import CONTENT_TYPE
from sro.node.exporter.serving import MetricsServer, parse_address
from tests.unit.exporter_support import FakeKubelet, collector, driver_root


@pytest.fixture
def tmp() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="exs", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def test_scrapes_read_the_snapshot_and_requests_collect(tmp: Path) -> None:
    c = collector(driver_root(tmp))
    c.collect()
    healthy = [True]
    server = MetricsServer(("127.0.0.1", 0), lambda: c.snapshot.text, lambda: healthy[0])
    server.start()
    stop = threading.Event()
    runner = threading.Thread(target=c.run, args=(stop, 3600.0), daemon=True)
    try:
        base = f"http://127.0.0.1:{server.port}"
        code, ctype, body = get(f"{base}/metrics")
        assert code == 200 and ctype == CONTENT_TYPE and body == c.snapshot.text
        assert b"DCGM_FI_DEV_GPU_UTIL" in body
        assert get(f"{base}/healthz")[0] == 200
        healthy[0] = False
        assert get(f"{base}/healthz")[0] == 503
        assert get(f"{base}/nothing")[0] == 404
        assert b"/metrics" in get(f"{base}/")[2]
        runner.start()
        assert c.wait_for(2, timeout=5)  # run() collects at once
        n = c.snapshot.number
        c.request()  # on demand, long before the hour is up
        assert c.wait_for(n + 1, timeout=5)
        assert get(f"{base}/metrics")[2] == c.snapshot.text
    finally:
        stop.set()
        c.request()
        runner.join(timeout=5)
        server.stop()
        c.close()
    assert not runner.is_alive()


def test_a_slow_collection_never_delays_a_scrape(tmp: Path) -> None:
    """The kubelet answers after 1 s: scrapes during that collection still get the last snapshot at once."""
    gate = threading.Event()

    def slow_pods() -> list[object]:
        gate.wait(1.0)
        return []

    c = collector(driver_root(tmp))
    c.collect()
    c.list_pods = slow_pods  # type: ignore[assignment]
    server = MetricsServer(("127.0.0.1", 0), lambda: c.snapshot.text)
    server.start()
    worker = threading.Thread(target=c.collect, daemon=True)
    try:
        worker.start()
        time.sleep(0.1)
        t0 = time.perf_counter()
        code, _, body = get(f"http://127.0.0.1:{server.port}/metrics")
        assert code == 200 and body and time.perf_counter() - t0 < 0.5
    finally:
        gate.set()
        worker.join(timeout=5)
        server.stop()
        c.close()


def test_once_prints_and_writes_the_text(tmp: Path) -> None:
    root = driver_root(tmp)
    kubelet = FakeKubelet(tmp / "kubelet.sock")
    try:
        args = ["--recipe", "simulated-gpu", "--driver-root", str(root), "--pod-resources-socket", str(kubelet.path),
                "--node-name", "node-9", "--once"]  # fmt: skip
        env = {"KUBECONFIG": str(tmp / "no-kubeconfig")}  # the node source fails fast, the rest is served
        r = CliRunner().invoke(exporter, args, env=env)
        assert r.exit_code == 0, r.output
        assert 'DCGM_FI_DEV_GPU_UTIL{gpu="0"' in r.output and 'Hostname="node-9"' in r.output
        assert 'sro_exporter_source_up{Hostname="node-9",source="kubelet"} 1' in r.output
        assert 'sro_exporter_source_up{Hostname="node-9",source="node"} 0' in r.output
        out = tmp / "metrics.prom"
        r = CliRunner().invoke(exporter, [*args, "--output", str(out)], env=env)
        assert r.exit_code == 0 and r.output == "" and b"sro_device_healthy" in out.read_bytes()
    finally:
        kubelet.stop()


def test_options_are_checked() -> None:
    assert parse_interval("30s") == 30 and parse_interval("500ms") == 0.5 and parse_interval("2m") == 120
    assert parse_interval("1.5") == 1.5
    for bad in ("fast", "10ms", "-1s"):
        with pytest.raises(click.BadParameter):
            parse_interval(bad)
    assert parse_address(":9400") == ("", 9400) and parse_address("127.0.0.1:1") == ("127.0.0.1", 1)
    assert parse_address("[::1]:9400") == ("::1", 9400)
    with pytest.raises(ValueError, match="expected"):
        parse_address("localhost:http")
    r = CliRunner().invoke(exporter, ["--recipe", "simulated-gpu", "--output", "x"])
    assert r.exit_code == 2 and "--output goes with --once" in r.output
    r = CliRunner().invoke(exporter, ["--recipe", "simulated-gpu", "--interval", "soon", "--once"])
    assert r.exit_code == 2 and "duration" in r.output


def test_the_command_serves_collects_on_sigusr1_and_stops_on_sigterm(tmp: Path) -> None:
    root = driver_root(tmp)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sro", "-v", "exporter", "--recipe", "simulated-gpu", "--driver-root", str(root),
         "--pod-resources-socket", str(tmp / "none.sock"), "--address", "127.0.0.1:0", "--interval", "1h",
         "--ready-file", str(tmp / "ready")],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "NODE_NAME": ""},
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        port = 0
        deadline = time.monotonic() + 20
        seen = []
        while not port and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
            seen.append(line)
            m = re.search(r"serving :(\d+)/metrics", line)
            port = int(m.group(1)) if m else 0
        assert port, "".join(seen)
        assert (tmp / "ready").is_file(), "the readiness probe's file, once /metrics serves"
        url = f"http://127.0.0.1:{port}/metrics"

        def kubelet_errors() -> int:
            body = get(url)[2].decode()
            return int(
                re.search(r'sro_exporter_collect_errors_total\{[^}]*source="kubelet"\} (\d+)', body).group(1)
            )  # type: ignore[union-attr]

        assert kubelet_errors() == 1
        proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while kubelet_errors() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert kubelet_errors() == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert not (tmp / "ready").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
