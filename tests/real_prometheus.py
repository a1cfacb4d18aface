"""Debian's real Prometheus for tests, and the dashboard's queries as Prometheus would get them.

Why a real server: a dashboard query or an alert rule that promtool accepts can still fail on the
real series (a label the exporter does not set, a `by` that matches nothing, a function on the wrong
type). The unit test scrapes a static exposition text served from this process; the e2e test scrapes
the exporter's pod. Both start Prometheus here, on a free port with a temporary data directory, and
stop it by its PID; the child also gets SIGTERM if the test process dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import http.server
import json
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sro.local.prometheus import scrape_job
from sro.local.scrapetargets import endpoints_targets as endpoints_targets  # re-exported for the tests

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
REPO = Path(__file__).resolve().parents[1]
MONITORING = REPO / "sro" / "manifests" / "monitoring"
RULES = MONITORING / "rules" / "sro-alerts.yaml"
DASHBOARD = MONITORING / "dashboards" / "sro-gpu.json"
JOB = "sro-exporter"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class PrometheusError(RuntimeError):
    pass


class Prometheus:
    """One Prometheus process: `with Prometheus.start(tmp, scrape_configs) as prom: prom.query(...)`."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log

    @classmethod
    @contextlib.contextmanager
    def start(
        cls,
        workdir: Path,
        scrape_configs: Sequence[Mapping[str, Any]],
        rule_files: Sequence[Path] = (RULES,),
        interval: str = "1s",
    ) -> Iterator[Prometheus]:
        config = {
            "global": {
                "scrape_interval": interval,
                "evaluation_interval": interval,
                "scrape_timeout": interval,
            },
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": list(scrape_configs),
        }
        cfg = workdir / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(config, sort_keys=False))
        port = free_port()
        log = workdir / "prometheus.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={cfg}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--storage.tsdb.retention.time=1h",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        prom = cls(proc, f"http://127.0.0.1:{port}", log)
        try:
            prom._wait_ready()
            yield prom
        finally:
            prom.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def _wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PrometheusError(f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        raise PrometheusError(f"prometheus not ready after {timeout}s:\n{self.log_tail()}")

    def api(self, path: str, **params: str | Sequence[str]) -> Any:
        """GET /api/v1/<path>: the `data` of a success, else PrometheusError with the server's error."""
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            body = json.load(e)
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        data = self.api("query", query=expr, time=str(at if at is not None else time.time()))
        result = data["result"]
        return result if isinstance(result, list) else [result]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        data = self.api("query_range", query=expr, start=str(start), end=str(end), step=str(step))
        return list(data["result"])

    def wait_for(self, expr: str, timeout: float = 60, what: str = "") -> list[dict[str, Any]]:
        """Poll an instant query until it returns something."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result:
                return result
            if time.monotonic() > deadline:
                targets = self.api("targets")["activeTargets"]
                health = [(t["scrapeUrl"], t["health"], t["lastError"]) for t in targets]
                raise PrometheusError(f"{what or expr}: nothing after {timeout}s; targets {health}")
            time.sleep(0.5)


@contextlib.contextmanager
def serve_text(text: str) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering every GET with `text` as Prometheus exposition; yields host:port."""
    body = text.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# --- the dashboard's queries ------------------------------------------------------------------------


@dataclass(frozen=True)
class PanelQuery:
    panel: str
    ref: str
    expr: str
    instant: bool

    @property
    def metrics(self) -> frozenset[str]:
        return metric_names(self.expr)


_METRIC = re.compile(r"\b(DCGM_[A-Z0-9_]+|sro_[a-z0-9_]+)\b")


def metric_names(expr: str) -> frozenset[str]:
    return frozenset(_METRIC.findall(expr))


def load_dashboard(path: Path = DASHBOARD) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    for p in dashboard.get("panels", []):
        yield p
        yield from p.get("panels", [])


def panel_queries(dashboard: Mapping[str, Any]) -> list[PanelQuery]:
    out = []
    for p in panels(dashboard):
        for t in p.get("targets", []):
            if t.get("expr"):
                out.append(PanelQuery(p["title"], t.get("refId", "A"), t["expr"], bool(t.get("instant"))))
    return out


_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<selector>.+?)\s*,\s*)?(?P<label>\w+)\s*\)\s*$")


def variable_queries(dashboard: Mapping[str, Any]) -> dict[str, tuple[str | None, str]]:
    """Query variables as `name -> (series selector or None, label)` from Grafana's `label_values()`."""
    out: dict[str, tuple[str | None, str]] = {}
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = _LABEL_VALUES.match(q)
        if not m:
            raise ValueError(f"variable {v['name']}: not a label_values() query: {q!r}")
        out[v["name"]] = (m["selector"], m["label"])
    return out


_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """Grafana's variable interpolation: `$name`, `${name}`, `${name:fmt}` and `[[name]]`, every
    variable known (an unknown one is an error, as it would show as an error in Grafana's panel)."""

    def repl(m: re.Match[str]) -> str:
        name = m[1] or m[2] or m[3]
        if name not in values:
            raise KeyError(f"no value for ${name} in {expr!r}")
        return values[name]

    return _VAR.sub(repl, expr)


def grafana_intervals(scrape_s: float, step_s: float, range_s: float) -> dict[str, str]:
    """$__interval, $__rate_interval and $__range as Grafana computes them for a panel."""
    rate = max(step_s + scrape_s, 4 * scrape_s)
    return {
        "__interval": f"{int(step_s * 1000)}ms",
        "__interval_ms": str(int(step_s * 1000)),
        "__rate_interval": f"{int(rate * 1000)}ms",
        "__range": f"{int(range_s)}s",
        "__range_s": str(int(range_s)),
        "__range_ms": str(int(range_s * 1000)),
    }


def expects_series(expr: str, text: str) -> bool:
    """Whether a query must return series on an exposition text: every metric it reads is there, and
    a query of the pods holding GPUs (`pod!=""`) has some pod to show (an idle node has none)."""
    if not metric_names(expr) <= exposition_metrics(text):
        return False
    return 'pod!=""' not in expr or re.search(r'[{,]pod="[^"]', text) is not None


def exposition_metrics(text: str) -> frozenset[str]:
    """Metric names that have samples in an exposition text."""
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return frozenset(names)


# --- kubernetes service discovery, for a Prometheus built without it ---------------------------------
# Debian's prometheus 2.42 has no kubernetes_sd_configs. The shipped scrape job (scrape/sro-exporter.yaml)
# is run with file_sd instead, fed the labels kubernetes_sd's `endpoints` role gives for the same
# Service and Endpoints objects, so its relabelling is what Prometheus really applies. The product does
# the same for the local cluster's Prometheus (sro/local/scrapetargets.py, sro/local/prometheus.py):
# the tests use its code, so what they check is what `sro local up --prometheus` runs.

SCRAPE_JOB = MONITORING / "scrape" / "sro-exporter.yaml"


def shipped_scrape_job(sd_file: Path, interval: str = "1s") -> dict[str, Any]:
    """scrape/sro-exporter.yaml with its kubernetes_sd swapped for a file_sd reading `sd_file`."""
    job = scrape_job(sd_file, interval)
    job["file_sd_configs"][0]["refresh_interval"] = interval
    return job
