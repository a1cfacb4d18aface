"""Feature discovery: one full pass (8-GPU fake tree, this machine) and the daemon's resident memory.

Baselines, measured in the same run:
- a pass vs. only reading the same files and listing the same directories (captured with a
  Recording of one pass), with plain open()/scandir(): the cost of discovery's own logic on top of
  the unavoidable I/O; measured in SRO_BENCH_PAIRS alternating batches, goal at most 2x. This read
  floor leaves out the paths the pass looks up and finds absent (an optional attribute such as
  `sriov_totalvfs` on a device without SR-IOV, /sys/fs/selinux/enforce without SELinux): the pass
  makes only lookups a node can answer either way — the ones that could not succeed are skipped
  (sro.node.discovery's listings of /sys/kernel/iommu_groups and /sys/devices/virtual/net) — and
  an informational row times it against every lookup it makes (the read floor plus one stat of
  each absent path), so that neither floor hides the other;
- a pass is what the daemon runs (`_daemon_pass`): the scan noting every path it reads, and the
  stat of those outside /sys and /proc that the daemon's watch between passes compares against
  (sro.node.discovery.inputs), then the labels;
- the pass times are a daemon's steady state: a file read again with the same content is not
  parsed again (the kernel config, os-release, the simulated device list) and a source's labels
  are not derived again from equal features (sro.node.discovery.remembered); every file is still
  read and every directory listed on every pass. An informational row times a first pass (all
  of that forgotten before each one, as in a freshly started daemon) against the same read floor;
- the daemon (`sro discover --publish`, publishing every 0.2 s to a small in-process API server that
  serves one Node with GET and merge PATCH) vs. a bare `python -c` process of the same interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from benchmarks.harness import PAIRS, Figure, paired_figure, paired_timings, percentile, rss_mib
from sro.host.reading import Recording
from sro.host.root import HostRoot
from sro.node.discovery.commands import discover
from sro.node.discovery.config import Config
from sro.node.discovery.inputs import InputWatch
from sro.node.discovery.labeling import build_labels
from sro.node.discovery.remembered import forget
from sro.node.discovery.sources import SOURCES

ROOT = Path(__file__).resolve().parent.parent
GPU_TREE = ROOT / "tests" / "hosts" / "nvidia-8gpu" / "root"


def _read_same_files(recording: Recording) -> None:
    for d in recording.dirs:
        try:
            with os.scandir(d) as it:
                for _ in it:
                    pass
        except OSError:
            pass
    for f in recording.files:
        try:
            with open(f, "rb") as fh:
                fh.read()
        except OSError:
            pass


def _look_up_same_paths(recording: Recording) -> None:
    """The read floor, and one lookup of each path the pass found absent."""
    _read_same_files(recording)
    for path in recording.absent:
        try:  # noqa: SIM105  (a timed baseline: suppress() would add a context manager per lookup)
            os.stat(path)
        except OSError:
            pass


def _daemon_pass(host: HostRoot, watch: InputWatch) -> None:
    """One pass as `run_daemon` makes it (the labels of `discover`, and what the watch keeps)."""
    watch.before_pass()
    build_labels(watch.scan(Config()), Config(), SOURCES)


def _first_pass(host: HostRoot) -> None:
    forget()  # nothing remembered from earlier passes: a freshly started daemon's first pass
    _daemon_pass(host, InputWatch(host))


def _pass_figures(name: str, host: HostRoot, repeat: int) -> list[Figure]:
    """A pass against the read floor in PAIRS alternating batches; each batch gives its median and p95.
    Then, informational: against every lookup the pass makes, and a first pass."""
    recording = Recording()
    forget()
    discover(host, Config(), recording)
    per_pair = max(1, repeat // PAIRS)
    watch = InputWatch(host)
    work, base = paired_timings(lambda: _daemon_pass(host, watch), lambda: _read_same_files(recording),
                                per_pair)  # fmt: skip
    medians, floors = [percentile(w, 50) * 1e3 for w in work], [percentile(b, 50) * 1e3 for b in base]
    floor = f"read the same {len(recording.files)} files + {len(recording.dirs)} dirs"
    target = "<= 2x the read floor" + (", well under 50 ms" if "8-GPU" in name else "")
    lookups, every = paired_timings(lambda: _daemon_pass(host, watch), lambda: _look_up_same_paths(recording),
                                    per_pair)  # fmt: skip
    first, first_base = paired_timings(lambda: _first_pass(host), lambda: _read_same_files(recording),
                                       per_pair)  # fmt: skip
    return [
        paired_figure(f"discovery pass, {name} (median)", "ms", floor,
                      medians, floors, goal=2.0, target=target),
        paired_figure(f"discovery pass, {name} (p95)", "ms", "same, p95",
                      [percentile(w, 95) * 1e3 for w in work], [percentile(b, 95) * 1e3 for b in base],
                      goal=None),
        paired_figure(f"discovery pass, {name}, vs every lookup (median)", "ms",
                      f"same + {len(recording.absent)} absent paths looked up",
                      [percentile(w, 50) * 1e3 for w in lookups], [percentile(b, 50) * 1e3 for b in every],
                      goal=None),
        paired_figure(f"discovery first pass, {name} (median)", "ms", f"{floor}; nothing remembered",
                      [percentile(w, 50) * 1e3 for w in first], [percentile(b, 50) * 1e3 for b in first_base],
                      goal=None),
    ]  # fmt: skip


class _NodeServer(BaseHTTPRequestHandler):
    node: ClassVar[dict[str, Any]] = {}
    lock = threading.Lock()

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        with self.lock:
            self._send(200, self.node)

    def do_PATCH(self) -> None:
        patch = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["metadata"]
        with self.lock:
            md = self.node["metadata"]
            for key in ("labels", "annotations"):
                for k, v in patch.get(key, {}).items():
                    if v is None:
                        md[key].pop(k, None)
                    else:
                        md[key][k] = v
            md["resourceVersion"] = str(int(md["resourceVersion"]) + 1)
            self._send(200, self.node)


def _daemon_rss(seconds: float = 4.0) -> tuple[float, float]:
    _NodeServer.node = {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "bench", "labels": {"kubernetes.io/hostname": "bench"}, "annotations": {}, "resourceVersion": "1"}}  # fmt: skip
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NodeServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "bench",
            "clusters": [{"name": "bench", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
            "users": [{"name": "bench", "user": {"token": "bench"}}],
            "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
        }))  # fmt: skip
        argv = [sys.executable, "-m", "sro", "discover", "--publish", "--node-name", "bench",
                "--kubeconfig", str(kubeconfig), "--sleep-interval", "0.2s"]  # fmt: skip
        daemon = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        bare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            time.sleep(seconds)
            labelled = len(_NodeServer.node["metadata"]["labels"]) > 1
            if not labelled or daemon.poll() is not None:
                raise RuntimeError("the daemon did not publish to the benchmark API server")
            return _hwm_mib(daemon.pid), rss_mib(bare.pid)
        finally:
            for p in (daemon, bare):
                p.terminate()
                p.wait(timeout=10)
            server.shutdown()


def _hwm_mib(pid: int) -> float:
    """Peak resident memory (VmHWM) of a process: what a memory limit must allow."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return rss_mib(pid)


def run() -> list[Figure]:
    figures = _pass_figures("8-GPU tree", HostRoot.at(GPU_TREE), repeat=200)
    figures += _pass_figures("this machine", HostRoot.at("/"), repeat=100)
    daemon, bare = _daemon_rss()
    figures.append(
        Figure(
            "discovery daemon peak RSS",
            daemon,
            bare,
            "MiB",
            "bare `python -c` process",
            "< 64 MiB",
            limit=64.0,
        )
    )
    return figures


if __name__ == "__main__":
    for f in run():
        print(
            f"{f.name}: {f.value:.2f} {f.unit} vs {f.baseline:.2f} ({f.baseline_name}) = {f.ratio:.1f}x {f.target}"
        )
