"""The local cluster's Prometheus (`sro local up --prometheus`): its two daemons as data, the config
Debian's promtool accepts, the choice remembered and turned off with no process left, and the targets
loop (scrapetargets) following an exporter pod that moves, over a scripted API server.

The real thing, unit-sized: Prometheus started by the supervisor exactly as `up` starts it (its
config, rules and data under a temporary cluster directory, on a free port) scrapes an exporter
exposition through the targets file and the shipped job's relabelling, then `--no-prometheus`'s code
stops it. The cluster's own Prometheus: tests/e2e/test_local_prometheus.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sro.local import prometheus, scrapetargets, supervisor
from sro.local.cluster import LocalCluster
from sro.local.components import NodeFacts
from sro.local.layout import Layout, Ports
from sro.manifests import package_file
from tests.real_prometheus import REPO, free_port, serve_text

pytestmark = pytest.mark.timeout(60)
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
EXPOSITION = REPO / "tests" / "fixtures" / "monitoring" / "exposition.txt"  # an exporter's output


def _layout(tmp_path: Path, **ports: int) -> Layout:
    return Layout(state=tmp_path / "state", containerd_state=tmp_path / "containerd", ports=Ports(**ports))


def _flag(argv: tuple[str, ...], name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")]
    return value


# ---- the components -------------------------------------------------------------------------------
def test_the_targets_loop_starts_first_and_both_serve_health_on_their_own_ports(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    targets, server = prometheus.components(layout, python="/venv/bin/python")
    assert (targets.name, server.name) == ("prometheus-targets", "prometheus")
    assert targets.argv[:6] == ("/venv/bin/python", "-m", "sro", "-v", "local", "prometheus-targets")
    assert _flag(targets.argv, "output") == str(prometheus.targets_file(layout))
    assert _flag(targets.argv, "kubeconfig") == str(layout.admin_kubeconfig)
    assert targets.health.url == f"http://127.0.0.1:{layout.ports.prometheus_targets}/healthz"
    assert server.health.url == "http://127.0.0.1:9090/-/ready"
    assert targets.ports == (10391,) and server.ports == (9090,)
    # Python and Prometheus run in many copies on a machine: never taken for a stray daemon of ours
    assert not targets.exclusive and not server.exclusive


def test_prometheus_keeps_everything_under_the_cluster_directory_and_listens_on_loopback(
    tmp_path: Path,
) -> None:
    layout = _layout(tmp_path)
    _, server = prometheus.components(layout)
    assert server.argv[0] == "/usr/bin/prometheus"
    for flag in ("config.file", "storage.tsdb.path"):
        assert Path(_flag(server.argv, flag)).is_relative_to(layout.state / "prometheus")
    assert _flag(server.argv, "web.listen-address") == "127.0.0.1:9090"
    assert all(path.is_relative_to(layout.state) for path in server.files)


def test_the_config_runs_the_shipped_job_and_rules_every_2s(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    _, server = prometheus.components(layout)
    doc = yaml.safe_load(server.files[layout.state / "prometheus" / "prometheus.yml"])
    assert doc["global"] == {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "2s"}
    (job,) = doc["scrape_configs"]
    (shipped,) = yaml.safe_load(package_file("monitoring/scrape/sro-exporter.yaml"))
    assert job["job_name"] == shipped["job_name"] == "sro-exporter"  # the job the rules expect
    assert job["relabel_configs"] == shipped["relabel_configs"] and job["honor_labels"] is True
    assert "kubernetes_sd_configs" not in job
    assert job["file_sd_configs"] == [
        {"files": [str(prometheus.targets_file(layout))], "refresh_interval": "30s"}
    ]
    # the rules: every shipped file, copied unchanged, and listed
    rules = {p: text for p, text in server.files.items() if p.parent.name == "rules"}
    assert [p.name for p in rules] == ["sro-alerts.yaml"]
    assert list(rules.values()) == [package_file("monitoring/rules/sro-alerts.yaml")]
    assert doc["rule_files"] == [str(p) for p in rules]


@pytest.mark.skipif(not Path(PROMTOOL).exists(), reason="needs promtool (Debian's prometheus)")
def test_promtool_accepts_the_config_and_its_rules(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    _, server = prometheus.components(layout)
    for path, text in server.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    out = subprocess.run(
        [PROMTOOL, "check", "config", _flag(server.argv, "config.file")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr and "rules found" in out.stdout + out.stderr


# ---- the choice, and the cluster's view of it -----------------------------------------------------
def test_off_by_default_then_remembered_and_listed_by_status(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    cluster = LocalCluster(layout, NodeFacts("node-a", "10.1.2.3"))
    names = [c.name for c in cluster._components(layout.bin)]
    assert not prometheus.wanted(layout) and "prometheus" not in names
    said: list[str] = []
    prometheus.choose(layout, True, said.append)
    assert prometheus.wanted(layout) and said == []
    names = [c.name for c in cluster._components(layout.bin)]
    assert names[-2:] == ["prometheus-targets", "prometheus"]  # after the node's daemons: stopped first
    rows = {name: state for name, state, _ in cluster.status()}
    assert rows["prometheus"] == rows["prometheus-targets"] == "stopped"
    # `down` stops them even when no longer asked for
    prometheus.choose(layout, False, said.append)
    assert "prometheus" in [c.name for c in cluster._components(layout.bin, everything=True)]
    assert "prometheus" not in [c.name for c in cluster._components(layout.bin)]


def test_sro_local_env_exports_prometheus_url_when_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from sro.local import commands

    layout = _layout(tmp_path)
    monkeypatch.setattr(
        LocalCluster, "default", classmethod(lambda cls: cls(layout, NodeFacts("n", "10.0.0.1")))
    )
    out = CliRunner().invoke(commands.local, ["env"])
    assert out.exit_code == 0 and "PROMETHEUS_URL" not in out.output
    prometheus.choose(layout, True, lambda _: None)
    out = CliRunner().invoke(commands.local, ["env"])
    assert "export PROMETHEUS_URL=http://127.0.0.1:9090\n" in out.output


# ---- the real Prometheus, started and stopped as `up` and `--no-prometheus` do ------------------
@pytest.fixture
def exporter_text() -> Iterator[str]:
    with serve_text(EXPOSITION.read_text()) as target:
        yield target


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


@pytest.mark.skipif(not Path(prometheus.BINARY).exists(), reason="needs Debian's prometheus")
def test_prometheus_scrapes_the_targets_file_and_stops_with_no_process_left(
    tmp_path: Path, exporter_text: str
) -> None:
    layout = _layout(tmp_path, prometheus=free_port())
    layout.run.mkdir(parents=True)
    _, server = prometheus.components(layout)
    for path, text in server.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    ip, port = exporter_text.rsplit(":", 1)
    svc = {
        "metadata": {
            "name": "sro-exporter-simulated-gpu",
            "namespace": "sro-system",
            "labels": {"app.kubernetes.io/name": "sro-exporter"},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": port},
        }
    }
    eps = _endpoints("sro-system", "sro-exporter-simulated-gpu", ip, "sro-exporter-x1y2z")
    scrapetargets.write_if_changed(
        prometheus.targets_file(layout), scrapetargets.render(scrapetargets.endpoint_groups([svc], [eps]))
    )
    proc = supervisor.start(layout, server)
    try:
        base = prometheus.url(layout)
        deadline = time.monotonic() + 40
        up: list[dict[str, Any]] = []
        while not up and time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                up = _get(f"{base}/api/v1/query?query=up%3D%3D1")["data"]["result"]
            except OSError:
                continue
        assert up, supervisor.log_tail(layout, "prometheus")
        assert up[0]["metric"]["exporter_pod"] == "sro-exporter-x1y2z"
        assert up[0]["metric"]["job"] == "sro-exporter" and up[0]["metric"]["instance"] == exporter_text
        assert (layout.state / "prometheus" / "data").is_dir()
        rules = _get(f"{base}/api/v1/rules")["data"]["groups"]
        assert any(r["name"] == "SroGpuXidError" for g in rules for r in g["rules"])
    finally:
        said: list[str] = []
        prometheus.choose(layout, False, said.append)
    assert said == ["Stopped prometheus"]
    assert supervisor._start_time(proc.pid) is None  # gone, not a zombie
    assert not layout.pidfile("prometheus").exists()
    assert supervisor.port_owner(layout.ports.prometheus) is None


# ---- the targets loop ----------------------------------------------------------------------------
def _endpoints(ns: str, name: str, ip: str, pod: str, rv: str = "1") -> dict[str, Any]:
    addr = {"ip": ip, "nodeName": "node-a", "targetRef": {"kind": "Pod", "name": pod}}
    return {
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv},
        "subsets": [{"addresses": [addr], "ports": [{"name": "metrics", "port": 9400, "protocol": "TCP"}]}],
    }


SVC_NAME = "sro-exporter-simulated-gpu"
SVC: dict[str, Any] = {
    "metadata": {
        "name": SVC_NAME,
        "namespace": "sro-system",
        "resourceVersion": "1",
        "labels": {"app.kubernetes.io/name": "sro-exporter"},
        "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9400"},
    }
}


def test_groups_carry_kubernetes_sd_labels_and_skip_endpoints_without_a_service() -> None:
    eps = _endpoints("sro-system", "sro-exporter-simulated-gpu", "10.244.0.7", "sro-exporter-abc")
    orphan = _endpoints("gone", "sro-exporter-x", "10.244.0.9", "sro-exporter-x")
    (group,) = scrapetargets.endpoint_groups([SVC], [orphan, eps])
    assert group["targets"] == ["10.244.0.7:9400"]
    labels = group["labels"]
    assert labels["__meta_kubernetes_service_label_app_kubernetes_io_name"] == "sro-exporter"
    assert labels["__meta_kubernetes_service_annotation_prometheus_io_scrape"] == "true"
    assert labels["__meta_kubernetes_pod_name"] == "sro-exporter-abc"
    assert labels["__meta_kubernetes_pod_node_name"] == "node-a"
    assert labels["__meta_kubernetes_endpoint_ready"] == "true"
    assert scrapetargets.summary([group]) == "10.244.0.7:9400 (sro-system/sro-exporter-abc)"


def test_the_file_is_replaced_atomically_and_only_when_it_changes(tmp_path: Path) -> None:
    out = tmp_path / "sd" / "targets.json"
    assert scrapetargets.write_if_changed(out, "[]\n")
    inode = out.stat().st_ino
    assert not scrapetargets.write_if_changed(out, "[]\n") and out.stat().st_ino == inode
    assert scrapetargets.write_if_changed(out, '[{"targets": []}]\n')
    assert out.stat().st_ino != inode  # a rename, never a rewrite in place
    assert [p.name for p in out.parent.iterdir()] == ["targets.json"]


class FakeApi:
    """Lists of Services and Endpoints, then one scripted watch of Endpoints (held open after)."""

    def __init__(self, endpoints_events: list[dict[str, Any]]) -> None:
        self.events = endpoints_events
        self.watched = False
        self.refuse = False

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.refuse:
            return httpx.Response(403, json={"message": "endpoints is forbidden"})
        kind = request.url.path.rsplit("/", 1)[1]
        assert request.url.params["labelSelector"] == "app.kubernetes.io/name=sro-exporter"
        if request.url.params.get("watch"):
            if kind == "endpoints" and not self.watched:
                self.watched = True
                await asyncio.sleep(0.5)  # after the first file is written
                return httpx.Response(200, content="\n".join(json.dumps(e) for e in self.events).encode())
            await asyncio.sleep(3600)
        items = [SVC] if kind == "services" else [_endpoints("sro-system", SVC_NAME, "10.244.0.7", "p1")]
        return httpx.Response(200, json={"metadata": {"resourceVersion": "1"}, "items": items})


def test_the_loop_follows_a_moved_exporter_pod_and_says_so_in_its_health(tmp_path: Path) -> None:
    moved = _endpoints("sro-system", SVC_NAME, "10.244.0.12", "p2", rv="5")
    api = FakeApi([{"type": "MODIFIED", "object": moved}])
    out = tmp_path / "targets.json"

    async def go() -> list[list[str]]:
        http = httpx.AsyncClient(transport=httpx.MockTransport(api), base_url="https://api")
        targets = scrapetargets.Targets(http, out)
        server = await scrapetargets._serve_health(targets, 0)
        port = server.sockets[0].getsockname()[1]
        tasks = [
            asyncio.create_task(c)
            for c in (targets.services.run(), targets.endpoints.run(), targets.keep_current())
        ]
        seen: list[list[str]] = []
        codes: list[int] = []
        for _ in range(300):
            await asyncio.sleep(0.01)
            if out.exists():
                now = [g["targets"][0] for g in json.loads(out.read_text())]
                if not seen or seen[-1] != now:
                    seen.append(now)
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.write(b"GET /healthz HTTP/1.0\r\n\r\n")
                    codes.append(int((await reader.readline()).split()[1]))
                    writer.close()
            if len(seen) == 2:
                break
        api.refuse = True
        targets.endpoints.error = "endpoints is forbidden"  # what a refused list/watch leaves
        assert targets.health()[0] == 503
        for t in tasks:
            t.cancel()
        server.close()
        assert codes == [200, 200]
        return seen

    assert asyncio.run(go()) == [["10.244.0.7:9400"], ["10.244.0.12:9400"]]


def test_a_service_without_endpoints_gives_an_empty_file_not_a_stale_one(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    scrapetargets.write_if_changed(out, scrapetargets.render(scrapetargets.endpoint_groups([SVC], [])))
    assert json.loads(out.read_text()) == []
    assert os.access(out, os.R_OK)
