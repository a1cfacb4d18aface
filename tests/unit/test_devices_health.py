"""Health tracking: ignored Xids, sticky faults, quiet-period recovery, fail-safe for all devices."""

from __future__ import annotations

from sro.devices.health import ALL, HealthTracker
from sro.devices.model import DeviceUUID, HealthEvent

A, B = DeviceUUID("GPU-a"), DeviceUUID("GPU-b")


def test_ignored_xids_do_nothing() -> None:
    t = HealthTracker(recover_after=10)
    for xid in (13, 31, 43, 45, 68, 109):
        assert not t.apply(HealthEvent("xid", A, 1.0, xid=xid))
    assert t.unhealthy(2.0) == {}


def test_sticky_fault_holds_until_cleared_then_quiet_period() -> None:
    t = HealthTracker(recover_after=10)
    assert t.apply(HealthEvent("xid", A, 1.0, xid=79, sticky=True))
    assert set(t.unhealthy(1000.0)) == {A}  # still active long after
    assert t.next_change(1000.0) is None
    assert t.apply(HealthEvent("cleared", A, 1000.0))
    assert set(t.unhealthy(1009.9)) == {A}
    assert t.next_change(1005.0) == 1010.0
    assert t.unhealthy(1010.0) == {}
    assert t.is_healthy([A, B], 1010.0)


def test_point_fault_recovers_after_quiet_period_and_a_new_one_extends_it() -> None:
    t = HealthTracker(recover_after=5)
    t.apply(HealthEvent("xid", A, 0.0, xid=48))
    t.apply(HealthEvent("xid", A, 3.0, xid=48))
    assert set(t.unhealthy(7.9)) == {A}
    assert t.unhealthy(8.0) == {}


def test_never_recover_like_nvidia() -> None:
    t = HealthTracker(recover_after=None)
    t.apply(HealthEvent("xid", A, 0.0, xid=79, sticky=True))
    t.apply(HealthEvent("cleared", A, 1.0))
    assert set(t.unhealthy(1e9)) == {A}


def test_custom_ignore_list_and_ecc() -> None:
    t = HealthTracker(ignored_xids=frozenset({79}), recover_after=5)
    assert not t.apply(HealthEvent("xid", A, 0.0, xid=79))
    assert t.apply(HealthEvent("xid", A, 0.0, xid=13))
    assert not t.apply(HealthEvent("ecc-single-bit", B, 0.0))
    assert t.apply(HealthEvent("ecc-double-bit", B, 0.0))
    assert set(t.unhealthy(1.0)) == {A, B}


def test_lost_event_source_marks_every_device() -> None:
    t = HealthTracker(recover_after=5)
    t.apply(HealthEvent("lost", None, 0.0, message="NVML wait failed"))
    assert t.unhealthy(1.0) == {ALL: "NVML wait failed"}
    assert not t.is_healthy([B], 1.0)
    assert t.is_healthy([B], 5.0)


def test_disabled_health_checks() -> None:
    t = HealthTracker(enabled=False)
    assert not t.apply(HealthEvent("xid", A, 0.0, xid=79, sticky=True))
    assert t.unhealthy(0.0) == {}


def test_clear_without_fault_is_not_a_change() -> None:
    assert not HealthTracker().apply(HealthEvent("cleared", A, 0.0))
