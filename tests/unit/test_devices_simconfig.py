"""The simulated device description: YAML document -> Inventory, and its errors."""

from __future__ import annotations

import pytest
import yaml

from sro.devices import simconfig
from sro.devices.simconfig import SimConfigError

EIGHT = yaml.safe_load(
    """
driverVersion: "550.0-sim"
defaults: {product: SRO Simulated H100, memoryMiB: 81920, computeCapability: "9.0"}
count: 8
numaNodes: [0, 0, 0, 0, 1, 1, 1, 1]
nvlinkIslands: [[0, 1, 2, 3], [4, 5, 6, 7]]
nvlinkLinks: 4
nvlinks: [{between: [3, 4], links: 1}]
devices:
  - {index: 0, mig: [{profile: 1g.10gb}, {profile: 1g.10gb}, {profile: 3g.40gb}]}
"""
)


def test_eight_devices_with_topology_and_mig() -> None:
    inv = simconfig.parse(EIGHT)
    assert inv.simulated and inv.backend == "simulated" and inv.driver_version == "550.0-sim"
    assert [d.index for d in inv.devices] == list(range(8))
    assert all(d.uuid.startswith("GPU-") and d.simulated for d in inv.devices)
    assert len({d.uuid for d in inv.devices}) == 8
    d0, d3, d4 = inv.devices[0], inv.devices[3], inv.devices[4]
    assert d0.device_node == "/dev/sro-simgpu0" and d0.minor == 0
    assert d0.pci_bus_id == "0000:10:00.0" and d0.memory_mib == 81920 and d0.compute_capability == "9.0"
    assert d0.numa_node == 0 and d4.numa_node == 1
    assert d0.nvlinks == {inv.devices[1].uuid: 4, inv.devices[2].uuid: 4, d3.uuid: 4}
    assert d3.nvlinks[d4.uuid] == 1 and d4.nvlinks[d3.uuid] == 1
    assert d0.mig_enabled and [m.profile for m in d0.mig_devices] == ["1g.10gb", "1g.10gb", "3g.40gb"]
    assert d0.mig_devices[2].memory_mib == 40 * 1024 and d0.mig_devices[0].parent_uuid == d0.uuid
    assert not inv.devices[1].mig_enabled


def test_same_file_same_uuids_and_seed_changes_them() -> None:
    assert simconfig.parse(EIGHT).devices[5].uuid == simconfig.parse(EIGHT).devices[5].uuid
    other = simconfig.parse({**EIGHT, "seed": "node-b"})
    assert other.devices[5].uuid != simconfig.parse(EIGHT).devices[5].uuid


def test_empty_document_is_zero_devices() -> None:
    assert simconfig.parse(None).devices == ()


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ([1, 2], "top level"),
        ({"cuont": 2}, "unknown field"),
        ({"count": -1}, "count"),
        ({"count": 2, "numaNodes": [0]}, "numaNodes"),
        ({"count": 2, "nvlinkIslands": [[0, 5]]}, "nvlinkIslands[0]"),
        ({"count": 2, "nvlinks": [{"between": [1, 1]}]}, "nvlinks[0]"),
        ({"count": 1, "devices": [{"computeCapability": "nine"}]}, "devices[0].computeCapability"),
        ({"count": 1, "devices": [{"memoryMiB": "lots"}]}, "devices[0].memoryMiB"),
        ({"count": 1, "devices": [{"mig": [{"profile": "big"}]}]}, "devices[0].mig[0].profile"),
        ({"count": 1, "devices": [{"memoryMiB": 1024, "mig": [{"profile": "1g.10gb"}]}]}, "devices[0].mig"),
        ({"count": 2, "devices": [{"uuid": "GPU-x"}, {"uuid": "GPU-x"}]}, "unique"),
    ],
)
def test_errors_name_the_field(doc: object, field: str) -> None:
    with pytest.raises(SimConfigError, match=field.replace("[", r"\[").replace("]", r"\]")):
        simconfig.parse(doc)
