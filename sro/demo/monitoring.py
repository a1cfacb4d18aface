"""The demo's monitoring stage: the local Prometheus scraping the exporter, an alert firing and
resolving, and a PNG — monitoring as people look at it, not as tables.

Steps, each printed as it completes (the caller's progress adds the time):
1. Prometheus (`sro local up --prometheus`) scrapes the node's exporter: its target came from the
   exporter Service's Endpoints (`sro local prometheus-targets`), and it is up.
2. A workload pod holds two devices; the exporter attributes them to it (pod-resources), so
   Prometheus names them (gpu, UUID) by the pod's labels.
3. `sro simulate load` puts both under load; the stage waits until Prometheus holds 10 s of samples
   at it, so that the report shows the load.
4. `sro simulate fault --xid 48` on the first (a double-bit ECC error): the shipped rule
   SroGpuXidError fires, printed with its labels and summary as Prometheus's alerts page shows it.
5. `sro simulate fault --clear`: the alert resolves.
6. `sro report` draws the stage (and 20 s before it) from Prometheus's samples into a PNG, and says
   where.

The exporter collects every 30 s (its DaemonSet's `--interval`). After each change the stage asks
it to collect at once (SIGUSR1, its documented signal) instead of waiting for the interval: what
fires is the same, seconds sooner. The pod, the load and the fault are taken away at the end;
Prometheus keeps running for `sro report` and `sro status`.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sro.console.progress import Progress
from sro.demo.polling import until
from sro.local import prometheus as local_prometheus
from sro.local import supervisor
from sro.local.cluster import ClusterError, LocalCluster
from sro.local.layout import BUSYBOX_IMAGE
from sro.report.prometheus import Prometheus, PrometheusError

POD, NS = "sro-demo-monitored", "default"
EXPORTERS = "app.kubernetes.io/name=sro-exporter"
JOB = "sro-exporter"  # the shipped scrape job's name, which the rules expect
ALERT = "SroGpuXidError"
XID = 48  # double-bit ECC: not one of the application Xids the rule leaves out
UTIL = 85  # percent, the load on both devices
MEMORY_SHARE = 0.6  # of each device's framebuffer
POKE_EVERY = 5.0  # seconds between collection requests while a step waits
HOLD = 10  # seconds of samples at load before the fault, so that the report shows the load
BEFORE = 20  # seconds before the stage that the report shows
# The rule's labels, in the order the alerts page lists them after alertname and severity.
LABEL_ORDER = ("Hostname", "gpu", "UUID", "modelName", "simulated")


@dataclass(frozen=True)
class Device:
    gpu: str
    uuid: str
    total_mib: float


@dataclass(frozen=True)
class Monitoring:
    """What the stage saw, for the demo's table and the e2e test."""

    target: str  # host:port Prometheus scraped
    exporter_pod: str
    devices: tuple[Device, ...]
    alert: dict[str, Any]  # the firing alert, as Prometheus's API gave it
    fired_after: float  # seconds from the injected Xid to the alert firing
    resolved_after: float  # seconds from the clearing to the alert gone
    report: Path
    report_output: str  # what `sro report` printed
    window: tuple[float, float]  # wall-clock start and end of the stage


def workload(resource: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": NS, "labels": {"app.kubernetes.io/managed-by": "sro"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "workload",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                    "resources": {"limits": {resource: "2"}},
                }
            ],
        },
    }


def alert_lines(alert: Mapping[str, Any]) -> list[str]:
    """An alert as the alerts page (or `amtool alert query`) shows it: name, state, since, labels, summary."""
    labels = dict(alert.get("labels") or {})
    name, severity = labels.pop("alertname", "?"), labels.pop("severity", "")
    since = str(alert.get("activeAt", ""))[11:19]  # RFC 3339: the time of day (UTC)
    ordered = [k for k in LABEL_ORDER if k in labels] + sorted(k for k in labels if k not in LABEL_ORDER)
    head = f"{name} {alert.get('state', '?')}" + (f" since {since} UTC" if since else "")
    lines = [head + (f", severity={severity}" if severity else "")]
    lines.append(" ".join(f"{k}={labels[k]}" for k in ordered))
    summary = (alert.get("annotations") or {}).get("summary")
    if summary:
        lines.append(f"summary: {summary}")
    return lines


def _vector(answer: Any) -> list[dict[str, Any]]:
    return list(answer.get("result") or []) if isinstance(answer, dict) else []


