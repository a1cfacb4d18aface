"""The device plugin's health report: built from the board's faults and the kubelet's holders, and
written by the running plugin (simulated backend, fake kubelet) when a fault is injected and cleared."""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sro.api.recipes import SIMULATED_GPU
from sro.devices import driverstate, healthreport, simconfig
from sro.devices.health import ALL, HealthTracker
from sro.devices.model import DeviceUUID, HealthEvent
from sro.devices.simulated import SimulatedBackend
from sro.host.podresources import Assignment, KubeletUnavailable, list_assignments
from sro.node.deviceplugin import announcing
from sro.node.deviceplugin.config import default_config
from sro.node.deviceplugin.lifecycle import Plugin
from sro.node.deviceplugin.reporting import HealthReporter, make_report
from tests.unit.test_deviceplugin_grpc import FakeKubelet

RESOURCE = "sro.dev/simulated-gpu"
INV = simconfig.parse({"count": 4}, SIMULATED_GPU.device_node)
U = [str(d.uuid) for d in INV.devices]


def _plans() -> tuple[announcing.ResourcePlan, ...]:
    return announcing.plan(INV, default_config(SIMULATED_GPU))


def test_tracker_keeps_the_counted_xids_of_an_episode() -> None:
    t = HealthTracker(recover_after=10.0)
    dev = DeviceUUID("GPU-a")
    t.apply(HealthEvent("xid", dev, 0.0, xid=13))  # ignored: an application's error
    assert t.faults(0.0) == {}
    t.apply(HealthEvent("xid", dev, 1.0, xid=79, sticky=True))
    t.apply(HealthEvent("xid", dev, 2.0, xid=48, sticky=True))
    t.apply(HealthEvent("xid", dev, 2.5, xid=79, sticky=True))
    assert t.faults(3.0)[dev][0] == (79, 48)
    t.apply(HealthEvent("cleared", dev, 4.0))
    assert t.faults(13.9)[dev][0] == (79, 48)  # within the quiet period: still reported
    assert t.faults(14.1) == {}
    t.apply(HealthEvent("xid", dev, 20.0, xid=62, sticky=True))
    assert t.faults(20.0)[dev][0] == (62,)  # a new episode forgets the old Xids


def test_make_report_maps_faults_and_holders_to_device_indexes() -> None:
    faults = {U[3]: ((79,), "Xid 79"), "GPU-not-ours": ((48,), "x")}
    pods = [
        Assignment("train", "ml", "c", RESOURCE, U[3]),
        Assignment("train", "ml", "d", RESOURCE, U[3]),  # a second container of the same pod
        Assignment("infer", "default", "c", RESOURCE, U[1]),
        Assignment("other", "default", "c", "example.com/fpga", U[2]),  # another plugin's resource
        Assignment("ghost", "default", "c", RESOURCE, "GPU-unknown"),
    ]
    r = make_report(
        SIMULATED_GPU.name, RESOURCE, "n1", "boot", "2026-11-26T02:00:00Z", INV, _plans(), faults, pods
    )
    assert r.devices == ("0", "1", "2", "3")
    assert r.faults == (healthreport.DeviceFault("3", (79,), "Xid 79"),)
    assert r.holders == {"1": ("default/infer",), "3": ("ml/train",)}
    assert healthreport.from_json(r.to_json()) is not None


def test_a_lost_event_source_faults_every_device() -> None:
    r = make_report("simulated-gpu", RESOURCE, "n1", "b", "2026-11-26T02:00:00Z", INV, _plans(),
                    {str(ALL): ((), "health source failed")}, [])  # fmt: skip
    assert [f.device for f in r.faults] == ["0", "1", "2", "3"] and all(f.xids == () for f in r.faults)


def test_mig_devices_report_their_gpu() -> None:
    inv = simconfig.parse(
        {"count": 2, "devices": [{"mig": [{"profile": "1g.5gb"}] * 2}] * 2}, SIMULATED_GPU.device_node
    )
    mig = str(inv.devices[1].mig_devices[1].uuid)
    plans = announcing.plan(inv, replace(default_config(SIMULATED_GPU), mig_strategy="single"))
    announced = [a.id for p in plans for a in p.devices]
    assert mig in announced and len(announced) == 4
    pods = [Assignment(f"p{i}", "ns", "c", plans[0].resource, a) for i, a in enumerate(announced)]
    r = make_report(
        "simulated-gpu", RESOURCE, "", "", "2026-11-26T02:00:00Z", inv, plans, {mig: ((48,), "")}, pods
    )
    assert r.devices == ("0", "1")
    assert [(f.device, f.xids) for f in r.faults] == [("1", (48,))]
    assert r.holders == {"0": ("ns/p0", "ns/p1"), "1": ("ns/p2", "ns/p3")}


