"""The simulated driver against real files: device nodes, ELF libraries (ldconfig, dlopen,
readelf), simgpu-smi under busybox sh, fault state, the backend's health events, removal."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

from sro.api.recipes import SIMULATED_GPU
from sro.devices import driverstate, elf, simconfig, simulated_driver
from sro.devices.model import HealthEvent
from sro.devices.simulated import SimulatedBackend, fault_events

PROC_DEVICES = "Character devices:\n  1 mem\n120 taken\n121 taken\n\nBlock devices:\n  7 loop\n122 blk\n"
DOC = {
    "driverVersion": "1.2-sim",
    "count": 3,
    "numaNodes": [0, 0, 1],
    "nvlinks": [{"between": [0, 1], "links": 2}],
}


def test_pick_major_skips_used_and_keeps_previous() -> None:
    assert simulated_driver.used_majors(PROC_DEVICES) == {1, 120, 121}
    assert simulated_driver.pick_major(PROC_DEVICES) == 122  # block majors do not count
    assert simulated_driver.pick_major(PROC_DEVICES, previous=125) == 125
    assert simulated_driver.pick_major(PROC_DEVICES, previous=120) == 122
    full = "".join(f"{m} x\n" for m in simulated_driver.CANDIDATE_MAJORS)
    with pytest.raises(simulated_driver.SimulatedDriverError, match="no free character major"):
        simulated_driver.pick_major(full)


def test_elf_hash_known_values() -> None:
    # values from the System V ABI's hash function
    assert elf.elf_hash(b"") == 0
    assert elf.elf_hash(b"printf") == 0x077905A6
    assert elf.elf_hash(b"exit") == 0x0006CF04


@pytest.fixture
def installed(tmp_path: Path) -> simulated_driver.Installed:
    inv = simconfig.parse(DOC, device_node=SIMULATED_GPU.device_node)
    return simulated_driver.install(
        inv, tmp_path / "root", tmp_path / "dev", Path("/proc/devices").read_text()
    )


@pytest.mark.root
def test_install_creates_nodes_files_and_state(installed: simulated_driver.Installed, tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    names = sorted(p.name for p in dev.iterdir())
    assert names == ["sro-simgpu0", "sro-simgpu1", "sro-simgpu2", "sro-simgpuctl"]
    minors = {}
    for p in dev.iterdir():
        st = p.lstat()
        assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666
        assert os.major(st.st_rdev) == installed.major
        minors[p.name] = os.minor(st.st_rdev)
    assert minors == {"sro-simgpu0": 0, "sro-simgpu1": 1, "sro-simgpu2": 2, "sro-simgpuctl": 255}
    # no kernel driver owns the major: the host itself gets ENXIO (a container allowed by its cgroup too)
    assert str(installed.major) not in [
        line.split()[0] for line in Path("/proc/devices").read_text().splitlines() if line[:1].strip()
    ]
    with pytest.raises(OSError) as e:
        os.open(dev / "sro-simgpu0", os.O_RDWR)
    assert e.value.errno in (errno.ENXIO, errno.EACCES)  # EACCES only when the tmp fs is mounted nodev

    root = tmp_path / "root"
    inv = driverstate.read_inventory(root)
    assert inv.simulated and inv.control_nodes == ("/dev/sro-simgpuctl",)
    assert [d.uuid for d in inv.devices] == [d.uuid for d in installed.inventory.devices]
    assert inv.devices[0].nvlinks == {inv.devices[1].uuid: 2}
    assert json.loads((root / "faults.json").read_text()) == {"faults": {}}

    # idempotent: same major, same UUIDs
    again = simulated_driver.install(installed.inventory, root, dev, Path("/proc/devices").read_text())
    assert again.major == installed.major


@pytest.mark.root
def test_libraries_are_real_shared_objects(installed: simulated_driver.Installed, tmp_path: Path) -> None:
    lib = tmp_path / "root" / "lib" / "libsimgpu.so.1"
    loaded = ctypes.CDLL(str(lib))
    assert (ctypes.c_char * 8).in_dll(loaded, "simgpu_version").value == b"1.2-sim"
    assert (ctypes.c_char * 2).in_dll(loaded, "simgpu_device_count").value == b"3"
    # ldconfig accepts them and indexes them by their DT_SONAME
    conf = tmp_path / "ld.conf"
    conf.write_text(f"{tmp_path / 'root' / 'lib'}\n")
    cache = tmp_path / "ld.cache"
    subprocess.run(["ldconfig", "-C", str(cache), "-f", str(conf)], check=True, capture_output=True)
    listing = subprocess.run(
        ["ldconfig", "-p", "-C", str(cache)], check=True, capture_output=True, text=True
    ).stdout
    assert any(
        line.strip().startswith("libsimgpu.so.1 (libc6") and line.endswith(f"=> {lib}")
        for line in listing.splitlines()
    )
    assert "libsimgpu-ml.so.1" in listing
    if shutil.which("readelf"):
        out = subprocess.run(
            ["readelf", "-d", "-W", str(lib)], check=True, capture_output=True, text=True
        ).stdout
        assert "Library soname: [libsimgpu.so.1]" in out


@pytest.mark.root
def test_smi_under_busybox_and_faults(installed: simulated_driver.Installed, tmp_path: Path) -> None:
    root = tmp_path / "root"
    sh = shutil.which("busybox")
    cmd = [sh, "sh"] if sh else ["sh"]
    smi = str(root / "bin" / "simgpu-smi")
    out = subprocess.run([*cmd, smi], check=True, capture_output=True, text=True).stdout
    assert "SIMULATED" in out and out.count(" ok ") == 3
    u = [d.uuid for d in installed.inventory.devices]
    driverstate.set_fault(root, u[1], 79)
    out = subprocess.run([*cmd, smi], check=True, capture_output=True, text=True).stdout
    assert [line.split()[4] for line in out.splitlines()[2:]] == ["ok", "FAULT", "ok"]
    env = {**os.environ, "SRO_VISIBLE_DEVICES": f"2,{u[0]}"}
    out = subprocess.run([*cmd, smi, "-L"], check=True, capture_output=True, text=True, env=env).stdout
    assert out.splitlines() == [
        f"GPU 0: SRO Simulated GPU (UUID: {u[0]}) [simulated]",
        f"GPU 2: SRO Simulated GPU (UUID: {u[2]}) [simulated]",
    ]
    assert driverstate.clear_faults(root, None) == [u[1]]
    assert driverstate.read_faults(root) == {}


@pytest.mark.root
def test_remove_takes_only_its_own_nodes(installed: simulated_driver.Installed, tmp_path: Path) -> None:
    stray = tmp_path / "dev" / "other"
    stray.write_text("not ours")
    removed = simulated_driver.remove(tmp_path / "root", tmp_path / "dev")
    assert len(removed) >= 4
    assert sorted(p.name for p in (tmp_path / "dev").iterdir()) == ["other"]
    assert not (tmp_path / "root").exists()


def test_fault_events_diff() -> None:
    f = driverstate.Fault(79, 1.0)
    evs = fault_events({}, {"GPU-a": f}, 5.0)  # type: ignore[dict-item]
    assert evs == [HealthEvent("xid", "GPU-a", 5.0, xid=79, sticky=True, message="")]  # type: ignore[arg-type]
    assert [e.kind for e in fault_events({"GPU-a": f}, {}, 6.0)] == ["cleared"]  # type: ignore[dict-item]
    assert fault_events({"GPU-a": f}, {"GPU-a": f}, 6.0) == []  # type: ignore[dict-item]


@pytest.mark.root
def test_backend_reports_injected_faults(installed: simulated_driver.Installed, tmp_path: Path) -> None:
    root = tmp_path / "root"
    backend = SimulatedBackend(root, poll_interval=0.02)
    assert [d.index for d in backend.inventory().devices] == [0, 1, 2]
    events: list[HealthEvent] = []
    stop = threading.Event()
    reader = threading.Thread(target=lambda: events.extend(backend.events(stop)), daemon=True)
    reader.start()
    u = installed.inventory.devices[2].uuid
    driverstate.set_fault(root, u, 48)

    def wait_for(n: int) -> None:
        deadline = time.monotonic() + 5
        while len(events) < n and time.monotonic() < deadline:
            time.sleep(0.01)

    wait_for(1)
    (root / "faults.json").write_text("{broken")  # a bad edit is ignored, state kept
    time.sleep(0.1)
    driverstate.clear_faults(root, None)  # clearing all also repairs the file
    wait_for(2)
    stop.set()
    reader.join(timeout=2)
    assert [(e.kind, e.device, e.xid) for e in events] == [("xid", u, 48), ("cleared", u, None)]


def test_driverstate_errors(tmp_path: Path) -> None:
    with pytest.raises(driverstate.DriverStateError, match="sro driver simulate"):
        driverstate.read_inventory(tmp_path)
    (tmp_path / "devices.json").write_text('{"formatVersion": 1, "devices": [{"uuid": "x"}]}')
    with pytest.raises(driverstate.DriverStateError, match="malformed device list"):
        driverstate.read_inventory(tmp_path)
    (tmp_path / "faults.json").write_text('{"faults": {"GPU-a": {"xid": "79"}}}')
    with pytest.raises(driverstate.DriverStateError, match="xid must be an integer"):
        driverstate.read_faults(tmp_path)


@pytest.mark.root
def test_mounts_strategy_finds_the_driver_files(
    installed: simulated_driver.Installed, tmp_path: Path
) -> None:
    from sro.node.deviceplugin import drivermounts as driverfiles

    found = driverfiles.find(SIMULATED_GPU, tmp_path / "root")
    root = SIMULATED_GPU.driver_root
    assert [(m.host_path, m.container_path, m.read_only) for m in found] == [
        (f"{root}/lib/libsimgpu-ml.so.1", f"{root}/lib/libsimgpu-ml.so.1", True),
        (f"{root}/bin/simgpu-smi", f"{root}/bin/simgpu-smi", True),
        (f"{root}/lib/libsimgpu.so.1", f"{root}/lib/libsimgpu.so.1", True),
    ]
