"""`sro driver simulate --personality nvidia` for real, in temp driver and dev roots: NVIDIA's char
nodes and driver files, the NVML state, an upgrade, --hold and removal; then the real clients on top
(pynvml through `NvmlBackend(driver_root=...)`, and nvidia-smi), each in a subprocess because NVML
is process-global, reading the same inventory back and a GPU lost after `sro simulate fault --xid 79`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sro.devices import driverstate, simulated_driver, simulated_nvidia
from sro.devices.simnvml_format import records
from sro.local.native import NATIVE_DIR, NativeBuildError, SimNvmlBuild
from tests.simnvml import simnvml_build  # noqa: F401  (a fixture, asked for by name)
from tests.simnvml_driver import child_env

pytestmark = pytest.mark.root

PYTHON = str(Path(sys.prefix) / "bin" / "python")
CONFIG = {
    "personality": "nvidia",
    "count": 4,
    "numaNodes": [0, 0, 1, 1],
    "nvlinks": [{"between": [0, 1], "links": 4}, {"between": [2, 3], "links": 2}],
    "devices": [{"mig": [{"profile": "1g.5gb"}, {"profile": "3g.20gb"}]}],
}


@pytest.fixture(scope="module")
def real_build(request: pytest.FixtureRequest) -> SimNvmlBuild | None:
    """The compiled simulated NVML when this checkout has its sources and gcc builds them."""
    if not (NATIVE_DIR / "libnvidia-ml.c").exists():
        return None
    try:
        build: SimNvmlBuild = request.getfixturevalue("simnvml_build")
    except (pytest.skip.Exception, NativeBuildError):
        return None
    return build


@pytest.fixture
def tree(tmp_path: Path, real_build: SimNvmlBuild | None) -> Path:
    proc_devices = Path("/proc/devices").read_text()
    reason = simulated_nvidia.refusal("", proc_devices)
    if reason is not None:
        pytest.skip(f"this host has a real NVIDIA driver: {reason}")
    native = tmp_path / "native"
    native.mkdir()
    if real_build is not None and real_build.smi is not None:
        shutil.copy(real_build.library, native / "libnvidia-ml.so.1")
        shutil.copy(real_build.smi, native / "nvidia-smi")
    else:  # the layout is checked all the same; the clients' tests skip
        (native / "libnvidia-ml.so.1").write_bytes(b"\x7fELF placeholder")
        (native / "nvidia-smi").write_text("#!/bin/sh\n")
    (tmp_path / "modules").write_text("snd 1 0 - Live 0x0\n")
    (tmp_path / "devices.yaml").write_text(yaml.safe_dump(CONFIG))
    return tmp_path


def _sro(tree: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([PYTHON, "-m", "sro", *args], capture_output=True, text=True, timeout=60)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def _install(tree: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return _sro(
        tree, "driver", "simulate", "--config", str(tree / "devices.yaml"), *_roots(tree),
        "--proc-modules", str(tree / "modules"), "--native-dir", str(tree / "native"), *extra,
    )  # fmt: skip


def _roots(tree: Path) -> tuple[str, ...]:
    return ("--driver-root", str(tree / "root"), "--dev-root", str(tree / "dev"))


def _node(path: Path) -> tuple[int, int]:
    st = path.lstat()
    assert stat.S_ISCHR(st.st_mode), path
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def _state(tree: Path) -> str:
    return (tree / "root/run/sro-simnvml/state").read_text()


def test_install_upgrade_and_remove(tree: Path) -> None:
    out = _install(tree).stdout
    assert "simulated NVIDIA driver 550.90.07: 4 SIMULATED devices, char major 195" in out
    root, dev = tree / "root", tree / "dev"
    doc = json.loads((root / "devices.json").read_text())
    assert doc["personality"] == "nvidia" and doc["major"] == 195
    uvm, caps = doc["majors"]["uvm"], doc["majors"]["caps"]
    used = simulated_driver.used_majors(Path("/proc/devices").read_text())
    assert uvm != caps and uvm not in used and caps not in used
    assert [_node(dev / f"nvidia{i}") for i in range(4)] == [(195, i) for i in range(4)]
    assert _node(dev / "nvidiactl") == (195, 255) and _node(dev / "nvidia-modeset") == (195, 254)
    assert _node(dev / "nvidia-uvm") == (uvm, 0) and _node(dev / "nvidia-uvm-tools") == (uvm, 1)
    inv = driverstate.read_inventory(root)
    migs = inv.devices[0].mig_devices
    assert [m.device_node for m in migs] == ["/dev/nvidia-caps/nvidia-cap13", "/dev/nvidia-caps/nvidia-cap22"]
    assert [_node(dev / "nvidia-caps" / Path(m.device_node).name) for m in migs] == [(caps, 13), (caps, 22)]

    lib_dir = root / "usr/lib/x86_64-linux-gnu"
    assert os.readlink(lib_dir / "libnvidia-ml.so.1") == "libnvidia-ml.so.550.90.07"
    assert (lib_dir / "libnvidia-ml.so.550.90.07").read_bytes() == (
        tree / "native/libnvidia-ml.so.1"
    ).read_bytes()
    assert (root / "usr/bin/nvidia-smi").read_bytes() == (tree / "native/nvidia-smi").read_bytes()
    assert os.access(root / "usr/bin/nvidia-smi", os.X_OK)
    assert "Kernel Module  550.90.07  (SIMULATED" in (root / "proc/driver/nvidia/version").read_text()
    gpus = records(_state(tree), "gpu")
    assert [g["uuid"] for g in gpus] == [d.uuid for d in inv.devices]
    assert all(g["name"] == "NVIDIA A100-SXM4-40GB (simulated)" for g in gpus)
    status = json.loads(_sro(tree, "simulate", "status", "--driver-root", str(root)).stdout)
    assert status["personality"] == "nvidia" and status["driverVersion"] == "550.90.07"

    # `sro simulate fault` and `load` show in NVML's state at once
    _sro(tree, "simulate", "fault", "--device", "1", "--xid", "79", "--driver-root", str(root))
    assert [g["lost"] for g in records(_state(tree), "gpu")] == ["0", "1", "0", "0"]
    _sro(tree, "simulate", "load", "--device", "2", "--util", "70", "--driver-root", str(root))
    assert 67 <= int(records(_state(tree), "reading")[1]["util"]) <= 73  # GPU 1 is lost: no reading
    _sro(tree, "simulate", "fault", "--all", "--clear", "--driver-root", str(root))
    assert [g["lost"] for g in records(_state(tree), "gpu")] == ["0"] * 4

    # another version is an upgrade: new nodes, the new library, the old one gone
    held = os.open(dev / "nvidia0", os.O_PATH)  # a process holding the old node keeps the old one
    try:
        _install(tree, "--driver-version", "555.42.02")
        assert os.fstat(held).st_nlink == 0 and (dev / "nvidia0").lstat().st_ino != os.fstat(held).st_ino
    finally:
        os.close(held)
    assert _node(dev / "nvidia0") == (195, 0)
    assert os.readlink(lib_dir / "libnvidia-ml.so.1") == "libnvidia-ml.so.555.42.02"
    assert not (lib_dir / "libnvidia-ml.so.550.90.07").exists()
    head = records(_state(tree), "simnvml")[0]
    assert (head["driver"], head["cuda"]) == ("555.42.02", "12050")

    # a smaller config takes the nodes it no longer has away
    (tree / "devices.yaml").write_text(
        yaml.safe_dump({**CONFIG, "count": 2, "numaNodes": [0, 0], "nvlinks": []})
    )
    _install(tree, "--driver-version", "555.42.02")
    assert sorted(p.name for p in dev.glob("nvidia[0-9]*")) == ["nvidia0", "nvidia1"]

    # remove takes exactly its own nodes and files
    os.mknod(dev / "nvidia9", 0o666 | stat.S_IFCHR, os.makedev(195, 9))  # not recorded: someone else's
    (lib_dir / "libcuda.so.1").write_text("not ours")
    _sro(tree, "driver", "simulate", "--remove", *_roots(tree))
    assert sorted(p.name for p in dev.iterdir()) == ["nvidia9"]
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    assert left == ["usr", "usr/lib", "usr/lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu/libcuda.so.1"]


def test_hold_rewrites_the_state_and_removes_on_sigterm(tree: Path) -> None:
    cmd = [
        PYTHON, "-m", "sro", "driver", "simulate", "--config", str(tree / "devices.yaml"), *_roots(tree),
        "--proc-modules", str(tree / "modules"), "--native-dir", str(tree / "native"), "--hold",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (tree / "root/.ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.1)
        first = int(records(_state(tree), "simnvml")[0]["generation"])
        time.sleep(2.5)
        text = _state(tree)
        assert int(records(text, "simnvml")[0]["generation"]) >= first + 2
        assert int(records(text, "reading")[0]["energy"]) > 0  # the held model accumulates energy
        _sro(tree, "simulate", "load", "--device", "3", "--util", "90", "--driver-root", str(tree / "root"))
        time.sleep(1.5)
        assert 87 <= int(records(_state(tree), "reading")[3]["util"]) <= 93  # the loop keeps the load
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "SIGTERM: removed" in out
    assert not (tree / "root").exists() and list((tree / "dev").iterdir()) == []


NVML_CLIENT = """
import json, sys
from pathlib import Path
from sro.devices.nvml import NvmlBackend
from sro.devices.telemetry import NvmlTelemetry
backend = NvmlBackend(driver_root=Path(sys.argv[1]))
nvml = backend.nvml
if len(sys.argv) > 2:  # that GPU: what still answers and what is lost
    h = nvml.nvmlDeviceGetHandleByIndex(int(sys.argv[2]))
    try:
        nvml.nvmlDeviceGetMemoryInfo(h)
        lost = False
    except nvml.NVMLError_GpuIsLost:
        lost = True
    print(json.dumps({"uuid": nvml.nvmlDeviceGetUUID(h), "lost": lost}))
    sys.exit(0)
