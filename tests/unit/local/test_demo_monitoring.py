"""The demo's monitoring stage, the parts that need no cluster: an alert shown as the alerts page
shows it, the workload's pod, and the table the demo ends with. The stage itself runs in
tests/e2e/test_local_prometheus.py."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from sro.demo.commands import show_monitoring
from sro.demo.monitoring import Device, Monitoring, alert_lines, workload

ALERT = {
    "labels": {
        "alertname": "SroGpuXidError",
        "severity": "critical",
        "simulated": "true",
        "UUID": "GPU-1",
        "gpu": "2",
        "Hostname": "node-a",
        "modelName": "SRO Simulated H100",
        "extra": "x",
    },
    "annotations": {"summary": "Xid 48 on GPU 2 of node node-a", "description": "long"},
    "state": "firing",
    "activeAt": "2026-11-25T17:31:02.123456789Z",
    "value": "4.8e+01",
}


def test_an_alert_reads_as_on_the_alerts_page() -> None:
    assert alert_lines(ALERT) == [
        "SroGpuXidError firing since 17:31:02 UTC, severity=critical",
        "Hostname=node-a gpu=2 UUID=GPU-1 modelName=SRO Simulated H100 simulated=true extra=x",
        "summary: Xid 48 on GPU 2 of node node-a",
    ]
    assert alert_lines({"labels": {"alertname": "A"}, "state": "pending"}) == ["A pending", ""]


def test_the_workload_holds_two_devices_of_the_resource_and_sleeps() -> None:
    pod = workload("nvidia.com/gpu")
    (c,) = pod["spec"]["containers"]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert c["command"] == ["sleep", "3600"] and c["imagePullPolicy"] == "Never"


def test_the_table_says_where_the_report_is() -> None:
    m = Monitoring(
        target="10.244.0.7:9400",
        exporter_pod="sro-exporter-abc",
        devices=(Device("2", "GPU-1", 81920.0), Device("3", "GPU-2", 81920.0)),
        alert=ALERT,
        fired_after=2.25,
        resolved_after=3.5,
        report=Path("/work/report.png"),
        report_output="/work/report.png: 1200x800, 8 devices over the last 2m (step 1s), SIMULATED devices\n",
        window=(0.0, 1.0),
    )
    console = Console(width=200, record=True)
    show_monitoring(console, m)
    text = console.export_text()
    assert "10.244.0.7:9400 (exporter pod sro-exporter-abc)" in text
    assert "2.2 s after the Xid / 3.5 s after --clear" in text
    assert "Report: /work/report.png" in text and "SroGpuXidError firing since 17:31:02 UTC" in text
