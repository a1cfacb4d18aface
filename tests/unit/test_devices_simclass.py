"""Simulated device classes: the class config's parse and its errors (pure), the binaries' script,
and the simulated driver installing and removing a class on a temp tree with real device nodes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sro.api.recipes import Recipe, recipe_from_dict
from sro.devices import driverstate, simclass, simclass_script, simconfig, simulated_driver
from sro.devices.commands import simulate
from sro.devices.model import node_path
from sro.devices.simulated import SimulatedBackend
from sro.node.commands import driver

FPGA: dict[str, Any] = {
    "name": "example-fpga",
    "resource": "example.com/fpga",
    "backend": "simulated",
    "pciVendor": "10ee",
    "pciClasses": ["1200"],
    "visibleDevicesEnv": "EXAMPLE_FPGA_VISIBLE_DEVICES",
    "driverRoot": "/var/lib/sro/driver/example-fpga",
    "deviceNode": "/dev/xclmgmt{index}",
    "companionNodes": ["/dev/dri/renderD{index+128}"],
    "libraries": {"runtime": ["libxrt_core.so.*"]},
    "binaries": {"runtime": ["xbutil"]},
    "metrics": "health",
}
NIC: dict[str, Any] = {
    **{k: v for k, v in FPGA.items() if k != "companionNodes"},
    "name": "example-smartnic",
    "resource": "example.com/smartnic-vf",
    "visibleDevicesEnv": "EXAMPLE_NIC_VISIBLE_DEVICES",
    "driverRoot": "/var/lib/sro/driver/example-smartnic",
    "deviceNode": "/dev/sro-vf{index}",
    "controlNodes": ["/dev/sro-nicctl"],
    "libraries": {"runtime": ["libexnic.so.*"]},
    "binaries": {"runtime": ["exnic-ctl"]},
    "pools": {"example.com/vf-pool-a": {"pf": "0"}, "example.com/vf-pool-b": {"pf": "1"}},
}
FPGA_CLASS: dict[str, Any] = {
    "driverVersion": "2.16.204-sim",
    "class": "fpga",
    "count": 2,
    "defaults": {"product": "Example U250 FPGA (simulated)", "memoryMiB": 65536},
    "libraries": ["libxrt_core.so.2"],
    "binaries": ["xbutil"],
}
NIC_CLASS: dict[str, Any] = {
    "driverVersion": "5.9-sim",
    "class": "smartnic-vf",
    "count": 8,
    "defaults": {"product": "Example 100G SmartNIC VF"},
    "devices": [{"index": i, "attributes": {"pf": str(i // 4), "vf": str(i % 4)}} for i in range(8)],
    "attributes": {"vendor": "example"},
    "libraries": ["libexnic.so.1"],
    "binaries": ["exnic-ctl"],
}


def fpga() -> Recipe:
    return recipe_from_dict(FPGA)


def nic() -> Recipe:
    return recipe_from_dict(NIC)


def test_node_path_fills_index_offsets_and_minor() -> None:
    assert node_path("/dev/dri/renderD{index+128}", 1) == "/dev/dri/renderD129"
    assert node_path("/dev/xclmgmt{index}", 3) == "/dev/xclmgmt3"
    assert node_path("/dev/nvidia{minor}", 2, minor=7) == "/dev/nvidia7"
    assert node_path("/dev/sro-nicctl", 2) == "/dev/sro-nicctl"


def test_parse_fpga_class() -> None:
    sim = simclass.parse(FPGA_CLASS, fpga())
    inv = sim.inventory
    assert sim.device_class == "fpga" and inv.driver_version == "2.16.204-sim" and inv.simulated
    assert [(d.index, d.device_node, d.companion_nodes) for d in inv.devices] == [
        (0, "/dev/xclmgmt0", ("/dev/dri/renderD128",)),
        (1, "/dev/xclmgmt1", ("/dev/dri/renderD129",)),
    ]
    assert all(d.product == "Example U250 FPGA (simulated)" and d.memory_mib == 65536 for d in inv.devices)
    assert len({d.uuid for d in inv.devices}) == 2 and all(
        d.uuid.startswith("example-fpga-") for d in inv.devices
    )
    assert simclass.parse(FPGA_CLASS, fpga()) == sim  # same file, same devices
    assert (sim.libraries, sim.binaries) == (("libxrt_core.so.2",), ("xbutil",))


def test_parse_nic_class_attributes_and_suffix() -> None:
    sim = simclass.parse(NIC_CLASS, nic())
    inv = sim.inventory
    assert inv.control_nodes == ("/dev/sro-nicctl",)
    assert [d.attributes["pf"] for d in inv.devices] == ["0"] * 4 + ["1"] * 4
    assert inv.devices[5].attributes == {"pf": "1", "vf": "1", "vendor": "example"}
    # a product that does not say so is made to: nothing simulated passes for hardware
    assert all(d.product == "Example 100G SmartNIC VF (simulated)" for d in inv.devices)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"count": 0}, "count"),
        ({"count": "two"}, "count"),
        ({"colour": "red"}, "unknown field(s) ['colour']"),
        ({"driverVersion": "1 2"}, "driverVersion"),
        ({"libraries": ["libother.so.1"]}, "libraries[0]"),
        ({"libraries": ["../libxrt_core.so.2"]}, "libraries[0]"),
        ({"binaries": ["nvidia-smi"]}, "binaries[0]"),
        ({"binaries": "xbutil"}, "binaries"),
        ({"devices": [{"index": 5}]}, "devices[0].index"),
        ({"devices": [{"index": 0}, {"index": 0}]}, "devices[1].index"),
        ({"devices": [{"index": 0, "mig": []}]}, "devices[0]: unknown field(s) ['mig']"),
        ({"devices": [{"attributes": {"pf": [0]}}]}, "devices[0].attributes.pf"),
        ({"attributes": {"bad key": "x"}}, "attributes"),
        ({"attributes": {"pf": "a b"}}, "attributes.pf"),
        ({"defaults": {"memoryMiB": -1}}, "defaults.memoryMiB"),
        ({"defaults": {"product": "two\nlines"}}, "defaults.product"),
        ({"defaults": {"computeCapability": "8.0"}}, "defaults: unknown field(s)"),
        ({"devices": [{"uuid": "same"}, {"uuid": "same"}]}, "UUIDs must be unique"),
    ],
)
def test_bad_class_config_names_the_field(change: dict[str, Any], named: str) -> None:
    with pytest.raises(simconfig.SimConfigError) as e:
        simclass.parse({**FPGA_CLASS, **change}, fpga())
    assert named in str(e.value)
    assert "\n" not in str(e.value)


def test_bad_top_level_and_recipe() -> None:
    with pytest.raises(simclass.SimClassError, match="top level: expected a mapping"):
        simclass.parse(["a"], fpga())
    with pytest.raises(simclass.SimClassError, match="only a simulated recipe"):
        simclass.parse(FPGA_CLASS, recipe_from_dict({**FPGA, "backend": "devnodes", "driverRoot": "/"}))
    clash = recipe_from_dict({**FPGA, "companionNodes": ["/dev/xclmgmt{index+1}"]})
    with pytest.raises(simclass.SimClassError, match="must all differ"):
        simclass.parse(FPGA_CLASS, clash)


def test_empty_config_gives_one_default_device() -> None:
    sim = simclass.parse({"count": 1}, fpga())
    assert sim.inventory.devices[0].product == "example-fpga (simulated)"
    assert (sim.libraries, sim.binaries) == ((), ())


def test_node_plan_gives_every_node_its_own_minor() -> None:
    plan = simulated_driver.node_plan(simclass.parse(NIC_CLASS, nic()).inventory)
    assert plan[-1] == ("/dev/sro-nicctl", 255)
    fpga_plan = simulated_driver.node_plan(simclass.parse(FPGA_CLASS, fpga()).inventory)
    assert fpga_plan == [
        ("/dev/xclmgmt0", 0),
        ("/dev/xclmgmt1", 1),
        ("/dev/dri/renderD128", 2),
        ("/dev/dri/renderD129", 3),
    ]


def test_script_quotes_every_value() -> None:
    sim = simclass.parse(
        {**FPGA_CLASS, "class": "fp'ga $(id)", "defaults": {"product": "x; rm -rf /"}}, fpga()
    )
    text = simclass_script.script(sim, fpga(), "xbutil", "/var/lib/sro/driver/example-fpga")
    assert "'x; rm -rf / (simulated)'" in text
    assert "echo 'xbutil: SIMULATED fp'\"'\"'ga $(id) devices" in text
    assert 'visible="${EXAMPLE_FPGA_VISIBLE_DEVICES-all}"' in text


def _sh() -> list[str]:
    busybox = shutil.which("busybox")
    return [busybox, "sh"] if busybox else ["sh"]


def _install(tmp_path: Path, recipe: Recipe, doc: dict[str, Any], name: str) -> simulated_driver.Installed:
    sim = simclass.parse(doc, recipe)
    return simulated_driver.install(
        sim.inventory, tmp_path / name, tmp_path / "dev", "Character devices:\n  1 mem\n", recipe, sim=sim
    )


@pytest.mark.root
def test_install_class_nodes_files_and_script(tmp_path: Path) -> None:
    done = _install(tmp_path, fpga(), FPGA_CLASS, "fpga")
    dev, root = tmp_path / "dev", tmp_path / "fpga"
    got = {}
    for path in (dev / "xclmgmt0", dev / "xclmgmt1", dev / "dri" / "renderD128", dev / "dri" / "renderD129"):
        st = path.lstat()
        assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666
        got[path.name] = (os.major(st.st_rdev), os.minor(st.st_rdev))
    assert got == {"xclmgmt0": (120, 0), "xclmgmt1": (120, 1), "renderD128": (120, 2), "renderD129": (120, 3)}
    assert (root / "lib" / "libxrt_core.so.2").read_bytes()[:4] == b"\x7fELF"
    inv = driverstate.read_inventory(root)
    assert [d.companion_nodes for d in inv.devices] == [("/dev/dri/renderD128",), ("/dev/dri/renderD129",)]
    assert inv.devices == done.inventory.devices

    xbutil = str(root / "bin" / "xbutil")
    out = subprocess.run([*_sh(), xbutil, "examine"], check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    assert lines[0].startswith("xbutil: SIMULATED fpga devices, driver 2.16.204-sim")
    assert [line.split()[:4] for line in lines[2:]] == [
        ["0", "ok", "/dev/xclmgmt0", "/dev/dri/renderD128"],
        ["1", "ok", "/dev/xclmgmt1", "/dev/dri/renderD129"],
    ]
    # a fault shows; a container given device 1 sees only it
    driverstate.set_fault(root, inv.devices[1].uuid, 79)
    env = {**os.environ, "EXAMPLE_FPGA_VISIBLE_DEVICES": inv.devices[1].uuid}
    out = subprocess.run([*_sh(), xbutil, "list"], check=True, capture_output=True, text=True, env=env).stdout
    assert [line.split()[:2] for line in out.splitlines()[2:]] == [["1", "FAULT"]]
    bad = subprocess.run([*_sh(), xbutil, "program"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown command" in bad.stderr

    # idempotent: the same major, the same devices
    assert _install(tmp_path, fpga(), FPGA_CLASS, "fpga").major == done.major


@pytest.mark.root
def test_two_simulated_drivers_never_share_a_major(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    os.mknod(dev / "foreign", 0o600 | stat.S_IFCHR, os.makedev(120, 9))  # another simulated driver's
    first = _install(tmp_path, fpga(), FPGA_CLASS, "fpga")
    second = _install(tmp_path, nic(), NIC_CLASS, "nic")
    assert first.major == 121 and second.major == 122
    # reinstalling keeps each its own major, though the other's nodes are there too
    assert _install(tmp_path, fpga(), FPGA_CLASS, "fpga").major == 121
    assert _install(tmp_path, nic(), NIC_CLASS, "nic").major == 122
    with pytest.raises(simulated_driver.SimulatedDriverError, match="another driver"):
        sim = simclass.parse(FPGA_CLASS, fpga())
        simulated_driver.install(sim.inventory, tmp_path / "fpga", dev, "", fpga(), major=122, sim=sim)


@pytest.mark.root
def test_remove_takes_exactly_what_it_made(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    (dev / "keep").mkdir(parents=True)
    _install(tmp_path, fpga(), FPGA_CLASS, "fpga")
    _install(tmp_path, nic(), NIC_CLASS, "nic")
    (tmp_path / "fpga" / "lib" / "vendor-extra.so").write_text("not the driver's")
    removed = simulated_driver.remove(tmp_path / "fpga", dev)
    assert dev / "dri" in removed and dev / "xclmgmt0" in removed
    assert sorted(p.name for p in dev.iterdir()) == ["keep", "sro-nicctl", *(f"sro-vf{i}" for i in range(8))]
    assert [p.name for p in (tmp_path / "fpga").rglob("*")] == ["lib", "vendor-extra.so"]
    simulated_driver.remove(tmp_path / "nic", dev)
    assert [p.name for p in dev.iterdir()] == ["keep"]
    assert not (tmp_path / "nic").exists()


@pytest.mark.root
def test_a_smaller_config_drops_the_nodes_and_files_it_no_longer_has(tmp_path: Path) -> None:
    _install(tmp_path, nic(), NIC_CLASS, "nic")
    smaller = {**NIC_CLASS, "count": 2, "devices": NIC_CLASS["devices"][:2], "binaries": []}
    _install(tmp_path, nic(), smaller, "nic")
    assert sorted(p.name for p in (tmp_path / "dev").iterdir()) == ["sro-nicctl", "sro-vf0", "sro-vf1"]
    assert not (tmp_path / "nic" / "bin" / "exnic-ctl").exists()


@pytest.mark.root
def test_class_faults_reach_the_backend(tmp_path: Path) -> None:
    done = _install(tmp_path, fpga(), FPGA_CLASS, "fpga")
    backend = SimulatedBackend(tmp_path / "fpga", poll_interval=0.02)
    assert backend.inventory().devices[0].companion_nodes == ("/dev/dri/renderD128",)
    stop = threading.Event()
    seen: list[str] = []
    reader = threading.Thread(
        target=lambda: seen.extend(str(e.device) for e in backend.events(stop)), daemon=True
    )
    reader.start()
    driverstate.set_fault(tmp_path / "fpga", done.inventory.devices[1].uuid, 79)
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    reader.join(timeout=2)
    assert seen == [done.inventory.devices[1].uuid]


def _files(tmp_path: Path) -> tuple[Path, Path]:
    recipe, config = tmp_path / "recipe.yaml", tmp_path / "devices.yaml"
    recipe.write_text(json.dumps(FPGA))
    config.write_text(json.dumps(FPGA_CLASS))
    return recipe, config


@pytest.mark.root
def test_cli_installs_faults_and_removes_a_class(tmp_path: Path) -> None:
    recipe, config = _files(tmp_path)
    roots = ["--driver-root", str(tmp_path / "root"), "--dev-root", str(tmp_path / "dev")]
    runner = CliRunner()
    r = runner.invoke(driver, ["simulate", "--recipe-file", str(recipe), "--config", str(config), *roots])
    assert r.exit_code == 0, r.output
    assert "simulated fpga driver 2.16.204-sim (example-fpga): 2 SIMULATED devices" in r.output
    assert "/dev/xclmgmt1 /dev/dri/renderD129 Example U250 FPGA (simulated)" in r.output
    r = runner.invoke(
        simulate, ["fault", "--driver-root", str(tmp_path / "root"), "--device", "1", "--xid", "79"]
    )
    assert r.exit_code == 0, r.output
    uuid = driverstate.read_inventory(tmp_path / "root").devices[1].uuid
    assert list(driverstate.read_faults(tmp_path / "root")) == [uuid]
    r = runner.invoke(driver, ["simulate", "--recipe-file", str(recipe), "--remove", *roots])
    assert r.exit_code == 0, r.output
    assert list((tmp_path / "dev").iterdir()) == [] and not (tmp_path / "root").exists()
    r = runner.invoke(
        driver, ["simulate", "--recipe-file", str(recipe), "--personality", "simgpu", "--config", str(config)]
    )
    assert r.exit_code == 2 and "--personality" in r.output


@pytest.mark.root
def test_cli_hold_removes_the_class_on_sigterm(tmp_path: Path) -> None:
    recipe, config = _files(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sro", "driver", "simulate", "--recipe-file", str(recipe), "--config", str(config),
         "--driver-root", str(tmp_path / "root"), "--dev-root", str(tmp_path / "dev"), "--hold"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        marker = tmp_path / "root" / ".ready"
        deadline = time.monotonic() + 30
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "no ready marker"
        assert (tmp_path / "dev" / "dri" / "renderD129").is_char_device()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "SIGTERM: removed" in out
    assert list((tmp_path / "dev").iterdir()) == [] and not (tmp_path / "root").exists()
