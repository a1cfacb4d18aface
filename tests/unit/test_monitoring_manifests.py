"""The monitoring wiring renders as the cluster needs it: a PrometheusRule and a ServiceMonitor only
where the Prometheus operator's CRDs exist (scrape annotations on the exporter's Service otherwise),
the dashboard as a ConfigMap for Grafana's sidecar, and a dashboard that keeps dcgm-exporter's panels
and variables."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from sro.manifests import package_file, render, templates
from tests.real_prometheus import DASHBOARD, RULES, exposition_metrics, load_dashboard, panel_queries, panels

FIXTURE = DASHBOARD.parents[4] / "tests" / "fixtures" / "monitoring" / "exposition.txt"
MINE = ("0700_prometheusrule.yaml", "0710_servicemonitor.yaml", "0720_dashboard-configmap.yaml")
# what the operator's render_state passes every component
BASE = {
    "namespace": "sro-system",
    "image": "localhost/sro:test",
    "pull_policy": "Never",
    "recipe": "simulated-gpu",
    "resource": "sro.dev/simulated-gpu",
    "driver_root": "/var/lib/sro/driver/simulated-gpu",
    "sr": "simulated-gpu",
    "state": "monitoring",
    "name": "sro-simulated-gpu-monitoring",
}


def _objects(**values: Any) -> dict[tuple[str, str], dict[str, Any]]:
    docs = render("monitoring", **(BASE | values))
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _kinds(objs: dict[tuple[str, str], dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for (kind, _), d in objs.items():
        out.setdefault(kind, []).append(d)
    return out


def test_templates_are_there() -> None:
    assert set(MINE) <= set(templates("monitoring"))


@pytest.mark.parametrize("values", [{}, {"prometheus_operator": False}, {"prometheus_operator": "false"}])
def test_without_the_prometheus_operator_no_crd_objects(values: dict[str, Any]) -> None:
    kinds = _kinds(_objects(**values))
    assert "PrometheusRule" not in kinds and "ServiceMonitor" not in kinds
    assert ("ConfigMap", "sro-simulated-gpu-monitoring-dashboard") in _objects(**values)


def test_dashboard_configmap_for_grafanas_sidecar() -> None:
    cm = _objects()[("ConfigMap", "sro-simulated-gpu-monitoring-dashboard")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "sro-system"
    (key,) = cm["data"]
    assert key.endswith(".json")
    assert json.loads(cm["data"][key]) == load_dashboard()
    # a dashboard of the admin's own replaces ours, verbatim
    mine = json.dumps({"title": "mine", "panels": []}, indent=2)
    cm = _objects(dashboard_json=mine)[("ConfigMap", "sro-simulated-gpu-monitoring-dashboard")]
    assert cm["data"]["sro-gpu.json"].strip() == mine


def test_with_the_prometheus_operator_rule_and_monitor() -> None:
    objs = _objects(prometheus_operator=True, monitoring_labels={"release": "kube-prometheus-stack"})
    rule = objs[("PrometheusRule", "sro-simulated-gpu-monitoring-alerts")]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())  # the same file promtool tests
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    sm = objs[("ServiceMonitor", "sro-simulated-gpu-monitoring")]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["sro-system"]}
    (ep,) = sm["spec"]["endpoints"]
    assert ep["honorLabels"] is True and ep["path"] == "/metrics"
    # the alert rules name the job: the ServiceMonitor takes it from the Service's name label
    assert sm["spec"]["jobLabel"] == "app.kubernetes.io/name"
    assert sm["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "sro-exporter",
        "app.kubernetes.io/instance": "simulated-gpu",
    }
    assert 'job="sro-exporter"' in RULES.read_text()
    drop = [r for r in ep["relabelings"] if r.get("action") == "labeldrop"]
    assert drop and all(label in drop[0]["regex"].split("|") for label in ("pod", "namespace", "container"))


def test_objects_are_named_per_specialresource() -> None:
    """Two SpecialResources' monitoring states render objects that do not clash (each is owned by its
    SpecialResource); without `name`, each recipe gets its own."""
    a = _objects(prometheus_operator=True, name="sro-a-monitoring", recipe="simulated-gpu")
    b = _objects(prometheus_operator=True, name="sro-b-monitoring", recipe="nvidia-gpu")
    shared = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    assert not {k for k in set(a) & set(b) if k[0] not in shared}  # sro install's kinds are one for all
    plain = render(
        "monitoring", namespace="sro-system", image="x", pull_policy="Never", prometheus_operator=True
    )
    assert {
        d["metadata"]["name"] for d in plain if d["kind"] in ("ServiceMonitor", "PrometheusRule", "ConfigMap")
    } == {
        "sro-exporter-nvidia-gpu",
        "sro-exporter-nvidia-gpu-alerts",
        "sro-exporter-nvidia-gpu-dashboard",
    }


def _service(objs: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    services = _kinds(objs).get("Service", [])
    if not services:
        pytest.skip("the exporter's Service (sro/manifests/monitoring/0600_*) is not there yet")
    (svc,) = services
    return svc


def test_servicemonitor_selects_the_exporters_service() -> None:
    objs = _objects(prometheus_operator=True)
    svc = _service(objs)
    sm = objs[("ServiceMonitor", "sro-simulated-gpu-monitoring")]
    labels = svc["metadata"].get("labels", {})
    assert sm["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert labels[sm["spec"]["jobLabel"]] == "sro-exporter"
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] in {p.get("name") for p in svc["spec"]["ports"]}


def test_without_the_operator_the_service_carries_scrape_annotations() -> None:
    svc = _service(_objects(prometheus_operator=False))
    ann = svc["metadata"].get("annotations", {})
    assert ann.get("prometheus.io/scrape") == "true"
    ports = {str(p["port"]) for p in svc["spec"]["ports"]} | {
        str(p.get("targetPort")) for p in svc["spec"]["ports"]
    }
    assert ann.get("prometheus.io/port") in ports
    assert ann.get("prometheus.io/path", "/metrics") == "/metrics"


def test_package_file_refuses_paths_outside() -> None:
    assert package_file("monitoring/rules/sro-alerts.yaml") == RULES.read_text()
    for bad in ("../cli.py", "/etc/passwd", "", "monitoring/nope.yaml"):
        with pytest.raises(ValueError):
            package_file(bad)


# --- the dashboard ----------------------------------------------------------------------------------

DCGM_PANELS = {  # dcgm-exporter's "NVIDIA DCGM Exporter Dashboard": title -> metric
    "GPU Temperature": "DCGM_FI_DEV_GPU_TEMP",
    "GPU Avg. Temp": "DCGM_FI_DEV_GPU_TEMP",
    "GPU Power Usage": "DCGM_FI_DEV_POWER_USAGE",
    "GPU Power Total": "DCGM_FI_DEV_POWER_USAGE",
    "GPU SM Clocks": "DCGM_FI_DEV_SM_CLOCK",
    "GPU Utilization": "DCGM_FI_DEV_GPU_UTIL",
    "GPU Framebuffer Mem Used": "DCGM_FI_DEV_FB_USED",
    # a DCGM profiling metric: the simulated backend gives it, NVML does not (the panel says so)
    "Tensor Core Utilization": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
}


def test_dashboard_keeps_dcgm_exporters_panels_and_variables() -> None:
    dash = load_dashboard()
    by_title = {p["title"]: p for p in panels(dash)}
    for title, metric in DCGM_PANELS.items():
        assert title in by_title, title
        assert any(metric in t["expr"] for t in by_title[title]["targets"]), title
    names = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "instance", "gpu", "node", "namespace"} <= names
    assert dash["uid"] == "sro-gpu" and dash["id"] is None


def test_dashboard_has_sros_panels() -> None:
    exprs = " ".join(q.expr for q in panel_queries(load_dashboard()))
    for metric in (
        "sro_device_healthy",
        "sro_node_devices_allocated",
        "sro_node_devices_allocatable",
        "sro_node_stack_state",
        "sro_exporter_source_up",
    ):
        assert metric in exprs, metric
    assert 'pod!=""' in exprs and "by (namespace, pod)" in exprs and "by (namespace)" in exprs
    assert 'simulated="true"' in exprs


def test_dashboard_is_well_formed() -> None:
    dash = load_dashboard()
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in panels(dash):
        assert {"h", "w", "x", "y"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p[
            "title"
        ]
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", p["title"]


GOLDEN = sorted((FIXTURE.parents[2] / "golden" / "exporter").glob("*.txt"))


def test_dashboard_reads_only_metrics_the_exporter_serves() -> None:
    """Against this test's fixture and, once they are there, the exporter's own golden outputs."""
    served = exposition_metrics(FIXTURE.read_text())
    if GOLDEN:
        served = frozenset().union(*(exposition_metrics(g.read_text()) for g in GOLDEN))
    used = frozenset().union(*(q.metrics for q in panel_queries(load_dashboard())))
    assert used <= served, f"not in the exporter's output: {sorted(used - served)}"
