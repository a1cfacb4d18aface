"""The exporter in the real cluster, scraped by Debian's real Prometheus on the host.

The simulated driver and the device plugin come from test_device_plugin's fixtures (4 GPUs, the last
time-sliced in two under `<resource>.shared`). This test renders sro/manifests/monitoring/ with
`prometheus_operator: false` into a namespace of its own (its cluster role and binding renamed, so
an installed sro keeps its own), runs a pod holding a whole GPU and two pods sharing the time-sliced
one, and starts Prometheus with the shipped scrape job (scrape/sro-exporter.yaml), fed the real
Service and Endpoints through file_sd (Debian's Prometheus has no kubernetes_sd), and the alert
rules. Then: every dashboard query — panels and template variables, Grafana's variables substituted —
answers without error and with series, the pods are attributed, the rules evaluate without error,
and an injected Xid raises SroGpuXidError. Everything it made is removed at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sro.local.cluster import LocalCluster
from sro.manifests import render
from tests.e2e.helpers import get_json, sleeping_pod, wait_for
from tests.e2e.test_device_plugin import RESOURCE, SHARED, busybox, driver, plugin  # noqa: F401  (fixtures)
from tests.real_prometheus import (
    JOB,
    PROMETHEUS,
    Prometheus,
    PrometheusError,
    endpoints_targets,
    exposition_metrics,
    grafana_intervals,
    load_dashboard,
    panel_queries,
    shipped_scrape_job,
    substitute,
    variable_queries,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.root,
    pytest.mark.skipif(not Path(PROMETHEUS).exists(), reason=f"needs Prometheus ({PROMETHEUS})"),
]

NS = "sro-e2e-monitoring"
NAME = "sro-e2e-monitoring"
SR = "sro-e2e-monitoring"
SRO = [sys.executable, "-m", "sro"]


def _exporter_objects(image: str) -> list[dict[str, Any]]:
    docs = render(
        "monitoring",
        namespace=NS,
        image=image,
        pull_policy="Never",
        recipe="simulated-gpu",
        name=NAME,
        sr=SR,
        interval="2s",
        prometheus_operator=False,
    )
    kinds = {d["kind"] for d in docs}
    assert "PrometheusRule" not in kinds and "ServiceMonitor" not in kinds
    for d in docs:  # cluster-wide objects of sro install: ours get a name of their own
        if d["kind"] == "ClusterRole":
            d["metadata"]["name"] = NAME
        if d["kind"] == "ClusterRoleBinding":
            d["metadata"]["name"] = NAME
            d["roleRef"]["name"] = NAME
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    return [namespace, *(d for d in docs if d["kind"] != "Namespace")]


@pytest.fixture(scope="module")
def exporter(cluster: LocalCluster, sro_image: str, plugin: int, busybox: str) -> Iterator[dict[str, Any]]:  # noqa: F811
    """The exporter DaemonSet and three GPU pods in NS; yields the exporter pod."""
    objs = _exporter_objects(sro_image)
    pods = [
        sleeping_pod("train", NS, RESOURCE, busybox),
        sleeping_pod("share-a", NS, SHARED, busybox),
        sleeping_pod("share-b", NS, SHARED, busybox),
    ]
    cluster_scoped = [d for d in objs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    try:
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objs))
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(pods))

        def ready_pod() -> dict[str, Any] | None:
            items = get_json(cluster, "pods", "-n", NS, "-l", "app.kubernetes.io/name=sro-exporter")["items"]
            for p in items:
                conds = {c["type"]: c["status"] for c in p["status"].get("conditions", [])}
                if conds.get("Ready") == "True" and p["status"].get("podIP"):
                    return dict(p)
            return None

        def why() -> str:
            out = cluster.kubectl("get", "pods", "-n", NS, "-o", "wide", check=False).stdout
            logs = cluster.kubectl(
                "logs", "-n", NS, "-l", "app.kubernetes.io/name=sro-exporter", "--tail=30", check=False
            )
            return out + logs.stdout + logs.stderr

        wait_for("the exporter pod Ready", ready_pod, timeout=180, why=why)
        wait_for(
            "the GPU pods Running",
            lambda: all(
                get_json(cluster, "pod", p["metadata"]["name"], "-n", NS)["status"].get("phase") == "Running"
                for p in pods
            ),
            timeout=120,
            why=why,
        )
        pod = ready_pod()
        assert pod is not None
        yield pod
    finally:
        cluster.kubectl(
            "delete", "namespace", NS, "--ignore-not-found", "--wait=true", timeout=180, check=False
        )
        cluster.kubectl(
            "delete", "--ignore-not-found", "-f", "-", input=yaml.safe_dump_all(cluster_scoped), check=False
        )


@pytest.fixture(scope="module")
def prometheus(
    cluster: LocalCluster, exporter: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Prometheus, str]]:
    """Prometheus on the host with the shipped scrape job and the alert rules; (prom, target)."""
    svc = get_json(cluster, "service", NAME, "-n", NS)
    eps = get_json(cluster, "endpoints", NAME, "-n", NS)
    groups = endpoints_targets(svc, eps)
    assert groups, f"the exporter's Service has no endpoints: {eps}"
    work = tmp_path_factory.mktemp("prometheus")
    sd = work / "targets.json"
    sd.write_text(json.dumps(groups))
    target = f"{exporter['status']['podIP']}:9400"
    with Prometheus.start(work, [shipped_scrape_job(sd)]) as prom:
        prom.wait_for(f'count_over_time(up{{job="{JOB}"}}[1m]) >= 6', what="six scrapes of the exporter")
        # the exporter collects every 2 s: wait until it has seen the pods
        prom.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{namespace="{NS}", pod="share-b"}}', what="the pods' series")
        yield prom, target


def _exposition(target: str) -> str:
    with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as r:
        return str(r.read().decode())


def test_the_shipped_scrape_job_finds_the_exporter(
    prometheus: tuple[Prometheus, str], exporter: dict[str, Any], cluster: LocalCluster
) -> None:
    prom, target = prometheus
    (up,) = prom.query(f'up{{job="{JOB}"}}')
    assert up["metric"]["instance"] == target and up["value"][1] == "1"
    assert up["metric"]["node"] == cluster.node_name
    assert up["metric"]["exporter_pod"] == exporter["metadata"]["name"]


def test_pods_are_attributed_time_sliced_ones_included(prometheus: tuple[Prometheus, str]) -> None:
    prom, _ = prometheus
    held = prom.query(f'count by (pod, UUID) (DCGM_FI_DEV_GPU_UTIL{{namespace="{NS}"}})')
    by_pod = {r["metric"]["pod"]: r["metric"]["UUID"] for r in held}
    assert set(by_pod) == {"train", "share-a", "share-b"}, held
    assert by_pod["share-a"] == by_pod["share-b"] != by_pod["train"]  # two pods on one device
    assert prom.query('count(DCGM_FI_DEV_GPU_TEMP{simulated!="true"})') == []


def test_every_dashboard_query_answers(prometheus: tuple[Prometheus, str], cluster: LocalCluster) -> None:
    prom, target = prometheus
    available = exposition_metrics(_exposition(target))
    dash = load_dashboard()
    base = grafana_intervals(1.0, step_s=2, range_s=30) | {"datasource": "prometheus"}
    shared_gpu = prom.query(f'DCGM_FI_DEV_GPU_UTIL{{namespace="{NS}", pod="share-a"}}')[0]["metric"]["gpu"]
    value_sets = [
        base | {"instance": ".*", "node": ".*", "gpu": ".*", "namespace": ".*"},
        base | {"instance": target, "node": cluster.node_name, "gpu": shared_gpu, "namespace": NS},
    ]
    end = time.time()
    failures, answered = [], 0
    for values in value_sets:
        for q in panel_queries(dash):
            expr = substitute(q.expr, values)
            try:
                instant = prom.query(expr, at=end)
                ranged = prom.query_range(expr, start=end - 30, end=end, step=2)
            except PrometheusError as e:
                failures.append(f"{q.panel} [{q.ref}]: {e}")
                continue
            if not q.metrics <= available:
                failures.append(
                    f"{q.panel} [{q.ref}]: the exporter serves no {sorted(q.metrics - available)}"
                )
            elif not (instant and ranged):
                failures.append(f"{q.panel} [{q.ref}]: empty: {expr}")
            else:
                answered += 1
    assert not failures, "\n".join(failures)
    assert answered == 2 * len(panel_queries(dash))
    all_values = {"instance": ".*", "node": ".*", "gpu": ".*", "namespace": ".*"}
    for name, (selector, label) in variable_queries(dash).items():
        assert selector is not None
        series = prom.api("series", **{"match[]": substitute(selector, all_values)})
        assert {s[label] for s in series if label in s}, f"variable {name}: no values"


def test_rules_evaluate_and_an_injected_xid_fires(prometheus: tuple[Prometheus, str]) -> None:
    prom, _ = prometheus
    wait_for(
        "every rule evaluated",
        lambda: all(
            not r["lastEvaluation"].startswith("0001-")
            for g in prom.api("rules")["groups"]
            for r in g["rules"]
        ),
        timeout=30,
    )
    rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
    # a double-bit ECC Xid on GPU 0: the exporter reports it at its next collection (2 s)
    subprocess.run(
        [*SRO, "simulate", "fault", "--device", "0", "--xid", "48"], check=True, capture_output=True
    )
    try:

        def firing() -> bool:
            return any(
                a["labels"]["alertname"] == "SroGpuXidError"
                and a["labels"].get("gpu") == "0"
                and a["state"] == "firing"
                for a in prom.api("alerts")["alerts"]
            )

        wait_for("SroGpuXidError firing for GPU 0", firing, timeout=60, why=lambda: str(prom.api("alerts")))
        xid = prom.query('DCGM_FI_DEV_XID_ERRORS{gpu="0"} == 48')
        assert xid and all(r["metric"]["simulated"] == "true" for r in xid), xid
        assert prom.wait_for('min by (gpu) (sro_device_healthy{gpu="0"}) == 0', timeout=30)
    finally:
        subprocess.run(
            [*SRO, "simulate", "fault", "--device", "0", "--clear"], check=False, capture_output=True
        )
