"""The local cluster's own Prometheus (`sro local up --prometheus`) on the real cluster.

Brought up with the CLI as a user would, it is supervised like the other daemons (`sro local
status`, its data under the cluster's directory, `sro local env` exporting PROMETHEUS_URL). Its
targets come from the exporter Service's Endpoints through the targets loop: the exporter here is
test_monitoring's (the simulated driver and device plugin of test_device_plugin, 4 GPUs, the exporter
collecting every 2 s, three pods holding devices), and the series Prometheus stores carry that pod's
name and address. Deleting the exporter pod gives a new pod with a new name: Prometheus follows it.
Then the demo's monitoring stage runs on it (a pod holding two devices under `sro simulate load`, an
Xid firing SroGpuXidError and resolving, `sro report`): the alert's states are read back from
Prometheus's API, and report.png from disk (not blank, drawn from the exporter pod's samples).
Last, `sro local up --no-prometheus` leaves no Prometheus process and frees its ports (`sro local
down` stops the same daemons: tests/e2e/test_zz_down_and_up.py). Prometheus is left as it was found.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sro.demo import monitoring
from sro.local import prometheus, supervisor
from sro.local.cluster import LocalCluster
from sro.report.prometheus import Prometheus
from sro.report.summary import utilisation_lines
from tests.e2e.helpers import figure, get_json, sro, wait_for
from tests.e2e.test_device_plugin import DRIVER_ROOT, RESOURCE, busybox, driver, plugin  # noqa: F401  (fixtures)
from tests.e2e.test_monitoring import NS, exporter  # noqa: F401  (fixture)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.root,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        not Path(prometheus.BINARY).exists(), reason=f"needs Debian's prometheus ({prometheus.BINARY})"
    ),
]
EXPORTER = "app.kubernetes.io/name=sro-exporter"


@pytest.fixture(scope="module")
def local_prom(cluster: LocalCluster) -> Iterator[Prometheus]:
    """`sro local up --prometheus` on the shared cluster; afterwards as it was."""
    was = prometheus.wanted(cluster.layout)
    try:  # restored even when the start fails: a remembered flag would start it at every later `up`
        out = sro(cluster, "local", "up", "--prometheus")
        assert out.returncode == 0, out.stdout + out.stderr
        assert "Prometheus at http://127.0.0.1:9090" in out.stderr
        yield Prometheus(prometheus.url(cluster.layout), timeout=10)
    finally:
        if was != prometheus.wanted(cluster.layout):
            sro(cluster, "local", "up", "--prometheus" if was else "--no-prometheus")


def _api(prom: Prometheus, path: str) -> Any:
    """GET /api/v1/<path> (rules, targets): the `data` of Prometheus's answer."""
    with urllib.request.urlopen(f"{prom.url}/api/v1/{path}", timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]


def _vector(prom: Prometheus, expr: str) -> list[dict[str, Any]]:
    return list(prom.query(expr)["result"])


def _targets(cluster: LocalCluster) -> list[tuple[str, str]]:
    """(address, pod) of every group in the targets file."""
    try:
        groups = json.loads(prometheus.targets_file(cluster.layout).read_text())
    except (OSError, ValueError):
        return []
    return [(g["targets"][0], g["labels"].get("__meta_kubernetes_pod_name", "")) for g in groups]


def _exporter_pods(cluster: LocalCluster) -> list[dict[str, Any]]:
    """The exporter pods of NS that are Ready, with an address."""
    out = []
    for p in get_json(cluster, "pods", "-n", NS, "-l", EXPORTER)["items"]:
        conds = {c["type"]: c["status"] for c in p["status"].get("conditions", [])}
        if (
            conds.get("Ready") == "True"
            and p["status"].get("podIP")
            and not p["metadata"].get("deletionTimestamp")
        ):
            out.append(p)
    return out


