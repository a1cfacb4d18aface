"""Debian's real Prometheus scrapes an exposition text of the exporter's shape (8 simulated GPUs, pods
sharing a time-sliced one, a faulty one): the alert rules load and evaluate without error and fire on
the faulty GPU, and every query of the dashboard — its panels and its template variables, with Grafana's
variables substituted as Grafana would — runs without error and returns series.

No cluster: the text is served from this process. The e2e test (tests/e2e/test_monitoring.py) asks
the same of the exporter running in the cluster.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sro.manifests import render
from tests.real_prometheus import (
    JOB,
    PROMETHEUS,
    Prometheus,
    PrometheusError,
    endpoints_targets,
    expects_series,
    grafana_intervals,
    load_dashboard,
    panel_queries,
    serve_text,
    shipped_scrape_job,
    substitute,
    variable_queries,
)

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "monitoring" / "exposition.txt"
GOLDEN = sorted((REPO / "tests" / "golden" / "exporter").glob("*.txt"))
SCRAPE_S = 1.0

pytestmark = pytest.mark.skipif(
    not Path(PROMETHEUS).exists(), reason=f"needs Prometheus ({PROMETHEUS}; Debian package `prometheus`)"
)


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, str, str]]:
    """Prometheus scraping FIXTURE every second with the alert rules loaded: (prom, target, text)."""
    text = FIXTURE.read_text()
    with serve_text(text) as target:
        scrape = {"job_name": JOB, "honor_labels": True, "static_configs": [{"targets": [target]}]}
        with Prometheus.start(tmp_path_factory.mktemp("prometheus"), [scrape]) as prom:
            # enough samples for rate() over $__rate_interval and for range queries
            prom.wait_for(f'count_over_time(up{{job="{JOB}"}}[1m]) >= 6', what="six scrapes")
            yield prom, target, text


def _values(target: str) -> list[dict[str, str]]:
    """Variable values as Grafana sends them: All (allValue .*), one value each, several values."""
    base = grafana_intervals(SCRAPE_S, step_s=2, range_s=30) | {"datasource": "prometheus"}
    return [
        base | {"instance": ".*", "node": ".*", "gpu": ".*", "namespace": ".*"},
        base | {"instance": target, "node": "sim-node-1", "gpu": "0", "namespace": "team-a"},
        # several values: a regex alternation, each value escaped for PromQL (\\. in the query text)
        base
        | {
            "instance": "(" + target.replace(".", "\\\\.") + "|10\\\\.0\\\\.0\\\\.1:9400)",
            "node": "(sim-node-1|other)",
            "gpu": "(1|2|5)",
            "namespace": "(team-b|team-c)",
        },
    ]


def test_every_panel_query_answers(scraped: tuple[Prometheus, str, str]) -> None:
    prom, target, text = scraped
    queries = panel_queries(load_dashboard())
    assert len(queries) >= 20
    end = time.time()
    failures = []
    for values in _values(target):
        for q in queries:
            expr = substitute(q.expr, values)
            try:
                instant = prom.query(expr, at=end)
                ranged = prom.query_range(expr, start=end - 30, end=end, step=2)
            except PrometheusError as e:
                failures.append(f"{q.panel} [{q.ref}] {expr}: {e}")
                continue
            if expects_series(q.expr, text) and not (instant and ranged):
                failures.append(
                    f"{q.panel} [{q.ref}] {expr}: empty (instant {len(instant)}, range {len(ranged)})"
                )
    assert not failures, "\n".join(failures)


def test_template_variables_list_values(scraped: tuple[Prometheus, str, str]) -> None:
    prom, target, _ = scraped
    variables = variable_queries(load_dashboard())
    assert set(variables) == {"instance", "node", "gpu", "namespace"}
    all_values = {"instance": ".*", "node": ".*", "gpu": ".*", "namespace": ".*"}
    found = {}
    for name, (selector, label) in variables.items():
        assert selector is not None
        series = prom.api("series", **{"match[]": substitute(selector, all_values)})
        found[name] = sorted({s[label] for s in series if label in s}, key=lambda v: (len(v), v))
    assert found == {
        "instance": [target],
        "node": ["sim-node-1"],
        "gpu": [str(i) for i in range(8)],
        "namespace": ["team-a", "team-b", "team-c"],
    }


def test_rules_load_and_evaluate_without_error(scraped: tuple[Prometheus, str, str]) -> None:
    prom, _, _ = scraped
    deadline = time.monotonic() + 20
    while True:
        groups = prom.api("rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if rules and all(not r["lastEvaluation"].startswith("0001-") for r in rules):
            break
        assert time.monotonic() < deadline, "rules not evaluated after 20 s"
        time.sleep(0.5)
    assert {g["name"] for g in groups} == {
        "sro-gpu-devices",
        "sro-gpu-stack",
        "sro-exporter",
        "sro-remediation",
    }
    bad = [(r["name"], r["health"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad
    assert len(rules) >= 12


def test_the_faulty_gpu_raises_its_alerts(scraped: tuple[Prometheus, str, str]) -> None:
    """GPU 3 of the fixture reports Xid 79 and is unhealthy: the Xid alert fires at once (no `for`),
    the health alert waits its minute; GPU 1's framebuffer is 96% full (pending for 5 minutes);
    nothing else fires on healthy series."""
    prom, _, _ = scraped
    deadline = time.monotonic() + 20
    while True:
        alerts = {
            (a["labels"]["alertname"], a["labels"].get("gpu"), a["state"])
            for a in prom.api("alerts")["alerts"]
        }
        if ("SroGpuXidError", "3", "firing") in alerts and ("SroGpuUnhealthy", "3", "pending") in alerts:
            break
        assert time.monotonic() < deadline, alerts
        time.sleep(0.5)
    assert alerts == {
        ("SroGpuXidError", "3", "firing"),
        ("SroGpuUnhealthy", "3", "pending"),
        ("SroGpuFramebufferNearlyFull", "1", "pending"),
    }
    (xid,) = [a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == "SroGpuXidError"]
    assert xid["annotations"]["summary"] == "Xid 79 on GPU 3 of node sim-node-1"
    assert xid["labels"]["simulated"] == "true"


@pytest.mark.skipif(
    not GOLDEN, reason="the exporter's golden exposition files (tests/golden/exporter/) are not there yet"
)
@pytest.mark.parametrize("golden", GOLDEN, ids=[p.name for p in GOLDEN])
def test_dashboard_answers_on_the_exporters_golden_output(golden: Path, tmp_path: Path) -> None:
    text = golden.read_text()
    with serve_text(text) as target:
        scrape = {"job_name": JOB, "honor_labels": True, "static_configs": [{"targets": [target]}]}
        with Prometheus.start(tmp_path, [scrape]) as prom:
            prom.wait_for(f'count_over_time(up{{job="{JOB}"}}[1m]) >= 3', what="three scrapes")
            values = _values(target)[0]
            end = time.time()
            failures = []
            for q in panel_queries(load_dashboard()):
                expr = substitute(q.expr, values)
                try:
                    result = prom.query_range(expr, start=end - 30, end=end, step=2)
                except PrometheusError as e:
                    failures.append(f"{q.panel}: {e}")
                    continue
                if expects_series(q.expr, text) and not result:
                    failures.append(f"{q.panel}: empty: {expr}")
            assert not failures, "\n".join(failures)
            rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
            assert all(r["health"] != "err" for r in rules), rules


def test_annotation_scrape_job_finds_the_exporters_service(tmp_path: Path) -> None:
    """Without the Prometheus operator: the shipped scrape job (scrape/sro-exporter.yaml) keeps the
    exporter's Service by its label and prometheus.io annotations, scrapes the annotated port and
    path as job sro-exporter, and drops every other Service."""
    docs = render(
        "monitoring", namespace="sro-system", image="x", pull_policy="Never", recipe="simulated-gpu"
    )
    services = [d for d in docs if d["kind"] == "Service"]
    if not services:
        pytest.skip("the exporter's Service (sro/manifests/monitoring/0600_*) is not there yet")
    (svc,) = services
    with serve_text(FIXTURE.read_text()) as target:
        port = int(target.rsplit(":", 1)[1])
        svc["metadata"]["annotations"]["prometheus.io/port"] = str(port)  # where this test serves it
        other = {"metadata": {"name": "not-annotated", "namespace": "sro-system", "labels": {"app": "x"}}}
        unannotated = copy.deepcopy(svc)
        unannotated["metadata"]["name"] = "no-scrape"
        del unannotated["metadata"]["annotations"]["prometheus.io/scrape"]

        def endpoints(pod: str) -> dict[str, Any]:
            addr = {"ip": "127.0.0.1", "nodeName": "sim-node-1", "targetRef": {"kind": "Pod", "name": pod}}
            return {"subsets": [{"addresses": [addr], "ports": [{"name": "metrics", "port": 9400}]}]}

        groups = [
            *endpoints_targets(svc, endpoints("sro-exporter-abcde")),
            *endpoints_targets(other, endpoints("other-1")),
            *endpoints_targets(unannotated, endpoints("other-2")),
        ]
        sd = tmp_path / "targets.json"
        sd.write_text(json.dumps(groups))
        with Prometheus.start(tmp_path, [shipped_scrape_job(sd)]) as prom:
            up = prom.wait_for(f'up{{job="{JOB}"}} == 1', what="the exporter target up")
            assert [r["metric"] for r in up] == [
                {
                    "__name__": "up",
                    "job": JOB,
                    "instance": target,
                    "node": "sim-node-1",
                    "exporter_pod": "sro-exporter-abcde",
                }
            ]
            active = prom.api("targets")["activeTargets"]
            assert len(active) == 1, active
            # the exporter's own pod labels survive (honor_labels)
            held = prom.query('count(DCGM_FI_DEV_GPU_UTIL{namespace="team-a", pod!=""})')
            assert held and held[0]["value"][1] == "2"
