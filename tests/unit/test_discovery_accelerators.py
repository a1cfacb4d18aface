"""GFD-compatible accelerator labels from a device inventory (pure), golden for an 8x A100 node."""

from __future__ import annotations

from pathlib import Path

import pytest

from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.devices.model import Device, DeviceUUID, MigDevice
from sro.host.root import HostRoot
from sro.node.discovery.accelerators import family, gfd_labels, sanitise
from sro.node.discovery.commands import discover
from sro.node.discovery.config import Config
from tests.golden_files import update_goldens

GOLDEN = Path(__file__).resolve().parent.parent / "hosts" / "nvidia-8gpu" / "expected-gfd-labels.txt"


def a100(i: int, product: str = "NVIDIA A100-SXM4-40GB") -> Device:
    return Device(
        uuid=DeviceUUID(f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd"), index=i, minor=i,
        device_node=f"/dev/nvidia{i}", pci_bus_id=f"0000:{0x07 + i:02x}:00.0", product=product,
        memory_mib=40960, compute_capability="8.0", numa_node=i // 4,
    )  # fmt: skip


def test_eight_a100s_golden() -> None:
    labels = gfd_labels(
        [a100(i) for i in range(8)], NVIDIA_GPU, driver_version="535.104.05", machine="DGXA100"
    )
    text = "".join(f"{k}={v}\n" for k, v in sorted(labels.items()))
    if update_goldens():
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert labels["nvidia.com/gpu.count"] == "8" and labels["nvidia.com/gpu.memory"] == "40960"
    assert labels["nvidia.com/cuda.driver-version.revision"] == "05"
    assert labels["nvidia.com/gpu.family"] == "ampere" and labels["nvidia.com/mig.capable"] == "true"
    assert not any("simulated" in k for k in labels)


def test_simulated_devices_say_so_under_their_own_prefix() -> None:
    dev = Device(DeviceUUID("SIM-1"), 0, 0, "/dev/sro-simgpu0", "0000:00:10.0", "SIM GPU 24GB", 24576, "8.6",
                 simulated=True, mig_enabled=True,
                 mig_devices=(MigDevice(DeviceUUID("MIG-1"), DeviceUUID("SIM-1"), 0, "1g.6gb", 6144, 1, 0),))  # fmt: skip
    labels = gfd_labels([dev], SIMULATED_GPU, driver_version="1.0.0")
    assert labels["sro.dev/simulated-gpu.simulated"] == "true"
    assert labels["sro.dev/simulated-gpu.product"] == "SIM-GPU-24GB"
    assert labels["sro.dev/simulated-gpu.driver-version.full"] == "1.0.0"
    assert labels["sro.dev/simulated-gpu.mig.capable"] == "true"
    assert all(k.startswith("sro.dev/simulated-gpu.") for k in labels)


def test_family_and_sanitise() -> None:
    assert [family(*cc) for cc in ((7, 0), (7, 5), (8, 6), (8, 9), (9, 0), (6, 1), (4, 0))] == [
        "volta", "turing", "ampere", "ada-lovelace", "hopper", "pascal", "undefined"]  # fmt: skip
    assert sanitise(" Tesla V100-SXM2-16GB (rev a1) ") == "Tesla-V100-SXM2-16GB-rev-a1"
    assert gfd_labels([], NVIDIA_GPU) == {}
    odd = gfd_labels([a100(0, product="T4")], NVIDIA_GPU, driver_version="garbage")
    assert "nvidia.com/cuda.driver-version.full" not in odd and odd["nvidia.com/mig.capable"] == "false"


@pytest.mark.gpu
def test_real_nvidia_gpus_get_gfd_labels() -> None:
    """On a machine with an NVIDIA GPU and driver: NVML's inventory becomes nvidia.com labels."""
    import subprocess

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout.strip().splitlines()  # fmt: skip
    labeling = discover(HostRoot.at("/"), Config())
    labels = labeling.labels
    assert not [p for p in labeling.problems if "nvidiactl" in p.path], labeling.problems
    assert labels["nvidia.com/gpu.count"] == str(len(smi))
    name, memory = (v.strip() for v in smi[0].split(","))
    assert labels["nvidia.com/gpu.product"] == sanitise(name)
    assert labels["nvidia.com/gpu.memory"] == memory
    assert int(labels["nvidia.com/gpu.compute.major"]) >= 3
    assert labels["nvidia.com/cuda.driver-version.full"].count(".") >= 1
    assert not any("simulated" in k for k in labels if k.startswith("nvidia.com/"))
