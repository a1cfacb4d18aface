"""The exporter's last Xid of a device ends with the device's fault, on a backend that never says so.

NVML reports an Xid as an event and nothing when the fault ends; the health rules call the device
healthy again after `recoverAfterSeconds` without another fault. Before, the exporter kept the Xid
in DCGM_FI_DEV_XID_ERRORS (and SroGpuXidError firing) until it restarted, while the device plugin
announced the GPU healthy: `sro demo --nvidia` waited 90 s for the alert to resolve and failed.
"""

from __future__ import annotations

from sro.devices.model import DeviceUUID, HealthEvent
from sro.node.exporter.collecting import Collector

A, B, C = DeviceUUID("GPU-a"), DeviceUUID("GPU-b"), DeviceUUID("GPU-c")


def _collector(recover_after: float | None = 10.0) -> Collector:
    def no_devices() -> object:
        raise AssertionError("not opened in this test")

    c = Collector(no_devices, domain="nvidia.com", hostname="node-1", simulated=False)  # type: ignore[arg-type]
    c.tracker.recover_after = recover_after
    return c


def _kept(c: Collector, now: float) -> dict[DeviceUUID, int]:
    c._forget_recovered_xids(frozenset(c.tracker.unhealthy(now)))
    return dict(c._xids)


def test_a_fault_xid_stays_while_unhealthy_and_goes_once_recovered() -> None:
    c = _collector()
    c.apply_event(HealthEvent("xid", A, 100.0, xid=48))
    c.apply_event(HealthEvent("xid", B, 100.0, xid=13))  # an application error: never unhealthy
    assert _kept(c, 105.0) == {A: 48, B: 13}
    assert _kept(c, 111.0) == {B: 13}  # A healthy again; 13 stays the last Xid seen, as dcgm-exporter


def test_a_sticky_fault_keeps_its_xid_until_cleared() -> None:
    c = _collector()
    c.apply_event(HealthEvent("xid", C, 100.0, xid=79, sticky=True))
    assert _kept(c, 1000.0) == {C: 79}
    c.apply_event(HealthEvent("cleared", C, 1000.0))
    assert _kept(c, 1001.0) == {}


def test_never_recover_and_disabled_health_keep_the_xid() -> None:
    never = _collector(recover_after=None)
    never.apply_event(HealthEvent("xid", A, 100.0, xid=48))
    assert _kept(never, 10_000.0) == {A: 48}
    off = _collector()
    off.tracker.enabled = False
    off.apply_event(HealthEvent("xid", A, 100.0, xid=48))
    assert _kept(off, 10_000.0) == {A: 48}