def test_up_runs_it_supervised_under_the_cluster_directory(
    cluster: LocalCluster, local_prom: Prometheus
) -> None:
    rows = {name: (state, detail) for name, state, detail in cluster.status()}
    assert rows["prometheus"][0] == rows["prometheus-targets"][0] == "running", rows
    proc = supervisor.running(cluster.layout, "prometheus")
    assert proc is not None
    argv = supervisor.cmdline(proc.pid)
    assert argv[0] == prometheus.BINARY
    assert f"--storage.tsdb.path={cluster.layout.state / 'prometheus' / 'data'}" in argv
    assert (cluster.layout.state / "prometheus" / "data").is_dir()
    table = sro(cluster, "local", "status")
    assert "prometheus-targets" in table.stdout and f"pid {proc.pid}" in table.stdout, table.stdout
    env = sro(cluster, "local", "env").stdout
    assert "export PROMETHEUS_URL=http://127.0.0.1:9090\n" in env
    rules = [r["name"] for g in _api(local_prom, "rules")["groups"] for r in g["rules"]]
    assert "SroGpuXidError" in rules and "SroExporterAbsent" in rules  # the shipped rules, loaded


def test_its_series_come_from_the_exporter_pod(
    cluster: LocalCluster,
    local_prom: Prometheus,
    exporter: dict[str, Any],  # noqa: F811
) -> None:
    name, ip = exporter["metadata"]["name"], exporter["status"]["podIP"]
    wait_for(
        "the targets file naming the exporter pod", lambda: (f"{ip}:9400", name) in _targets(cluster), 30
    )
    expr = f'up{{job="sro-exporter", exporter_pod="{name}"}} == 1'
    wait_for("Prometheus scraping the exporter pod", lambda: _vector(local_prom, expr), 60)
    (up,) = _vector(local_prom, expr)
    assert up["metric"]["instance"] == f"{ip}:9400" and up["metric"]["node"] == cluster.node_name
    # the pods the exporter attributes, as it sees them now: a static file could not know them
    held = _vector(
        local_prom, f'count by (pod) (DCGM_FI_DEV_GPU_UTIL{{exporter_pod="{name}", namespace="{NS}"}})'
    )
    assert {r["metric"]["pod"] for r in held} == {"train", "share-a", "share-b"}, held
    # `sro status`'s utilisation line, with no URL given
    lines = utilisation_lines()
    assert any(line.startswith(f"{cluster.node_name}: ") and "GPUs, utilisation" in line for line in lines), (
        lines
    )


def test_a_moved_exporter_pod_is_followed(
    cluster: LocalCluster,
    local_prom: Prometheus,
    exporter: dict[str, Any],  # noqa: F811
) -> None:
    (old,) = _exporter_pods(cluster)
    old_name = old["metadata"]["name"]
    t0 = time.monotonic()
    cluster.kubectl("delete", "pod", old_name, "-n", NS, "--wait=false", "--grace-period=1")
    seen: dict[str, float] = {}

    def followed() -> bool:
        now = time.monotonic() - t0
        in_file = {pod for _, pod in _targets(cluster)}
        if old_name not in in_file:
            seen.setdefault("the old pod out of the targets file", now)
        new = in_file - {old_name}
        if new:
            seen.setdefault("the new pod in the targets file", now)
        if [p for p in _exporter_pods(cluster) if p["metadata"]["name"] != old_name]:
            seen.setdefault("the new pod Ready", now)
        if new and _vector(local_prom, f'up{{job="sro-exporter", exporter_pod="{min(new)}"}} == 1'):
            seen.setdefault("the new pod scraped", now)
        return len(seen) == 4

    wait_for(
        "Prometheus following the new exporter pod", followed, 180, why=lambda: f"{seen} {_targets(cluster)}"
    )
    figure(
        "local Prometheus after an exporter pod's deletion: "
        + ", ".join(f"{k} at {v:.1f} s" for k, v in seen.items())
    )
    (new,) = _exporter_pods(cluster)
    name = new["metadata"]["name"]
    assert _targets(cluster) == [(f"{new['status']['podIP']}:9400", name)]
    active = _api(local_prom, "targets")["activeTargets"]
    assert [t["labels"]["exporter_pod"] for t in active if t["labels"].get("job") == "sro-exporter"] == [name]


