"""Pod attribution: announced ids (UUID, index, MIG, time-sliced replicas) mapped to devices, pure and
through a fake kubelet serving pod-resources v1 `List` on a temp unix socket."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sro.devices import driverstate
from sro.host import podresources
from sro.host.podresources import Assignment
from sro.node.exporter.attribution import PodRef, attribute, resolve
from tests.unit.exporter_support import FakeKubelet, collector, driver_root

RESOURCE = "sro.dev/simulated-gpu"


@pytest.fixture
def tmp() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="exa", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_resolve_every_id_form(tmp: Path) -> None:
    inv = driverstate.read_inventory(driver_root(tmp, "4gpu-mig.yaml"))
    gpu0, gpu2 = inv.devices[0], inv.devices[2]
    mig = gpu0.mig_devices[3]
    assert resolve(gpu2.uuid, inv) == (gpu2.uuid, "")
    assert resolve(f"{gpu2.uuid}::3", inv) == (gpu2.uuid, "3")
    assert resolve("2", inv) == (gpu2.uuid, "")
    assert resolve(mig.uuid, inv) == (mig.uuid, "")
    assert resolve("0:3", inv) == (mig.uuid, "")
    assert resolve(f"{mig.uuid}::2", inv) == (mig.uuid, "2")
    assert resolve("GPU-unknown", inv) is None and resolve("9", inv) is None


def test_attribute_time_sliced_pods_and_other_vendors(tmp: Path) -> None:
    inv = driverstate.read_inventory(driver_root(tmp))
    u = [d.uuid for d in inv.devices]
    shared = f"{RESOURCE}.shared"
    a = attribute(
        [
            Assignment("p1", "ns", "c", shared, f"{u[3]}::1"),
            Assignment("p2", "ns", "c", shared, f"{u[3]}::2"),
            Assignment("p2", "ns", "sidecar", RESOURCE, "5"),  # deviceIdStrategy: index
            Assignment("f", "ns", "c", "example.com/fpga", "5"),  # not ours, not our device
            Assignment("x", "ns", "c", "example.com/fpga", u[6]),  # our UUID under another name
            Assignment("y", "ns", "c", RESOURCE, "GPU-gone"),
        ],
        inv,
        "sro.dev",
    )
    assert a.by_unit[u[3]] == (PodRef("ns", "p1", "c", "1"), PodRef("ns", "p2", "c", "2"))
    assert a.by_unit[u[5]] == (PodRef("ns", "p2", "sidecar"),)
    assert a.by_unit[u[6]] == (PodRef("ns", "x", "c"),)
    assert a.allocated == {RESOURCE: 2, shared: 2}
    assert a.unknown == (f"{RESOURCE}=GPU-gone (ns/y)",)
    assert a.holders() == {u[3]: 2, u[5]: 1, u[6]: 1}
    # one container holding two replicas of one device: two series (vgpu 1 and 2), one holder
    b = attribute(
        [Assignment("p", "ns", "c", shared, f"{u[0]}::1"), Assignment("p", "ns", "c", shared, f"{u[0]}::2")],
        inv,
        "sro.dev",
    )
    assert len(b.by_unit[u[0]]) == 2 and b.holders() == {u[0]: 1}


def test_fake_kubelet_two_pods_on_one_time_sliced_device(tmp: Path) -> None:
    root = driver_root(tmp)
    u = [d.uuid for d in driverstate.read_inventory(root).devices]
    pods = [
        ("default", "sharer-a", "app", f"{RESOURCE}.shared", [f"{u[7]}::1"]),
        ("science", "sharer-b", "app", f"{RESOURCE}.shared", [f"{u[7]}::2"]),
    ]
    kubelet = FakeKubelet(tmp / "kubelet.sock", pods)
    try:
        got = podresources.list_assignments(kubelet.path)
        assert got == [
            podresources.Assignment("sharer-a", "default", "app", f"{RESOURCE}.shared", f"{u[7]}::1"),
            podresources.Assignment("sharer-b", "science", "app", f"{RESOURCE}.shared", f"{u[7]}::2"),
        ]
        c = collector(root, kubelet.path)
        try:
            text = c.collect().text.decode()
        finally:
            c.close()
    finally:
        kubelet.stop()
    util = [
        line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL") and 'gpu="7"' in line
    ]
    assert len(util) == 2
    assert 'namespace="default",pod="sharer-a"' in util[0] and 'vgpu="1"' in util[0]
    assert 'namespace="science",pod="sharer-b"' in util[1] and 'vgpu="2"' in util[1]
    assert util[0].rsplit(" ", 1)[1] == util[1].rsplit(" ", 1)[1]  # the same device's one reading
    assert int(util[0].rsplit(" ", 1)[1]) >= 87  # two pods hold it
    healthy = [
        line for line in text.splitlines() if line.startswith("sro_device_healthy") and 'gpu="7"' in line
    ]
    assert len(healthy) == 1 and "pod=" not in healthy[0]  # health is per device


def test_a_large_answer_is_read(tmp: Path) -> None:
    """100 pods, several containers each: the whole answer arrives (one call, no paging)."""
    root = driver_root(tmp)
    u = [d.uuid for d in driverstate.read_inventory(root).devices]
    pods = [
        ("ns", f"pod-{i:03d}", f"c{k}", f"{RESOURCE}.shared", [f"{u[i % 8]}::{i // 8 + 1}"])
        for i in range(100)
        for k in range(3)
    ]
    kubelet = FakeKubelet(tmp / "kubelet.sock", pods)
    try:
        assert len(podresources.list_assignments(kubelet.path)) == 300
    finally:
        kubelet.stop()
