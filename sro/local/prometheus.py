"""Prometheus in the local cluster (`sro local up --prometheus`; the demo turns it on).

Why: the monitoring part of sro — the exporter's series, the alert rules, `sro report` — is invisible
on a cluster that runs no Prometheus. This makes Debian's own `prometheus` one more supervised daemon
of the local cluster: started by `up`, shown by `status`, stopped by `down`, its data under the
cluster's directory (`/var/lib/sro-local/prometheus`), listening on 127.0.0.1:9090, the address
`sro report` and `sro status` ask when no URL is given (`sro local env` exports PROMETHEUS_URL too).

What it runs is what a cluster admin would: the shipped scrape job (`monitoring/scrape/sro-exporter.yaml`)
and the shipped alert rules (`monitoring/rules/`, copied as they are at start). Two things differ,
both for a machine where people watch an alert fire while they wait: Debian's build has no
kubernetes_sd, so the job reads a file_sd file that `sro local prometheus-targets` (scrapetargets.py,
a second supervised daemon) keeps current from the exporter Services' Endpoints; and scrapes and rule
evaluations run every 2 s instead of the job's 30 s. The rules' own `for:` durations are unchanged.

Whether it runs is remembered (config/prometheus.json), like the API rate limits, so that a later
`up` — the e2e session's, the demo's — keeps it; `up --no-prometheus` stops it and forgets it.
This module is data (the two components, the config) plus that small flag; `cluster.py` runs them.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from sro.console.progress import Progress
from sro.local import supervisor
from sro.local.components import Component, Health
from sro.local.layout import Layout
from sro.manifests import package_file

PROMETHEUS = "prometheus"  # daemon names: pid file, log, `sro local status` row
TARGETS = "prometheus-targets"
BINARY = "/usr/bin/prometheus"
PREREQUISITES = {BINARY: "prometheus"}  # binary -> the Debian package behind it
INTERVAL = "2s"  # scrape and rule evaluation
RETENTION = "7d"
JOB_FILE = "monitoring/scrape/sro-exporter.yaml"
RULES_DIR = ("monitoring", "rules")


def home(layout: Layout) -> Path:
    return layout.state / "prometheus"


def targets_file(layout: Layout) -> Path:
    return home(layout) / "targets" / "sro-exporter.json"


def url(layout: Layout) -> str:
    return f"http://127.0.0.1:{layout.ports.prometheus}"


def shipped_rules() -> dict[str, str]:
    """The project's alert rule files by name, as shipped."""
    root = resources.files("sro.manifests").joinpath(*RULES_DIR)
    return {
        f.name: f.read_text()
        for f in sorted(root.iterdir(), key=lambda f: f.name)
        if f.name.endswith(".yaml")
    }


def scrape_job(sd_file: Path, interval: str = INTERVAL) -> dict[str, Any]:
    """The shipped scrape job with its kubernetes_sd swapped for a file_sd reading `sd_file` (Prometheus
    re-reads it on change; the refresh interval is the fallback where inotify misses one)."""
    (job,) = yaml.safe_load(package_file(JOB_FILE))
    if "kubernetes_sd_configs" not in job:
        raise ValueError(f"{JOB_FILE}: no kubernetes_sd_configs to replace")
    job = dict(job)
    del job["kubernetes_sd_configs"]
    job["file_sd_configs"] = [{"files": [str(sd_file)], "refresh_interval": "30s"}]
    job["scrape_interval"] = job["scrape_timeout"] = interval
    return dict(job)


def config(layout: Layout, rule_files: list[Path]) -> str:
    doc = {
        "global": {"scrape_interval": INTERVAL, "scrape_timeout": INTERVAL, "evaluation_interval": INTERVAL},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [scrape_job(targets_file(layout))],
    }
    return "# Written by `sro local up --prometheus` at each start; edits are lost.\n" + yaml.safe_dump(
        doc, sort_keys=False
    )


def components(layout: Layout, python: str = sys.executable) -> tuple[Component, Component]:
    """The targets loop, then Prometheus (start order; `down` stops them in reverse)."""
    p, d = layout.ports, home(layout)
    rules = {d / "rules" / name: text for name, text in shipped_rules().items()}
    targets = Component(
        TARGETS,
        (
            python,
            "-m",
            "sro",
            "-v",
            "local",
            "prometheus-targets",
            f"--kubeconfig={layout.admin_kubeconfig}",
            f"--output={targets_file(layout)}",
            f"--port={p.prometheus_targets}",
        ),
        Health(url=f"http://127.0.0.1:{p.prometheus_targets}/healthz"),
        ports=(p.prometheus_targets,),
        exclusive=False,  # other Python processes are not other copies of this daemon
    )
    server = Component(
        PROMETHEUS,
        (
            BINARY,
            f"--config.file={d / 'prometheus.yml'}",
            f"--storage.tsdb.path={d / 'data'}",
            f"--storage.tsdb.retention.time={RETENTION}",
            f"--web.listen-address=127.0.0.1:{p.prometheus}",
        ),
        Health(url=f"{url(layout)}/-/ready"),
        files={d / "prometheus.yml": config(layout, sorted(rules)), **rules},
        ports=(p.prometheus,),
        exclusive=False,  # a Prometheus of a test or of Debian's service is not ours to refuse
    )
    return (targets, server)


# ---- whether it runs (remembered across `up`s) ----------------------------------------------------
def _flag(layout: Layout) -> Path:
    return layout.config / "prometheus.json"


def wanted(layout: Layout) -> bool:
    try:
        return bool(json.loads(_flag(layout).read_text()).get("enabled"))
    except (OSError, ValueError, AttributeError):
        return False


def choose(layout: Layout, on: bool, progress: Progress) -> None:
    """Remember whether `up` runs Prometheus; turning it off stops it (and its targets loop) now."""
    if on != wanted(layout):
        _flag(layout).parent.mkdir(parents=True, exist_ok=True)
        _flag(layout).write_text(json.dumps({"enabled": on}) + "\n")
    if not on:
        for name in (PROMETHEUS, TARGETS):
            if supervisor.stop(layout, name):
                progress(f"Stopped {name}")


def describe(layout: Layout) -> str:
    return (
        f"Prometheus at {url(layout)} (scrapes sro's exporters and evaluates sro's alert rules every "
        f"{INTERVAL}; data in {home(layout) / 'data'})"
    )
