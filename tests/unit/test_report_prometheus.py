"""`sro report` and the status summary against Debian's real Prometheus (no cluster needed).

A static dcgm-exporter exposition (4 simulated devices on 2 nodes, pods of two namespaces, one device
time-sliced between two pods) is served over HTTP with readings that change on every scrape;
Prometheus scrapes it every second into a temporary directory. Once it holds ~10 samples the report
is drawn in each grouping and read back; the queries' answers are checked against the readings.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sro.report.prometheus import Prometheus
from sro.report.promql import GROUP_LABELS, Filters, report_queries
from sro.report.summary import utilisation_lines

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"

pytestmark = [
    pytest.mark.skipif(
        not Path(PROMETHEUS).is_file(), reason="needs Debian's prometheus (apt-get install prometheus)"
    ),
    pytest.mark.timeout(180),
]

# (Hostname, gpu, [(pod, namespace)], framebuffer used MiB); every device has 80 GiB.
DEVICES = [
    ("node-a", "0", [("train-0", "team-a")], 2048),
    ("node-a", "1", [("train-1", "team-a")], 6144),
    ("node-b", "0", [("infer-0", "team-b"), ("infer-1", "team-b")], 10240),  # time-sliced: 2 series
    ("node-b", "1", [("", "")], 20480),  # held by no pod
]
TOTAL_MIB = 81920
SAMPLES = 10


def exposition(scrape: int) -> str:
    lines = []
    for metric, kind in (
        ("DCGM_FI_DEV_GPU_UTIL", "gauge"),
        ("DCGM_FI_DEV_FB_USED", "gauge"),
        ("DCGM_FI_DEV_FB_FREE", "gauge"),
    ):
        lines += [f"# HELP {metric} {metric}.", f"# TYPE {metric} {kind}"]
        for i, (host, gpu, pods, used) in enumerate(DEVICES):
            value = {
                "DCGM_FI_DEV_GPU_UTIL": (scrape * 7 + i * 25) % 100,
                "DCGM_FI_DEV_FB_USED": used,
                "DCGM_FI_DEV_FB_FREE": TOTAL_MIB - used,
            }[metric]
            for pod, ns in pods:
                labels = (
                    f'gpu="{gpu}",UUID="GPU-sim-{host}-{gpu}",pci_bus_id="00000000:0{i}:00.0",device="nvidia{gpu}",'
                    f'modelName="Simulated H100",Hostname="{host}",container="{"main" if pod else ""}",'
                    f'namespace="{ns}",pod="{pod}",simulated="true"'
                )
                lines.append(f"{metric}{{{labels}}} {value}")
    return "\n".join(lines) + "\n"


class _Exporter(BaseHTTPRequestHandler):
    scrapes = itertools.count()

    def do_GET(self) -> None:
        if self.path != "/metrics":
            self.send_error(404)
            return
        body = exposition(next(self.scrapes)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    # Prometheus must not outlive the test run, even one killed with SIGKILL.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _samples(url: str) -> int:
    q = urllib.parse.urlencode({"query": "min(count_over_time(DCGM_FI_DEV_GPU_UTIL[5m]))"})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=2) as r:
            result = json.load(r)["data"]["result"]
    except OSError:
        return 0
    return int(float(result[0]["value"][1])) if result else 0


@dataclass(frozen=True)
class Setup:
    prometheus: str
    exporter: str


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("prometheus")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    exporter = f"127.0.0.1:{server.server_address[1]}"
    port = _free_port()
    (tmp / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - {{job_name: dcgm, honor_labels: true, static_configs: [{{targets: ['{exporter}']}}]}}\n"
    )
    log = (tmp / "prometheus.log").open("w")
    # Started before the server's thread: the death signal follows the thread that forked.
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent,
    )
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while _samples(url) < SAMPLES:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"Prometheus did not collect {SAMPLES} samples:\n{(tmp / 'prometheus.log').read_text()[-3000:]}"
                )
            time.sleep(0.5)
        yield Setup(prometheus=url, exporter=f"http://{exporter}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _sro(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sro", *args], capture_output=True, text=True, timeout=120)


EXPECTED = {
    "device": ["node-a gpu0", "node-a gpu1", "node-b gpu0", "node-b gpu1"],
    "node": ["node-a", "node-b"],
    "namespace": ["team-a", "team-b"],
}


@pytest.mark.parametrize("by", list(EXPECTED))
def test_report_draws_a_png_per_grouping(setup: Setup, by: str, tmp_path: Path) -> None:
    image = pytest.importorskip(
        "matplotlib.image", reason="needs the report extra: pip install 'sro[report]'"
    )
    out = tmp_path / f"{by}.png"
    done = _sro("report", "--prometheus", setup.prometheus, "--by", by, "--since", "15s", "-o", str(out))
    assert done.returncode == 0, done.stderr
    listed = [line.strip() for line in done.stdout.splitlines()[1:]]
    assert listed == EXPECTED[by]
    assert f"{len(EXPECTED[by])} {by}" in done.stdout and "SIMULATED" in done.stdout

    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000
    pixels = image.imread(out)
    assert pixels.shape[:2] == (800, 1200)
    rgb = pixels[..., :3]
    assert (rgb < 0.95).any(axis=-1).mean() > 0.02  # not a blank page
    coloured = (rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.3  # the data lines, not black axes or grey grid
    assert coloured.sum() > 2000


def test_queries_take_one_value_per_device(setup: Setup) -> None:
    prom = Prometheus(setup.prometheus)
    end = time.time()
    # team-b's pods share node-b gpu0: its memory counts once, not once per pod.
    for by, expected in (
        ("namespace", {"team-a": 8192.0, "team-b": 10240.0}),
        ("node", {"node-a": 8192.0, "node-b": 30720.0}),
    ):
        q = report_queries(by, Filters())  # type: ignore[arg-type]
        data = prom.query_range(q.used, end - 30, end, 1)
        got = {r["metric"][GROUP_LABELS[by][0]]: {float(v) for _, v in r["values"]} for r in data["result"]}
        assert got == {k: {v} for k, v in expected.items()}
        assert all(r["metric"]["simulated"] == "true" for r in data["result"])
    q = report_queries("device", Filters(node="node-b"))
    data = prom.query_range(q.util, end - 30, end, 1)
    assert sorted(r["metric"]["gpu"] for r in data["result"]) == ["0", "1"]


def test_status_summary_lines(setup: Setup) -> None:
    lines = utilisation_lines(setup.prometheus)
    assert len(lines) == 2
    assert lines[0].startswith("node-a: 2 GPUs, utilisation ")
    assert "framebuffer 8.0/160.0 GiB (5%), SIMULATED" in lines[0]
    assert lines[1].startswith("node-b: 2 GPUs") and "framebuffer 30.0/160.0 GiB (19%)" in lines[1]


def test_nothing_matching_names_the_query(setup: Setup, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="needs the report extra: pip install 'sro[report]'")
    done = _sro(
        "report", "--prometheus", setup.prometheus, "--namespace", "nope", "-o", str(tmp_path / "r.png")
    )
    assert done.returncode == 1
    assert f"Prometheus at {setup.prometheus} returned no data" in done.stderr
    assert 'DCGM_FI_DEV_GPU_UTIL{namespace="nope"}' in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "r.png").exists()


def test_not_prometheus_says_what_answered(setup: Setup, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="needs the report extra: pip install 'sro[report]'")
    done = _sro("report", "--prometheus", setup.exporter, "-o", str(tmp_path / "r.png"))
    assert done.returncode == 1
    assert f"{setup.exporter}/api/v1/query_range (query: " in done.stderr and "HTTP 404" in done.stderr
    assert "Traceback" not in done.stderr


def test_unreachable_prometheus_says_where(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="needs the report extra: pip install 'sro[report]'")
    url = f"http://127.0.0.1:{_free_port()}"
    done = _sro("report", "--prometheus", url, "-o", str(tmp_path / "r.png"))
    assert done.returncode == 1
    assert f"cannot reach Prometheus at {url}" in done.stderr and "Connection refused" in done.stderr
    assert "Traceback" not in done.stderr
    assert utilisation_lines(url) == []
