"""The NVML backend: pure helpers here; on a machine with an NVIDIA GPU (marked `gpu`), the real
inventory and event loop through nvidia-ml-py."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from sro.devices import nvml


def test_mig_profile_from_name() -> None:
    assert nvml.mig_profile("NVIDIA A100-SXM4-40GB MIG 1g.5gb") == "1g.5gb"
    assert nvml.mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me") == "1g.10gb+me"
    assert nvml.mig_profile("NVIDIA H100") == ""


def test_bus_id_normalized() -> None:
    assert nvml.normalize_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert nvml.normalize_bus_id("0000:3b:00.0") == "0000:3b:00.0"


def test_health_kind_from_event_type() -> None:
    import pynvml

    assert nvml.health_kind(pynvml.nvmlEventTypeXidCriticalError, pynvml) == "xid"
    assert nvml.health_kind(pynvml.nvmlEventTypeDoubleBitEccError, pynvml) == "ecc-double-bit"
    assert nvml.health_kind(pynvml.nvmlEventTypeSingleBitEccError, pynvml) == "ecc-single-bit"
    assert nvml.health_kind(pynvml.nvmlEventTypePState, pynvml) is None


def test_nvml_api_used_exists_in_nvidia_ml_py() -> None:
    import pynvml

    for name in (
        "nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo", "nvmlDeviceGetMinorNumber", "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetName", "nvmlDeviceGetNumaNodeId", "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetNvLinkRemotePciInfo", "nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId",
        "nvmlSystemGetDriverVersion", "nvmlEventSetCreate", "nvmlEventSetFree", "nvmlEventSetWait_v2",
        "nvmlDeviceRegisterEvents", "nvmlDeviceGetSupportedEventTypes", "NVMLError_Timeout", "NVMLError_NotSupported",
        "NVML_FEATURE_ENABLED", "NVML_DEVICE_MIG_ENABLE",
    ):  # fmt: skip
        assert hasattr(pynvml, name), name


@pytest.mark.gpu
def test_real_inventory() -> None:
    backend = nvml.NvmlBackend()
    try:
        inv = backend.inventory()
    finally:
        backend.close()
    assert inv.backend == "nvml" and not inv.simulated and inv.driver_version
    assert inv.devices, "an NVIDIA GPU machine reports at least one GPU"
    for i, d in enumerate(inv.devices):
        assert d.index == i and d.uuid.startswith("GPU-")
        assert d.device_node == f"/dev/nvidia{d.minor}"
        assert d.memory_mib > 1024 and d.product
        assert d.compute_capability.count(".") == 1 and d.compute_capability != "0.0"
        assert len(d.pci_bus_id.split(":")) == 3
        for m in d.mig_devices:
            assert m.uuid.startswith("MIG-") and m.parent_uuid == d.uuid


@pytest.mark.gpu
def test_real_event_loop_starts_and_stops() -> None:
    backend = nvml.NvmlBackend()
    stop = threading.Event()
    seen: list[object] = []
    reader = threading.Thread(target=lambda: seen.extend(backend.events(stop)), daemon=True)
    reader.start()
    time.sleep(2.5)  # at least one NVML wait timeout (1 s) round trip
    stop.set()
    reader.join(timeout=5)
    backend.close()
    assert not reader.is_alive()
    # a healthy idle GPU reports no critical events
    assert [e for e in seen if getattr(e, "kind", "") == "lost"] == []


@pytest.mark.gpu
def test_real_plugin_oneshot_on_gpu() -> None:
    from click.testing import CliRunner

    from sro.node.deviceplugin.commands import device_plugin

    result = CliRunner().invoke(device_plugin, ["--recipe", "nvidia-gpu", "--oneshot"])
    assert result.exit_code == 0, result.output
    assert '"nvidia.com/gpu"' in result.output and '"healthy": true' in result.output


def test_event_device_matches_mig_by_instance_ids() -> None:
    from sro.devices.model import Device, DeviceUUID, Inventory, MigDevice

    parent = DeviceUUID("GPU-p")
    mig = MigDevice(DeviceUUID("MIG-1"), parent, 0, "1g.5gb", 4864, gi_id=3, ci_id=0)
    inv = Inventory(
        "nvml",
        (Device(parent, 0, 0, "/dev/nvidia0", "0000:01:00.0", "A100", 40960, "8.0", mig_devices=(mig,)),),
    )
    backend = object.__new__(nvml.NvmlBackend)
    backend.nvml = SimpleNamespace(nvmlDeviceGetUUID=lambda h: b"GPU-p")
    assert (
        backend._event_device(SimpleNamespace(device=1, gpuInstanceId=3, computeInstanceId=0), inv) == "MIG-1"
    )
    assert (
        backend._event_device(
            SimpleNamespace(device=1, gpuInstanceId=nvml.ALL_INSTANCES, computeInstanceId=0), inv
        )
        == "GPU-p"
    )


def test_preload_nvml_from_a_driver_root(tmp_path: Path) -> None:
    from sro.devices import elf

    lib_dir = tmp_path / "usr/lib64"
    lib_dir.mkdir(parents=True)
    # a stand-in shared object under NVML's soname: the loader must then resolve the name to it.
    # In a child process, so this process never has a fake NVML loaded (the gpu tests use the real one).
    (lib_dir / nvml.NVML_LIBRARY).write_bytes(
        elf.shared_object(nvml.NVML_LIBRARY, {"sro_test_marker": "preloaded"})
    )
    code = (
        "import ctypes, sys; from pathlib import Path; from sro.devices import nvml; "
        "print(nvml.preload_nvml(Path(sys.argv[1]))); "
        "print((ctypes.c_char * 10).in_dll(ctypes.CDLL(nvml.NVML_LIBRARY), 'sro_test_marker').value.decode()); "
        "print(nvml.preload_nvml(Path(sys.argv[1]) / 'empty'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == [str(lib_dir / nvml.NVML_LIBRARY), "preloaded", "None"]
