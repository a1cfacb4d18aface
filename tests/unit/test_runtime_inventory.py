"""Plans from inventories (pure), and driver-file discovery on a temp tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.node.runtime import driverfiles
from sro.node.runtime.activation import Request
from sro.node.runtime.inventory import (
    DeviceNode,
    DriverInventory,
    FileMount,
    InjectionPlan,
    UnknownDeviceError,
    plan,
    plan_all,
)

GPU0 = DeviceNode("/dev/sro-simgpu0", "/h/dev/sro-simgpu0", 120, 0, device_id="0")
GPU1 = DeviceNode("/dev/sro-simgpu1", "/h/dev/sro-simgpu1", 120, 1, device_id="1")
CTL = DeviceNode("/dev/sro-simgpuctl", "/h/dev/sro-simgpuctl", 120, 255)
LIB = FileMount("/d/lib/libsimgpu.so.1", "/lib/libsimgpu.so.1")
MLLIB = FileMount("/d/lib/libsimgpu-ml.so.1", "/lib/libsimgpu-ml.so.1")
SMI = FileMount("/d/bin/simgpu-smi", "/bin/simgpu-smi")
INV = DriverInventory(
    recipe="simulated-gpu",
    devices=(GPU0, GPU1),
    control_nodes=(CTL,),
    libraries={"compute": (LIB,), "utility": (MLLIB,)},
    binaries={"utility": (SMI,)},
    aliases={"GPU-1111": "1"},
)


def _request(devices: tuple[str, ...], caps: tuple[str, ...] = ("utility", "compute")) -> Request:
    return Request(SIMULATED_GPU, devices, caps, "test")


def test_plan_for_one_device() -> None:
    p = plan(_request(("1",)), INV)
    assert p.device_nodes == (GPU1, CTL)
    assert p.mounts == (MLLIB, LIB, SMI)
    assert p.ld_folders == ("/lib",)
    assert p.cgroup_rules == ("c 120:1 rwm", "c 120:255 rwm")


def test_all_none_aliases_and_capabilities() -> None:
    assert plan(_request(("all",)), INV).device_nodes == (GPU0, GPU1, CTL)
    assert plan(_request(()), INV).device_nodes == (CTL,)
    assert plan(_request(("GPU-1111",)), INV).device_nodes == (GPU1, CTL)
    assert plan(_request(("0",), ("compute",)), INV).mounts == (LIB,)


def test_unknown_device() -> None:
    with pytest.raises(
        UnknownDeviceError, match=r"unknown device id '9' for simulated-gpu \(this node has: 0, 1\)"
    ):
        plan(_request(("9",)), INV)
    with pytest.raises(UnknownDeviceError, match="no driver inventory"):
        plan_all([_request(("0",))], {})


def test_merge_dedupes() -> None:
    a = plan(_request(("0",)), INV)
    b = plan(_request(("0", "1")), INV)
    m = a.merge(b)
    assert m.device_nodes == (GPU0, CTL, GPU1)
    assert len(m.mounts) == 3
    assert InjectionPlan().empty and not m.empty


def test_container_path() -> None:
    assert driverfiles.container_path("/run/drv", "/run/drv/usr/lib/libx.so.1") == "/usr/lib/libx.so.1"
    assert driverfiles.container_path("/", "/usr/bin/nvidia-smi") == "/usr/bin/nvidia-smi"
    with pytest.raises(ValueError, match="not under the driver root"):
        driverfiles.container_path("/run/drv", "/etc/passwd")
    assert driverfiles.dev_path("/tmp/d", "/dev/nvidia0") == "/tmp/d/nvidia0"
    with pytest.raises(ValueError, match="not under /dev"):
        driverfiles.dev_path("/dev", "/etc/x")


def test_discover_nvidia_layout(tmp_path: Path) -> None:
    """Symlinked sonames collapse to the real file; binaries, dirs and firmware are found."""
    lib = tmp_path / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libcuda.so.550.54").write_text("elf")
    (lib / "libcuda.so.1").symlink_to("libcuda.so.550.54")
    (lib / "libcuda.so").symlink_to("libcuda.so.1")
    (lib / "libnvidia-ml.so.550.54").write_text("elf")
    (lib / "unrelated.so").write_text("elf")
    (tmp_path / "usr/bin").mkdir()
    (tmp_path / "usr/bin/nvidia-smi").write_text("bin")
    (tmp_path / "etc/vulkan/icd.d").mkdir(parents=True)
    fw = tmp_path / "lib/firmware/nvidia/550.54"
    fw.mkdir(parents=True)
    (fw / "gsp_ga10x.bin").write_text("fw")
    dev = tmp_path / "dev"
    dev.mkdir()
    inv = driverfiles.discover(NVIDIA_GPU, str(tmp_path), str(dev))
    assert inv.devices == () and inv.control_nodes == ()  # no char devices without root
    assert [m.container_path for m in inv.libraries["compute"]] == [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54"
    ]
    assert [m.container_path for m in inv.libraries["utility"]] == [
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54"
    ]
    assert [m.container_path for m in inv.binaries["utility"]] == ["/usr/bin/nvidia-smi"]
    assert [(m.container_path, m.kind) for m in inv.directories["graphics"]] == [("/etc/vulkan/icd.d", "dir")]
    assert [m.container_path for m in inv.firmware] == ["/lib/firmware/nvidia/550.54/gsp_ga10x.bin"]


@pytest.mark.root
def test_discover_device_nodes(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name, minor in (("sro-simgpu10", 10), ("sro-simgpu2", 2), ("sro-simgpuctl", 255)):
        os.mknod(dev / name, 0o600 | 0o020000, os.makedev(120, minor))
    (dev / "sro-simgpu3").write_text("not a device")
    (dev / "sro-simgpuX").write_text("")
    (tmp_path / "drv").mkdir()
    (tmp_path / "drv" / "devices.json").write_text('{"devices": [{"uuid": "GPU-a", "index": 2}]}')
    inv = driverfiles.discover(SIMULATED_GPU, str(tmp_path / "drv"), str(dev))
    assert [(d.device_id, d.path, d.minor, d.file_mode) for d in inv.devices] == [
        ("2", "/dev/sro-simgpu2", 2, 0o600),
        ("10", "/dev/sro-simgpu10", 10, 0o600),
    ]
    assert [c.path for c in inv.control_nodes] == ["/dev/sro-simgpuctl"]
    assert inv.device("GPU-a") == inv.devices[0]