def test_reporter_writes_only_changes_and_survives_no_kubelet(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    calls = []

    def no_kubelet() -> list[Assignment]:
        calls.append(1)
        raise KubeletUnavailable("no such socket")

    clock = [0.0]
    rep = HealthReporter(
        tmp_path / "health", "simulated-gpu", "n1", tmp_path / "driver", no_kubelet, lambda: clock[0]
    )
    assert not rep.update(RESOURCE, None, (), {})  # nothing served yet: no report
    assert not (tmp_path / "health").exists()
    with caplog.at_level(logging.WARNING):
        assert rep.update(RESOURCE, INV, _plans(), {})
        clock[0] = 5.0
        assert not rep.update(RESOURCE, INV, _plans(), {})  # unchanged: not rewritten
        clock[0] = 10.0
        assert rep.update(RESOURCE, INV, _plans(), {U[0]: ((79,), "Xid 79")}, health_changed=True)
    assert len(calls) == 3
    assert sum("pod-resources unavailable" in r.message for r in caplog.records) == 1  # said once
    (got,) = healthreport.read_reports(tmp_path / "health")
    assert got.faults == (healthreport.DeviceFault("0", (79,), "Xid 79"),) and got.holders == {}
    assert rep.writes == 2


def test_reporter_with_a_real_pod_resources_socket(tmp_path: Path) -> None:
    # a socket path that does not exist: the client's own error becomes empty holders
    missing = tmp_path / "pod-resources" / "kubelet.sock"
    rep = HealthReporter(tmp_path / "h", "simulated-gpu", "n1", tmp_path, lambda: list_assignments(missing))
    assert rep.update(RESOURCE, INV, _plans(), {})
    assert healthreport.read_reports(tmp_path / "h")[0].holders == {}


# --- the running plugin -------------------------------------------------------------------------


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="dph", dir="/tmp"))  # unix socket paths are short
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _wait(cond: Callable[[], object], timeout: float = 10.0) -> float:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)
    return time.monotonic() - start


def test_running_plugin_reports_a_fault_and_its_clearing(short_tmp: Path) -> None:
    root = short_tmp / "driver"
    driverstate.write_atomic(root / "devices.json", json.dumps(driverstate.inventory_to_doc(INV, 120, 255)))
    (root / healthreport.SIM_BOOT_ID).parent.mkdir(parents=True)
    (root / healthreport.SIM_BOOT_ID).write_text("sim-boot-1\n")
    plugin_dir = short_tmp / "dp"
    plugin_dir.mkdir()
    config = short_tmp / "config.yaml"
    config.write_text("health: {recoverAfterSeconds: 0.5}\n")
    health = short_tmp / "health"
    holders = [Assignment("train", "ml", "c", RESOURCE, U[3])]
    reporter = HealthReporter(health, SIMULATED_GPU.name, "node-1", root, lambda: list(holders))
    kubelet = FakeKubelet(plugin_dir)
    plugin = Plugin(
        SIMULATED_GPU, SimulatedBackend(root, 0.02), plugin_dir, config, poll=0.05, reporter=reporter
    )
    stop = threading.Event()
    thread = threading.Thread(target=plugin.run, args=(stop,), daemon=True)
    thread.start()
    path = health / "simulated-gpu.json"

    def report() -> healthreport.HealthReport | None:
        return healthreport.from_json(path.read_text()) if path.exists() else None

    try:
        _wait(lambda: report() is not None)
        first = report()
        assert first is not None and first.faults == () and first.devices == ("0", "1", "2", "3")
        assert first.boot_id == "sim-boot-1" and first.node == "node-1" and first.resource == RESOURCE
        assert first.holders == {"3": ("ml/train",)}

        driverstate.set_fault(root, DeviceUUID(U[3]), 13)  # an application Xid: not a fault
        time.sleep(1.0)
        assert report() == first

        driverstate.set_fault(root, DeviceUUID(U[3]), 79)
        took = _wait(lambda: (r := report()) is not None and r.faults != ())
        r = report()
        assert r is not None and r.faults == (healthreport.DeviceFault("3", (79,), r.faults[0].detail),)
        assert took < 2.0, f"the fault reached the report after {took:.2f}s"

        driverstate.clear_faults(root, [DeviceUUID(U[3])])
        _wait(lambda: (r := report()) is not None and r.faults == ())  # after the 0.5 s quiet period
        assert not list(health.glob(".*"))  # no temporary left behind
    finally:
        stop.set()
        thread.join(timeout=5)
        kubelet.stop()