def test_the_demo_stage_fires_an_alert_resolves_it_and_draws_the_report(
    cluster: LocalCluster,
    local_prom: Prometheus,
    exporter: dict[str, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    said: list[str] = []
    out = tmp_path / "report.png"
    m = monitoring.run(cluster, said.append, RESOURCE, str(DRIVER_ROOT), out)
    print("\n".join(said))
    (pod,) = _exporter_pods(cluster)
    assert m.exporter_pod == pod["metadata"]["name"] and m.target == f"{pod['status']['podIP']}:9400"
    assert len(m.devices) == 2 and len({d.uuid for d in m.devices}) == 2
    start, end = m.window
    first = m.devices[0]

    # the alert, from Prometheus's API: it fired for the faulty device with the rule's labels ...
    assert m.alert["state"] == "firing"
    labels = m.alert["labels"]
    assert labels["alertname"] == "SroGpuXidError" and labels["severity"] == "critical"
    assert (labels["UUID"], labels["gpu"], labels["simulated"]) == (first.uuid, first.gpu, "true")
    assert labels["Hostname"] == cluster.node_name
    assert m.alert["annotations"]["summary"] == f"Xid 48 on GPU {first.gpu} of node {cluster.node_name}"
    fired = local_prom.query_range(
        f'ALERTS{{alertname="SroGpuXidError", alertstate="firing", UUID="{first.uuid}"}}', start, end, 1
    )["result"]
    assert fired and fired[0]["values"], "no firing sample of ALERTS in the stage"
    # ... and is resolved now: no active alert for it, the rule inactive
    active = local_prom.alerts()["alerts"]
    assert [a for a in active if a["labels"]["alertname"] == "SroGpuXidError"] == []
    (rule,) = [
        r for g in _api(local_prom, "rules")["groups"] for r in g["rules"] if r["name"] == "SroGpuXidError"
    ]
    assert rule["state"] == "inactive" and rule["health"] == "ok"
    figure(
        f"local Prometheus: SroGpuXidError fired {m.fired_after:.1f} s after the Xid, resolved {m.resolved_after:.1f} s after --clear"
    )

    # the load came from the exporter pod's samples
    loaded = local_prom.query_range(
        f'max_over_time(DCGM_FI_DEV_GPU_UTIL{{UUID="{first.uuid}", exporter_pod="{m.exporter_pod}"}}[10s])',
        start,
        end,
        2,
    )["result"]
    assert loaded and max(float(v) for r in loaded for _, v in r["values"]) >= 80

    # report.png, read back: a real PNG with data lines drawn on it
    image = pytest.importorskip(
        "matplotlib.image", reason="needs the report extra: pip install 'sro[report]'"
    )
    assert m.report == out.resolve() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "SIMULATED devices" in m.report_output, m.report_output
    pixels = image.imread(out)
    rgb = pixels[..., :3]
    assert (rgb < 0.95).any(axis=-1).mean() > 0.02  # not a blank page
    coloured = (rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.3  # the data lines, not black axes or grey grid
    assert coloured.sum() > 2000
    # the stage took its pod and load away again
    wait_for(
        "the stage's pod gone",
        lambda: (
            cluster.kubectl("get", "pod", monitoring.POD, "-n", monitoring.NS, check=False).returncode != 0
        ),
        60,
    )
    loads = (
        json.loads((DRIVER_ROOT / "loads.json").read_text()) if (DRIVER_ROOT / "loads.json").exists() else {}
    )
    assert not any(d.uuid in json.dumps(loads) for d in m.devices), loads


def test_no_prometheus_stops_it_with_no_process_left(cluster: LocalCluster, local_prom: Prometheus) -> None:
    procs = [
        p for n in (prometheus.PROMETHEUS, prometheus.TARGETS) if (p := supervisor.running(cluster.layout, n))
    ]
    assert len(procs) == 2
    out = sro(cluster, "local", "up", "--no-prometheus")
    assert out.returncode == 0, out.stderr
    assert "Stopped prometheus" in out.stderr and "Stopped prometheus-targets" in out.stderr
    for p in procs:
        assert supervisor._start_time(p.pid) is None, f"pid {p.pid} still there"
    assert supervisor.port_owner(cluster.layout.ports.prometheus) is None
    assert supervisor.port_owner(cluster.layout.ports.prometheus_targets) is None
    assert "prometheus" not in {name for name, _, _ in cluster.status()}
    assert "PROMETHEUS_URL" not in sro(cluster, "local", "env").stdout
    assert cluster.is_healthy()  # the rest of the cluster goes on
