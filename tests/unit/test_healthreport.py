"""The health report's codec, its NodeFeature encoding, the atomic file and the boot id."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sro.api.nfd_crds import NODE_NAME_LABEL
from sro.devices import healthreport as hr
from sro.devices.healthreport import DeviceFault, HealthReport

REPORT = HealthReport(
    recipe="simulated-gpu",
    resource="sro.dev/gpu",
    node="node-a",
    boot_id="b0a7-1",
    updated="2026-11-26T02:00:00Z",
    devices=("0", "1", "2", "3"),
    faults=(DeviceFault("3", (79,), "Xid 79"), DeviceFault("1", (48, 94), "Xid 48")),
    holders={"3": ("default/train-0",), "1": ("ml/a", "default/b")},
)


def _doc() -> dict[str, Any]:
    return dict(json.loads(REPORT.to_json()))


def test_round_trip_through_json() -> None:
    back = hr.from_json(REPORT.to_json())
    assert back is not None
    assert back.same_content(REPORT) and back.updated == REPORT.updated
    assert back.fault_of("3") == DeviceFault("3", (79,), "Xid 79")
    assert back.fault_of("1") == DeviceFault("1", (48, 94), "Xid 48")
    assert back.fault_of("0") is None
    assert back.holders["1"] == ("default/b", "ml/a")  # sorted
    assert hr.from_json(REPORT.to_json().encode()) is not None


def test_same_content_ignores_only_the_time() -> None:
    later = HealthReport(**{**REPORT.__dict__, "updated": "2026-11-26T03:00:00Z"})
    assert later.same_content(REPORT)
    healed = HealthReport(**{**REPORT.__dict__, "faults": ()})
    assert not healed.same_content(REPORT)
    assert not REPORT.same_content(None)


def _mutations() -> list[object]:
    """50+ inputs that are not a valid report."""
    bad: list[object] = [
        None,
        1,
        [],
        b"\xff\xfe",
        "",
        "{",
        "null",
        "[]",
        '"text"',
        "1",
        "{}",
        "[" * 100_000,
        "x" * (hr.MAX_BYTES + 1),
    ]

    def mutated(**change: object) -> str:
        d = _doc()
        for k, v in change.items():
            if v is ...:
                d.pop(k, None)
            else:
                d[k] = v
        return json.dumps(d)

    for key in ("recipe", "resource", "updated"):
        bad.append(mutated(**{key: ...}))
    for key, value in [
        ("recipe", ""),
        ("recipe", 5),
        ("recipe", "Upper"),
        ("recipe", "a/b"),
        ("recipe", "../x"),
        ("recipe", "x" * 80),
        ("resource", ""),
        ("resource", None),
        ("node", 3),
        ("bootID", ["x"]),
        ("updated", "yesterday"),
        ("updated", "2026-11-26T02:00:00"),
        ("updated", 1764122400),
        ("devices", "0,1"),
        ("devices", [0, 1]),
        ("devices", ["0", "0"]),
        ("devices", ["a,b"]),
        ("devices", [""]),
        ("devices", ["has space"]),
        ("devices", [["0"]]),
        ("faults", {}),
        ("faults", [1]),
        ("faults", [{"device": "9", "xids": [79], "detail": ""}]),  # not a device it serves
        ("faults", [{"device": "3", "xids": "79", "detail": ""}]),
        ("faults", [{"device": "3", "xids": [True], "detail": ""}]),
        ("faults", [{"device": "3", "xids": [-1], "detail": ""}]),
        ("faults", [{"device": "3", "xids": [1.5], "detail": ""}]),
        ("faults", [{"device": "3", "xids": [10**9], "detail": ""}]),
        ("faults", [{"device": "3", "xids": [79], "detail": 7}]),
        ("faults", [{"device": "3", "xids": [79], "extra": 1}]),
        ("faults", [{"xids": [79]}]),
        ("faults", [{"device": "3"}, {"device": "3"}]),  # one device twice
        ("holders", []),
        ("holders", {"9": ["default/p"]}),
        ("holders", {"3": "default/p"}),
        ("holders", {"3": ["no-namespace"]}),
        ("holders", {"3": ["a/b/c"]}),
        ("holders", {"3": [5]}),
        ("holders", {"3": ["UPPER/pod"]}),
        ("unknown", 1),
    ]:
        bad.append(mutated(**{key: value}))
    return bad


BAD = _mutations()


def test_there_are_fifty_malformed_cases() -> None:
    assert len(BAD) >= 50


@pytest.mark.parametrize("text", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_malformed_input_is_none_never_raises(text: object) -> None:
    assert hr.from_json(text) is None


def test_a_valid_minimal_report_is_accepted() -> None:
    minimal = {"recipe": "r", "resource": "x/y", "updated": "2026-01-01T00:00:00Z"}
    got = hr.from_json(json.dumps(minimal))
    assert got is not None and got.devices == () and got.faults == () and got.node == ""


def test_features_round_trip() -> None:
    other = HealthReport("fpga", "example.com/fpga", "node-a", "b0a7-1", "2026-11-26T01:00:00Z", ("0",))
    features = hr.to_features([REPORT, other])
    assert features["attributes"][hr.DEVICES_FEATURE]["elements"] == {"fpga": "0", "simulated-gpu": "0,1,2,3"}
    elements = features["instances"][hr.HEALTH_FEATURE]["elements"]
    assert {"recipe": "simulated-gpu", "device": "1", "xids": "48,94", "detail": "Xid 48"} in [
        e["attributes"] for e in elements
    ]
    # strings only, as NFD's schema asks
    for section in features.values():
        for body in section.values():
            items = body["elements"]
            values = (
                [v for e in items for v in e["attributes"].values()]
                if isinstance(items, list)
                else items.values()
            )
            assert all(isinstance(v, str) for v in values)
    obj = {
        "metadata": {"name": "node-a", "labels": {NODE_NAME_LABEL: "node-a"}},
        "spec": {"features": features},
    }
    back = hr.reports_from_nodefeature(obj)
    assert set(back) == {"fpga", "simulated-gpu"}
    assert back["simulated-gpu"] == HealthReport(**{**REPORT.__dict__, "faults": tuple(sorted(REPORT.faults, key=lambda f: f.device)), "holders": {"1": ("default/b", "ml/a"), "3": ("default/train-0",)}})  # fmt: skip
    assert back["fpga"] == other


def test_no_reports_contribute_nothing() -> None:
    assert hr.to_features([]) == {}
    assert hr.reports_from_nodefeature({"spec": {"features": {"flags": {}}}}) == {}


def test_merge_keeps_discovery_features() -> None:
    base = {"flags": {"cpu.cpuid": {"elements": {"AVX": {}}}}, "attributes": {"kernel.version": {"elements": {"major": "6"}}}, "instances": {}}  # fmt: skip
    merged = hr.merge_features(base, hr.to_features([REPORT]))
    assert merged["flags"] == base["flags"]
    assert set(merged["attributes"]) >= {"kernel.version", hr.BOOT_FEATURE, hr.DEVICES_FEATURE}
    assert hr.reports_from_nodefeature({"spec": {"features": merged}})["simulated-gpu"].boot_id == "b0a7-1"
    assert base["attributes"] == {"kernel.version": {"elements": {"major": "6"}}}  # not mutated


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"spec": None},
        {"spec": {"features": []}},
        {"spec": {"features": {"attributes": {hr.DEVICES_FEATURE: {"elements": ["x"]}}}}},
        {"spec": {"features": {"attributes": {hr.DEVICES_FEATURE: {"elements": {"r": 5}}}}}},
        {"spec": {"features": {"attributes": {hr.DEVICES_FEATURE: {"elements": {"r": "0"}}}}}},  # no resource
        {"metadata": [], "spec": {"features": {"attributes": {hr.DEVICES_FEATURE: None}}}},
    ],
)
def test_bad_nodefeatures_give_nothing(obj: dict[str, Any]) -> None:
    assert hr.reports_from_nodefeature(obj) == {}


def test_bad_elements_are_skipped_the_rest_kept() -> None:
    features = hr.to_features([REPORT])
    features["instances"][hr.HEALTH_FEATURE]["elements"] += [
        {"attributes": {"recipe": "simulated-gpu", "device": "2", "xids": "seven"}},
        {"attributes": {"recipe": "simulated-gpu", "device": "9", "xids": "79"}},
        {"attributes": {"recipe": "simulated-gpu", "device": "0", "xids": "79", "detail": 5}},
        "not a mapping",
        {"attributes": "no"},
    ]
    features["instances"][hr.HOLDERS_FEATURE]["elements"] += [
        {"attributes": {"recipe": "simulated-gpu", "device": "2", "pod": "nonamespace"}},
        {"attributes": {"recipe": "simulated-gpu", "device": "42", "pod": "a/b"}},
    ]
    features["attributes"][hr.DEVICES_FEATURE]["elements"]["Bad Name"] = "0"
    back = hr.reports_from_nodefeature({"spec": {"features": features}})
    assert set(back) == {"simulated-gpu"}
    assert [f.device for f in back["simulated-gpu"].faults] == ["1", "3"]
    assert set(back["simulated-gpu"].holders) == {"1", "3"}


def test_write_is_atomic_and_read_back(tmp_path: Path) -> None:
    d = tmp_path / "health"
    path = hr.write_report(d, REPORT)
    assert path == d / "simulated-gpu.json"
    assert [p.name for p in d.iterdir()] == ["simulated-gpu.json"]  # no temporary left
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    (d / "broken.json").write_text("{")
    (d / "fpga.json").write_text(REPORT.to_json())  # a report under another recipe's name
    (d / ".simulated-gpu.x.tmp").write_text("partial")
    got = hr.read_reports(d)
    assert [r.recipe for r in got] == ["simulated-gpu"]
    assert hr.read_reports(tmp_path / "missing") == []
    before = hr.snapshot(d)
    os.utime(path, ns=(1, 1))
    assert hr.snapshot(d) != before
    assert hr.snapshot(tmp_path / "missing") == ()
    with pytest.raises(ValueError):
        hr.write_report(d, HealthReport("../evil", "x/y", "", "", "2026-01-01T00:00:00Z"))


def test_boot_id_prefers_the_simulated_driver(tmp_path: Path) -> None:
    proc = tmp_path / "proc_boot_id"
    proc.write_text("kernel-boot\n")
    root = tmp_path / "driver"
    assert hr.boot_id(root, proc) == "kernel-boot"
    (root / hr.SIM_BOOT_ID).parent.mkdir(parents=True)
    (root / hr.SIM_BOOT_ID).write_text("sim-boot-2\n")
    assert hr.boot_id(root, proc) == "sim-boot-2"
    (root / hr.SIM_BOOT_ID).write_text("")
    assert hr.boot_id(root, proc) == "kernel-boot"
    assert hr.boot_id(root, tmp_path / "none") == ""
