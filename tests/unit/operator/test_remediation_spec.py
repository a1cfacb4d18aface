"""`spec.remediation` as the API server and the operator read it, the breaker's arithmetic and the
record's codec: bad values are refused naming the field; defaults are what the issue states."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sro.api.crd import crd
from sro.api.specialresource import RemediationSpec, SpecError
from sro.api.specparsing import parse_spec
from sro.api.timestamps import stamp
from sro.devices.faultclasses import ECC_UNCORRECTABLE, GPU_LOST, THERMAL, XID_FATAL, Fault
from sro.operator.remediation.breaker import admit
from sro.operator.remediation.policy import choose, max_unavailable
from sro.operator.remediation.record import EVICTING, Record

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def remediation(**doc: Any) -> RemediationSpec:
    return parse_spec("gpus", {"recipe": "simulated-gpu", "remediation": doc}).remediation


def test_defaults() -> None:
    got = parse_spec("gpus", {"recipe": "simulated-gpu"}).remediation
    assert got == remediation() == RemediationSpec()
    assert (got.max_concurrent_nodes, got.max_unavailable, got.max_attempts) == (1, "25%", 3)
    assert (got.window_seconds, got.dry_run, got.paused) == (3600, False, False)
    assert got.action(GPU_LOST) == "reset-device" and got.action(THERMAL) == "none"


def test_actions_per_class_and_windows() -> None:
    got = remediation(actions={"gpuLost": "reboot", "thermal": "drain-and-reset"}, window="90m")
    assert got.action(GPU_LOST) == "reboot" and got.action(THERMAL) == "drain-and-reset"
    assert got.action(XID_FATAL) == "reset-device"  # the others keep their default
    assert got.window_seconds == 5400
    assert remediation(maxUnavailable="100%").max_unavailable == "100%"
    assert remediation(maxUnavailable=4).max_unavailable == 4


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"actions": {"gpuLost": "explode"}}, "spec.remediation.actions.gpuLost: must be one of"),
        ({"actions": {"cosmicRay": "none"}}, "spec.remediation.actions: unknown fault class"),
        ({"maxUnavailable": "101%"}, "spec.remediation.maxUnavailable"),
        ({"maxUnavailable": "-1"}, "spec.remediation.maxUnavailable"),
        ({"maxUnavailable": -1}, "spec.remediation.maxUnavailable"),
        ({"maxUnavailable": 0}, "spec.remediation.maxUnavailable"),
        ({"maxConcurrentNodes": 0}, "spec.remediation.maxConcurrentNodes"),
        ({"maxAttempts": -3}, "spec.remediation.maxAttempts"),
        ({"window": "1d"}, "spec.remediation.window"),
        ({"window": "169h"}, "spec.remediation.window: '169h' is longer than 168h"),
        ({"dryRun": "yes"}, "spec.remediation.dryRun"),
    ],
)
def test_bad_values_are_refused_naming_the_field(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError, match="^" + field.replace(".", r"\.")):
        remediation(**doc)


def test_the_crd_schema_refuses_unknown_actions_and_bad_breakers() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rem = schema["properties"]["remediation"]["properties"]
    assert rem["actions"]["properties"]["gpuLost"]["enum"] == [
        "none",
        "restart-workload",
        "reset-device",
        "drain-and-reset",
        "reboot",
    ]
    assert rem["maxUnavailable"]["default"] == "25%" and "101" not in rem["maxUnavailable"]["pattern"]
    assert rem["maxConcurrentNodes"]["minimum"] == 1 and rem["maxAttempts"]["default"] == 3


@pytest.mark.parametrize(
    ("value", "nodes", "limit"), [("25%", 50, 13), ("25%", 3, 1), ("1%", 1, 1), (2, 50, 2)]
)
def test_the_breaker_rounds_up_and_allows_one_node_at_least(value: int | str, nodes: int, limit: int) -> None:
    assert max_unavailable(RemediationSpec(max_unavailable=value), nodes) == limit


def test_admit_counts_nodes_already_out_of_service() -> None:
    s = RemediationSpec(max_concurrent_nodes=10, max_unavailable=2)
    v = admit(s, 10, ["a", "b", "c"], active=[], unavailable=["z"])
    assert v.starts == {"a"} and v.tripped and set(v.waiting) == {"b", "c"}
    v = admit(s, 10, ["a", "b"], active=[], unavailable=["a"])  # a is down already: it costs nothing
    assert v.starts == {"a", "b"}


def test_the_node_gets_the_strongest_action_among_its_faults() -> None:
    s = RemediationSpec()
    got = choose(s, [Fault("1", XID_FATAL, 119), Fault("0", ECC_UNCORRECTABLE, 48), Fault("2", THERMAL)])
    assert got is not None
    assert (got.fault_class, got.action, got.devices, got.xids) == (
        ECC_UNCORRECTABLE,
        "drain-and-reset",
        ("0", "1"),  # Thermal's action is none: its device is not the action's
        (48, 119),
    )
    assert choose(s, [Fault("2", THERMAL)]) is None


def test_the_record_round_trips_and_garbage_reads_as_absent() -> None:
    rec = Record(
        EVICTING,
        GPU_LOST,
        "reset-device",
        ("3",),
        (79,),
        {EVICTING: stamp(NOW)},
        attempts=(stamp(NOW),),
        cordoned=True,
        evicted=("default/a",),
        boot_id="b",
        started=stamp(NOW),
        updated=stamp(NOW),
        reason="r",
    )
    assert Record.from_json(rec.to_json()) == rec
    assert Record.from_json("[" * 5000) is None
    assert Record.from_json('{"state": "bogus"}') is None


def test_attempts_within_the_window() -> None:
    old, new = stamp(NOW - timedelta(hours=2)), stamp(NOW - timedelta(minutes=5))
    rec = Record(EVICTING, attempts=(old, new, "garbled"))
    assert rec.attempts_within(NOW, 3600) == (new, "garbled")  # an unreadable one still counts