class _Stage:
    def __init__(self, cluster: LocalCluster, progress: Progress, url: str, driver_root: str) -> None:
        self.cluster, self.progress, self.url, self.driver_root = cluster, progress, url, driver_root
        self.prom = Prometheus(url, timeout=10)
        self._poked = 0.0

    # ---- talking to Prometheus, the exporter and sro --------------------------------------------
    def query(self, promql: str) -> list[dict[str, Any]]:
        try:
            return _vector(self.prom.query(promql))
        except PrometheusError:
            return []  # not ready yet, or restarting: the wait goes on

    def alerts(self) -> list[dict[str, Any]]:
        try:
            answer = self.prom.alerts()
        except PrometheusError:
            return []
        return [a for a in (answer or {}).get("alerts", []) if a.get("labels", {}).get("alertname") == ALERT]

    def poke(self) -> None:
        """Ask the node's exporters to collect now (SIGUSR1 to the container's first process)."""
        self._poked = time.monotonic()
        out = self.cluster.kubectl(
            "get", "pods", "-A", "-l", EXPORTERS, "--field-selector",
            f"spec.nodeName={self.cluster.node_name},status.phase=Running", "-o", "json", check=False,
        )  # fmt: skip
        try:
            pods = json.loads(out.stdout)["items"] if out.returncode == 0 else []
        except ValueError:
            pods = []
        for p in pods:
            md = p["metadata"]
            self.cluster.kubectl(
                "exec",
                "-n",
                md["namespace"],
                md["name"],
                "--",
                "sh",
                "-c",
                "kill -USR1 1",
                check=False,
                timeout=15,
            )

    def wait(self, what: str, check: Callable[[], Any], timeout: float = 90) -> Any:
        """`until`, asking the exporters to collect again every POKE_EVERY seconds."""

        def checked() -> Any:
            value = check()
            if not value and time.monotonic() - self._poked > POKE_EVERY:
                self.poke()
            return value

        return until(what, checked, timeout, self._story)

    def _story(self) -> str:
        """What to look at when a step times out: the targets file and the two daemons' logs."""
        layout = self.cluster.layout
        sd = local_prometheus.targets_file(layout)
        try:
            targets = [g["targets"][0] for g in json.loads(sd.read_text())]
        except (OSError, ValueError, KeyError, TypeError):
            targets = []
        tails = "\n".join(
            f"{name}.log:\n{supervisor.log_tail(layout, name, 8)}"
            for name in (local_prometheus.TARGETS, local_prometheus.PROMETHEUS)
        )
        return f"Prometheus {self.url}; targets in {sd}: {targets or 'none'}\n{tails}"

    def sro(self, *args: str) -> str:
        env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig), "PROMETHEUS_URL": self.url}
        out = subprocess.run([sys.executable, "-m", "sro", *args], env=env, capture_output=True, text=True)
        if out.returncode != 0:
            raise ClusterError(f"sro {' '.join(args)} failed: {(out.stderr or out.stdout).strip()}")
        return out.stdout

    def simulate(self, what: str, *args: str) -> None:
        self.sro("simulate", what, *args, "--driver-root", self.driver_root)

    # ---- the steps ----------------------------------------------------------------------------
    def scraped(self) -> dict[str, str]:
        expr = f'up{{job="{JOB}", node="{self.cluster.node_name}"}} == 1'
        (up, *_) = self.wait("Prometheus scraping the node's exporter", lambda: self.query(expr))
        labels: dict[str, str] = up["metric"]
        self.progress(
            f"  Prometheus {self.url} scrapes {labels['instance']} (exporter pod {labels.get('exporter_pod')}): "
            "the target from the exporter Service's Endpoints, kept current by `sro local prometheus-targets`"
        )
        return labels

    def held(self) -> tuple[Device, ...]:
        until(
            f"pod {POD} Running",
            lambda: self.cluster.kubectl(
                "get", "pod", POD, "-n", NS, "-o", "jsonpath={.status.phase}", check=False
            ).stdout == "Running",
            120,
            lambda: self.cluster.kubectl("describe", "pod", POD, "-n", NS, check=False).stdout,
        )  # fmt: skip
        self.poke()
        total = (
            f'max by (gpu, UUID) (DCGM_FI_DEV_FB_USED{{namespace="{NS}", pod="{POD}"}}'
            f' + DCGM_FI_DEV_FB_FREE{{namespace="{NS}", pod="{POD}"}})'
        )
        rows = self.wait(
            f"the exporter attributing two devices to {POD}",
            lambda: got if len(got := self.query(total)) == 2 else [],
        )
        devices = tuple(
            sorted(
                (Device(r["metric"]["gpu"], r["metric"]["UUID"], float(r["value"][1])) for r in rows),
                key=lambda d: int(d.gpu) if d.gpu.isdigit() else 0,
            )
        )
        shown = " and ".join(f"GPU {d.gpu} ({d.uuid})" for d in devices)
        self.progress(f"  pod {NS}/{POD} holds {shown}: the exporter's series name it (pod, namespace)")
        return devices

    def load(self, devices: tuple[Device, ...]) -> None:
        memory = int(min(d.total_mib for d in devices) * MEMORY_SHARE)
        args = [a for d in devices for a in ("--device", d.uuid)]
        self.simulate("load", *args, "--util", str(UTIL), "--memory", str(memory))
        self.poke()
        # the lowest utilisation of the two over the last HOLD seconds of samples: the load, held
        util = f'min(DCGM_FI_DEV_GPU_UTIL{{namespace="{NS}", pod="{POD}"}})'
        held = f"min_over_time({util}[{HOLD}s:1s]) >= {UTIL - 5}"
        self.wait(f"{HOLD} s of Prometheus's samples at the load", lambda: self.query(held), 90 + HOLD)
        self.progress(
            f"  sro simulate load: {UTIL}% utilisation and {memory} MiB of framebuffer on both; "
            f"Prometheus has {HOLD} s of samples at that load"
        )

    def _ours(self, uuid: str, state: str) -> list[dict[str, Any]]:
        return [a for a in self.alerts() if a["labels"].get("UUID") == uuid and a.get("state") == state]

    def fire(self, device: Device) -> tuple[dict[str, Any], float]:
        t0 = time.monotonic()
        self.simulate("fault", "--device", device.uuid, "--xid", str(XID))
        self.poke()
        (alert, *_) = self.wait(
            f"{ALERT} firing for GPU {device.gpu}", lambda: self._ours(device.uuid, "firing")
        )
        after = time.monotonic() - t0
        self.progress(
            f"  sro simulate fault --xid {XID} on GPU {device.gpu}: {ALERT} fired {after:.1f} s later"
        )
        for line in alert_lines(alert):
            self.progress(f"    {line}")
        return alert, after

    def resolve(self, device: Device) -> float:
        t0 = time.monotonic()
        self.simulate("fault", "--device", device.uuid, "--clear")
        self.poke()
        self.wait(
            f"{ALERT} resolving for GPU {device.gpu}",
            lambda: not self._ours(device.uuid, "firing") and not self._ours(device.uuid, "pending"),
        )
        after = time.monotonic() - t0
        self.progress(f"  sro simulate fault --clear: {ALERT} resolved {after:.1f} s later")
        return after

    def report(self, output: Path, start: float) -> str:
        since = f"{math.ceil(time.time() - start)}s"
        printed = self.sro("report", "--since", since, "-o", str(output))
        said = printed.splitlines()[0].removeprefix(f"{output}: ") if printed else ""
        self.progress(f"  sro report --since {since} -o {output}: {said}")
        return printed

    def clean(self, devices: tuple[Device, ...]) -> None:
        args = [a for d in devices for a in ("--device", d.uuid)]
        if args:
            for what in ("load", "fault"):
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "sro",
                        "simulate",
                        what,
                        *args,
                        "--clear",
                        "--driver-root",
                        self.driver_root,
                    ],
                    capture_output=True,
                    check=False,
                )
        self.cluster.kubectl(
            "delete", "pod", POD, "-n", NS, "--ignore-not-found", "--grace-period=1", check=False
        )


def run(
    cluster: LocalCluster, progress: Progress, resource: str, driver_root: str, report: Path
) -> Monitoring:
    """The stage on the local cluster's Prometheus; `report` is the PNG to write (of the stage, and
    of BEFORE seconds before it: the devices idle)."""
    stage = _Stage(cluster, progress, local_prometheus.url(cluster.layout), driver_root)
    start = time.time()
    target = stage.scraped()
    cluster.kubectl("delete", "pod", POD, "-n", NS, "--ignore-not-found", "--wait=true", check=False)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(workload(resource)))
    devices: tuple[Device, ...] = ()
    try:
        devices = stage.held()
        stage.load(devices)
        alert, fired = stage.fire(devices[0])
        resolved = stage.resolve(devices[0])
        output = report.resolve()
        printed = stage.report(output, start - BEFORE)
    finally:
        stage.clean(devices)
    progress(f"  {output} drawn from the local Prometheus's samples (pod and load taken away again)")
    return Monitoring(
        target=target["instance"],
        exporter_pod=target.get("exporter_pod", ""),
        devices=devices,
        alert=alert,
        fired_after=fired,
        resolved_after=resolved,
        report=output,
        report_output=printed,
        window=(start, time.time()),
    )
