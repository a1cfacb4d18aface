"""Announced ids per resource: MIG strategies none/single/mixed and per-device time-slicing."""

from __future__ import annotations

import pytest

from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.devices import simconfig
from sro.node.deviceplugin.announcing import plan
from sro.node.deviceplugin.config import ConfigError, parse_config

FOUR = simconfig.parse({"count": 4, "numaNodes": [0, 0, 1, 1]})
MIXED = simconfig.parse(
    {
        "count": 3,
        "defaults": {"memoryMiB": 40960},
        "devices": [
            {"mig": [{"profile": "1g.10gb"}, {"profile": "1g.10gb"}]},
            {"mig": [{"profile": "2g.20gb"}]},
        ],
    }
)


def test_none_announces_whole_gpus_by_uuid() -> None:
    (p,) = plan(FOUR, parse_config(None, SIMULATED_GPU))
    assert p.resource == "sro.dev/simulated-gpu" and p.replicas == 1
    assert [a.id for a in p.devices] == [d.uuid for d in FOUR.devices]
    assert [a.unit.numa_node for a in p.devices] == [0, 0, 1, 1]
    assert p.devices[0].unit.device_nodes == ("/dev/sro-simgpu0",)


def test_none_ignores_mig_layout() -> None:
    (p,) = plan(MIXED, parse_config(None, SIMULATED_GPU))
    assert len(p.devices) == 3


def test_mixed_one_resource_per_profile() -> None:
    plans = {
        p.resource: p for p in plan(MIXED, parse_config({"flags": {"migStrategy": "mixed"}}, NVIDIA_GPU))
    }
    assert sorted(plans) == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"]
    assert [a.unit.index for a in plans["nvidia.com/gpu"].devices] == ["2"]
    assert [a.unit.index for a in plans["nvidia.com/mig-1g.10gb"].devices] == ["0:0", "0:1"]
    assert [a.id for a in plans["nvidia.com/mig-2g.20gb"].devices] == [MIXED.devices[1].mig_devices[0].uuid]
    sim = {p.resource for p in plan(MIXED, parse_config({"flags": {"migStrategy": "mixed"}}, SIMULATED_GPU))}
    assert "sro.dev/simulated-gpu-mig-1g.10gb" in sim


def test_single_needs_one_profile_on_all_gpus() -> None:
    with pytest.raises(ConfigError, match="MIG disabled"):
        plan(MIXED, parse_config({"flags": {"migStrategy": "single"}}, NVIDIA_GPU))
    uniform = simconfig.parse(
        {"count": 2, "devices": [{"mig": [{"profile": "1g.5gb"}] * 2}, {"mig": [{"profile": "1g.5gb"}]}]}
    )
    (p,) = plan(uniform, parse_config({"flags": {"migStrategy": "single"}}, NVIDIA_GPU))
    assert p.resource == "nvidia.com/gpu" and [a.unit.index for a in p.devices] == ["0:0", "0:1", "1:0"]
    two = simconfig.parse({"count": 1, "devices": [{"mig": [{"profile": "1g.5gb"}, {"profile": "2g.10gb"}]}]})
    with pytest.raises(ConfigError, match="one MIG profile"):
        plan(two, parse_config({"flags": {"migStrategy": "single"}}, NVIDIA_GPU))


def test_time_slicing_per_device() -> None:
    cfg = parse_config(
        {
            "sharing": {
                "timeSlicing": {
                    "resources": [
                        {
                            "name": "sro.dev/simulated-gpu",
                            "replicas": 4,
                            "devices": [0, FOUR.devices[1].uuid],
                        },
                        {"name": "sro.dev/simulated-gpu", "replicas": 2, "devices": [2]},
                    ]
                }
            }
        },
        SIMULATED_GPU,
    )
    (p,) = plan(FOUR, cfg)
    ids = [a.id for a in p.devices]
    u = [d.uuid for d in FOUR.devices]
    assert ids[:4] == [f"{u[3]}"] + [f"{u[0]}::{n}" for n in (1, 2, 3)]
    assert sum(1 for i in ids if i.startswith(u[0])) == 4 and sum(1 for i in ids if i.startswith(u[1])) == 4
    assert sum(1 for i in ids if i.startswith(u[2])) == 2 and ids.count(u[3]) == 1
    assert len(ids) == 11 and p.replicas == 4


def test_rename_makes_a_shared_resource_next_to_the_plain_one() -> None:
    cfg = parse_config(
        {
            "sharing": {
                "timeSlicing": {
                    "renameByDefault": True,
                    "resources": [{"name": "sro.dev/simulated-gpu", "replicas": 2, "devices": [0]}],
                }
            }
        },
        SIMULATED_GPU,
    )
    plans = {p.resource: p for p in plan(FOUR, cfg)}
    assert sorted(plans) == ["sro.dev/simulated-gpu", "sro.dev/simulated-gpu.shared"]
    assert len(plans["sro.dev/simulated-gpu"].devices) == 3
    assert [a.replica for a in plans["sro.dev/simulated-gpu.shared"].devices] == [1, 2]


def test_sharing_errors() -> None:
    unknown = {
        "sharing": {
            "timeSlicing": {"resources": [{"name": "sro.dev/simulated-gpu", "replicas": 2, "devices": [9]}]}
        }
    }
    with pytest.raises(ConfigError, match="no device '9'"):
        plan(FOUR, parse_config(unknown, SIMULATED_GPU))
    overlap = {
        "sharing": {
            "timeSlicing": {
                "resources": [
                    {"name": "sro.dev/simulated-gpu", "replicas": 2},
                    {"name": "sro.dev/simulated-gpu", "replicas": 3, "devices": [1]},
                ]
            }
        }
    }
    with pytest.raises(ConfigError, match="more than one rule"):
        plan(FOUR, parse_config(overlap, SIMULATED_GPU))
    other = {"sharing": {"timeSlicing": {"resources": [{"name": "example.com/other", "replicas": 2}]}}}
    with pytest.raises(ConfigError, match="not announced"):
        plan(FOUR, parse_config(other, SIMULATED_GPU))
