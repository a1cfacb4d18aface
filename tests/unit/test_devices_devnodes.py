"""The devnodes backend on a temp dev root: cards from the char nodes matching the recipe's pattern,
their companions, a PCI address from sysfs, and a node that disappears as an unhealthy device."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from sro.api.recipes import recipe_from_dict
from sro.devices import open_backend
from sro.devices.devnodes import DevnodesBackend, node_index
from sro.devices.model import HealthEvent

RECIPE = recipe_from_dict(
    {
        "name": "real-fpga",
        "resource": "example.com/fpga",
        "backend": "devnodes",
        "pciVendor": "10ee",
        "pciClasses": ["1200"],
        "visibleDevicesEnv": "REAL_FPGA_VISIBLE_DEVICES",
        "deviceNode": "/dev/xclmgmt{index}",
        "companionNodes": ["/dev/dri/renderD{index+128}"],
        "controlNodes": ["/dev/xclctl"],
    }
)


def test_node_index_reads_the_number_where_the_pattern_has_it() -> None:
    assert node_index("xclmgmt3", "/dev/xclmgmt{index}") == 3
    assert node_index("xclmgmt12", "/dev/xclmgmt{index}") == 12
    assert node_index("nvidia7", "/dev/nvidia{minor}") == 7
    assert node_index("card0-user", "/dev/card{index}-user") == 0
    for name in ("xclmgmt", "xclmgmtx", "xclmgmt01", "xclmgmt-1", "other3", "xclmgmt٣"):
        assert node_index(name, "/dev/xclmgmt{index}") is None, name


def _node(path: Path, major: int, minor: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(major, minor))


@pytest.fixture
def dev(tmp_path: Path) -> Path:
    dev = tmp_path / "dev"
    _node(dev / "xclmgmt0", 123, 0)
    _node(dev / "xclmgmt2", 123, 2)
    _node(dev / "dri" / "renderD128", 226, 128)
    _node(dev / "xclctl", 123, 255)
    (dev / "xclmgmt1").write_text("a regular file is no card")
    (dev / "xclmgmt3").symlink_to("xclmgmt9")  # dangling: no card
    sysfs = tmp_path / "sys" / "dev" / "char" / "123:2"
    sysfs.mkdir(parents=True)
    (sysfs / "device").symlink_to("../../../devices/pci0000:00/0000:3b:00.1")
    return dev


@pytest.mark.root
def test_inventory_from_the_nodes(dev: Path, tmp_path: Path) -> None:
    backend = open_backend(RECIPE, sys_root=tmp_path / "sys", dev_root=dev)
    assert isinstance(backend, DevnodesBackend) and backend.name == "devnodes"
    inv = backend.inventory()
    assert inv.backend == "devnodes" and not inv.simulated
    assert [(d.uuid, d.index, d.minor, d.device_node, d.companion_nodes) for d in inv.devices] == [
        ("real-fpga-0", 0, 0, "/dev/xclmgmt0", ("/dev/dri/renderD128",)),
        ("real-fpga-2", 2, 2, "/dev/xclmgmt2", ()),  # its companion is not there
    ]
    assert [d.pci_bus_id for d in inv.devices] == ["", "0000:3b:00.1"]
    assert inv.control_nodes == ("/dev/xclctl",)


@pytest.mark.root
def test_a_new_card_changes_the_token_a_lost_one_does_not(dev: Path) -> None:
    backend = DevnodesBackend(RECIPE, dev_root=dev)
    token = backend.inventory_token()
    (dev / "xclmgmt2").unlink()
    assert backend.inventory_token() == token  # still there, unhealthy
    assert [d.index for d in backend.inventory().devices] == [0, 2]
    _node(dev / "xclmgmt5", 123, 5)
    assert backend.inventory_token() != token
    assert [d.index for d in backend.inventory().devices] == [0, 2, 5]


@pytest.mark.root
def test_a_node_that_disappears_is_unhealthy_until_back(dev: Path) -> None:
    backend = DevnodesBackend(RECIPE, dev_root=dev, poll_interval=0.02)
    backend.inventory()
    events: list[HealthEvent] = []
    stop = threading.Event()
    reader = threading.Thread(target=lambda: events.extend(backend.events(stop)), daemon=True)
    reader.start()

    def wait_for(n: int) -> None:
        deadline = time.monotonic() + 5
        while len(events) < n and time.monotonic() < deadline:
            time.sleep(0.01)

    time.sleep(0.1)
    assert events == []  # every node present: nothing to say
    (dev / "dri" / "renderD128").unlink()  # a companion going away takes its card down too
    wait_for(1)
    _node(dev / "dri" / "renderD128", 226, 128)
    wait_for(2)
    stop.set()
    reader.join(timeout=2)
    assert [(e.kind, e.device, e.sticky) for e in events] == [
        ("lost", "real-fpga-0", True),
        ("cleared", "real-fpga-0", False),
    ]
    assert "/dev/dri/renderD128 disappeared" in events[0].message


def test_no_dev_directory_is_no_devices(tmp_path: Path) -> None:
    backend = DevnodesBackend(RECIPE, dev_root=tmp_path / "none")
    assert backend.inventory().devices == ()
    assert backend.inventory_token() == ()
