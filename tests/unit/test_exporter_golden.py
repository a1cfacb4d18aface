"""The exporter's exposition text against golden files: the simulated backend (8 GPUs, or 4 with MIG),
pods from a fake kubelet (pod-resources v1 on a temp unix socket), a fixed Node, faults and loads.

`SRO_UPDATE_GOLDEN=1 pytest tests/unit/test_exporter_golden.py` rewrites the goldens; review the diff.
Besides the exact text, every golden is parsed by prometheus_client's exposition parser and checked
for dcgm-exporter's label names, and for simulated="true" on every device series.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sro.devices import driverstate
from tests.golden_files import update_goldens
from tests.unit.exporter_support import Clock, FakeKubelet, collector, driver_root

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "exporter"
RESOURCE = "sro.dev/simulated-gpu"
DCGM_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"]
NODE_LABELS = {
    "sro.dev/simulated-gpu.driver": "ready",
    "sro.dev/simulated-gpu.driver-validation": "ready",
    "sro.dev/simulated-gpu.runtime": "ready",
    "sro.dev/simulated-gpu.device-plugin": "ready",
    "sro.dev/simulated-gpu.enabled": "true",  # an opt-in label, not a state: ignored
    "kubernetes.io/hostname": "node-1",
}


@pytest.fixture
def tmp() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="exg", dir="/tmp"))  # unix socket paths max 107 bytes
    yield d
    shutil.rmtree(d, ignore_errors=True)


def check_golden(name: str, text: str) -> None:
    golden = GOLDEN / f"{name}.txt"
    if update_goldens():
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text(), f"exposition differs from {golden} (SRO_UPDATE_GOLDEN=1 rewrites it)"
    families = list(text_string_to_metric_families(text))
    assert families
    for fam in families:
        for s in fam.samples:
            if s.name.startswith("DCGM_") or s.name == "sro_device_healthy":
                assert list(s.labels)[:6] == DCGM_LABELS or list(s.labels)[:5] == DCGM_LABELS[:5]
                assert s.labels["simulated"] == "true" and s.labels["Hostname"] == "node-1"


def test_idle_node(tmp: Path) -> None:
    root = driver_root(tmp)
    kubelet = FakeKubelet(tmp / "kubelet.sock")
    c = collector(root, kubelet.path, NODE_LABELS, {RESOURCE: "8", "cpu": "4", "nvidia.com/gpu": "1"})
    try:
        c.prime(0.2)
        text = c.collect().text.decode()
    finally:
        c.close()
        kubelet.stop()
    check_golden("idle-8gpu", text)
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="0"' in text and "pod=" not in text
    assert (
        'sro_node_devices_allocatable{Hostname="node-1",resource="sro.dev/simulated-gpu",simulated="true"} 8'
        in text
    )
    assert "nvidia.com/gpu" not in text  # another recipe's resource


def test_time_sliced_busy_node(tmp: Path) -> None:
    """Two pods on one time-sliced GPU (one series each), a pod with two whole GPUs, a load, faults."""
    root = driver_root(tmp)
    inv = driverstate.read_inventory(root)
    u = [d.uuid for d in inv.devices]
    pods = [
        ("team-a", "train-0", "main", RESOURCE, [u[0], u[1]]),
        ("team-b", "infer-0", "server", f"{RESOURCE}.shared", [f"{u[7]}::1"]),
        ("team-c", "infer-1", "server", f"{RESOURCE}.shared", [f"{u[7]}::2"]),
        ("team-c", "other", "c", "example.com/fpga", ["0"]),  # another vendor's "0": not GPU 0
    ]
    kubelet = FakeKubelet(tmp / "kubelet.sock", pods)
    driverstate.set_load(root, u[3], 80.0, 40000)
    driverstate.set_fault(root, u[5], 48)
    driverstate.set_fault(root, u[6], 79)
    clock = Clock()
    alloc = {RESOURCE: "5", f"{RESOURCE}.shared": "2"}
    c = collector(root, kubelet.path, NODE_LABELS, alloc, clock=clock)
    try:
        c.prime(0.2)
        c.collect()
        clock.now += 30.0
        text = c.collect().text.decode()
    finally:
        c.close()
        kubelet.stop()
    check_golden("timesliced-busy", text)
    util = {
        (s.labels["gpu"], s.labels.get("pod", "")): s.value
        for fam in text_string_to_metric_families(text)
        if fam.name == "DCGM_FI_DEV_GPU_UTIL"
        for s in fam.samples
    }
    assert 42 <= util[("0", "train-0")] <= 48 and 42 <= util[("1", "train-0")] <= 48
    assert util[("7", "infer-0")] == util[("7", "infer-1")] >= 87  # one device, two pods, two series
    assert 77 <= util[("3", "")] <= 83 and util[("2", "")] == 0
    assert ("6", "") not in util  # fallen off the bus: no readings
    assert 'vgpu="1"' in text and 'vgpu="2"' in text
    assert (
        'sro_node_devices_allocated{Hostname="node-1",resource="sro.dev/simulated-gpu.shared",simulated="true"} 2'
        in text
    )


def test_mig_devices(tmp: Path) -> None:
    root = driver_root(tmp, "4gpu-mig.yaml")
    inv = driverstate.read_inventory(root)
    mig = inv.devices[1].mig_devices[0]
    pods = [
        ("ml", "job", "c", f"{RESOURCE}-mig-3g.20gb", [mig.uuid]),
        ("ml", "whole", "c", RESOURCE, [inv.devices[3].uuid]),  # GPUs 2 and 3 have no MIG
    ]
    kubelet = FakeKubelet(tmp / "kubelet.sock", pods)
    c = collector(root, kubelet.path, {}, {})
    try:
        c.prime(0.2)
        text = c.collect().text.decode()
    finally:
        c.close()
        kubelet.stop()
    check_golden("mig-4gpu", text)
    assert f'GPU_I_PROFILE="3g.20gb",GPU_I_ID="{mig.gi_id}",Hostname="node-1"' in text
    mig_lines = [x for x in text.splitlines() if 'pod="job"' in x]
    assert mig_lines and all("GPU_I_PROFILE" in x for x in mig_lines)  # attributed to the MIG device
    assert not [x for x in mig_lines if x.startswith("DCGM_FI_DEV_GPU_UTIL")]  # NVML has none for MIG
