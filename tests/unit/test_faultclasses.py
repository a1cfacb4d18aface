"""The Xid table and the GpuHealthy condition: which Xids are node faults, which are not, and the words.

Each Xid the issue names is pinned to its kind and class, so a table edit that turns an application
error into a drain trigger (or a lost GPU into nothing) fails here.
"""

from __future__ import annotations

import pytest

from sro.api.specialresource import FAULT_CLASSES
from sro.devices.faultclasses import (
    APPLICATION,
    DRAIN,
    ECC_UNCORRECTABLE,
    GPU_LOST,
    RECORD,
    ROW_REMAP_FAILURE,
    SEVERITY,
    THERMAL,
    XID_FATAL,
    XIDS,
    Fault,
    application_xids,
    classify,
    entry,
    fault_of,
    node_condition,
    worst,
)
from sro.devices.model import DEFAULT_IGNORED_XIDS


@pytest.mark.parametrize(
    ("xid", "cls"),
    [
        (79, GPU_LOST),
        (48, ECC_UNCORRECTABLE),
        (95, ECC_UNCORRECTABLE),
        (64, ROW_REMAP_FAILURE),
        (119, XID_FATAL),
        (120, XID_FATAL),
        (62, XID_FATAL),
        (74, XID_FATAL),
    ],
)
def test_drain_triggers_have_their_class(xid: int, cls: str) -> None:
    assert classify(xid) == cls
    row = entry(xid)
    assert row is not None and row.kind == DRAIN and row.needs_reset


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 68, 109])
def test_application_errors_are_not_node_faults(xid: int) -> None:
    assert classify(xid) is None
    row = entry(xid)
    assert row is not None and row.kind == APPLICATION
    assert fault_of("0", xid) is None


def test_the_application_xids_are_the_device_plugins_ignored_ones() -> None:
    # the device plugin keeps a device on these; the node must not be drained for them either
    assert application_xids() == DEFAULT_IGNORED_XIDS


@pytest.mark.parametrize(("xid", "reset"), [(63, True), (92, False), (94, True)])
def test_recorded_events_start_nothing_and_say_if_a_reset_is_due(xid: int, reset: bool) -> None:
    row = entry(xid)
    assert row is not None and row.kind == RECORD and row.needs_reset is reset
    assert classify(xid) is None


def test_an_unknown_xid_starts_nothing() -> None:
    assert entry(9999) is None and classify(9999) is None


def test_every_class_is_an_api_class_and_thermal_has_no_xid() -> None:
    assert set(SEVERITY) == set(FAULT_CLASSES)
    assert {x.fault_class for x in XIDS.values() if x.kind == DRAIN} == set(FAULT_CLASSES) - {THERMAL}
    assert all(x.fault_class is None for x in XIDS.values() if x.kind != DRAIN)


def test_condition_names_the_worst_class_devices_and_xids() -> None:
    faults = [Fault("3", GPU_LOST, 79), Fault("1", XID_FATAL, 119), Fault("10", GPU_LOST, 79)]
    status, reason, message = node_condition(faults)
    assert (status, reason) == ("False", GPU_LOST)
    assert message == "GpuLost: device 3 (Xid 79), device 10 (Xid 79); XidFatal: device 1 (Xid 119)"
    assert worst([Fault("0", THERMAL)]) == THERMAL
    assert node_condition([Fault("0", THERMAL)]) == ("False", THERMAL, "Thermal: device 0")


def test_condition_clears_when_no_fault_remains() -> None:
    assert node_condition([]) == ("True", "NoGpuFault", "no GPU fault reported")