inv = backend.inventory()
readings = NvmlTelemetry(backend.nvml).read(inv, {})
print(json.dumps({
    "driver": inv.driver_version,
    "devices": [
        [d.uuid, d.index, d.minor, d.pci_bus_id, d.product, d.memory_mib, d.compute_capability, d.numa_node,
         dict(d.nvlinks), d.mig_enabled, [[m.uuid, m.index, m.profile, m.memory_mib, m.gi_id, m.ci_id]
                                          for m in d.mig_devices]]
        for d in inv.devices
    ],
    "silent": sorted(readings.silent),
}))
backend.close()
"""


def _nvml(tree: Path, *gpu: str) -> dict[str, object]:
    env = child_env(tree / "dev")  # the state is found from the library's place in the driver root
    r = subprocess.run(
        [PYTHON, "-c", NVML_CLIENT, str(tree / "root"), *gpu],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    result: dict[str, object] = json.loads(r.stdout)
    return result


def test_real_nvml_clients_read_the_simulated_driver(tree: Path, real_build: SimNvmlBuild | None) -> None:
    if real_build is None or real_build.smi is None:
        pytest.skip("the simulated NVML library and nvidia-smi are not built in this checkout")
    pytest.importorskip("pynvml")
    _install(tree)
    root = tree / "root"
    inv = driverstate.read_inventory(root)
    want = [
        [d.uuid, d.index, d.minor, d.pci_bus_id, d.product, d.memory_mib, d.compute_capability, d.numa_node,
         dict(d.nvlinks), d.mig_enabled, [[m.uuid, m.index, m.profile, m.memory_mib, m.gi_id, m.ci_id]
                                          for m in d.mig_devices]]
        for d in inv.devices
    ]  # fmt: skip
    got = _nvml(tree)
    assert got["driver"] == "550.90.07" and got["devices"] == want and got["silent"] == []

    env = child_env(tree / "dev")
    smi = subprocess.run([str(root / "usr/bin/nvidia-smi"), "-L"], capture_output=True, text=True, env=env)
    assert smi.returncode == 0, smi.stdout + smi.stderr
    assert [x.split(" (UUID: ")[1].rstrip(")") for x in smi.stdout.splitlines() if x.startswith("GPU ")] == [
        d.uuid for d in inv.devices
    ]

    # a GPU that has fallen off the bus is lost to NVML (and answers again once cleared)
    assert _nvml(tree, "2") == {"uuid": inv.devices[2].uuid, "lost": False}
    _sro(tree, "simulate", "fault", "--device", "2", "--xid", "79", "--driver-root", str(root))
    assert _nvml(tree, "2") == {"uuid": inv.devices[2].uuid, "lost": True}
    assert _nvml(tree, "1") == {"uuid": inv.devices[1].uuid, "lost": False}
    _sro(tree, "simulate", "fault", "--device", "2", "--clear", "--driver-root", str(root))
    assert _nvml(tree)["silent"] == []

    # a container sees only the GPUs whose nodes it got: NVML renumbers them from 0
    (tree / "dev/nvidia0").unlink()
    devices = _nvml(tree)["devices"]
    assert isinstance(devices, list)
    assert [(d[0], d[1]) for d in devices] == [(d.uuid, i) for i, d in enumerate(inv.devices[1:])]
