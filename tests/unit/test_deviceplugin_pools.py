"""The device plugin for a custom recipe: resource pools by device attribute (each its own kubelet
registration, an empty one not registered), companion nodes in Allocate's DeviceSpecs, and CDI
names of the recipe's cdiKind; a fault on a pooled device reaches that pool only."""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from sro.api.recipes import Recipe, recipe_from_dict
from sro.devices import driverstate, simclass
from sro.devices.health import HealthTracker
from sro.devices.model import HealthEvent, Inventory
from sro.devices.simulated import SimulatedBackend
from sro.node.deviceplugin import api_pb2, api_pb2_grpc
from sro.node.deviceplugin.allocation import DeviceNodeSpec, annotation_key
from sro.node.deviceplugin.announcing import plan, pool_of
from sro.node.deviceplugin.config import parse_config
from sro.node.deviceplugin.core import HealthBoard, ResourceCore
from sro.node.deviceplugin.lifecycle import Plugin
from sro.node.deviceplugin.server import socket_name
from tests.unit.test_deviceplugin_grpc import FakeKubelet, wait_until
from tests.unit.test_devices_simclass import FPGA, FPGA_CLASS, NIC, NIC_CLASS

POOL_A, POOL_B, BASE = "example.com/vf-pool-a", "example.com/vf-pool-b", "example.com/smartnic-vf"


def nic_inventory(doc: dict[str, Any] = NIC_CLASS, recipe: dict[str, Any] = NIC) -> Inventory:
    return simclass.parse(doc, recipe_from_dict(recipe)).inventory


def resources(inv: Inventory, recipe: Recipe, doc: object = None) -> dict[str, list[int]]:
    cfg = parse_config(doc, recipe)
    return {p.resource: [int(a.unit.index) for a in p.devices] for p in plan(inv, cfg)}


def test_pool_of_needs_every_selector_key_equal() -> None:
    d = nic_inventory().devices[5]  # pf 1, vf 1
    assert pool_of(d, {"a": {"pf": "0"}, "b": {"pf": "1"}}) == "b"
    assert pool_of(d, {"b": {"pf": "1", "vf": "2"}}) is None
    assert pool_of(d, {"b": {"pf": "1", "vendor": "example"}}) == "b"
    assert pool_of(d, {"b": {"missing": "1"}}) is None


def test_pools_split_the_devices_and_an_empty_base_is_not_registered() -> None:
    recipe = recipe_from_dict(NIC)
    assert resources(nic_inventory(), recipe) == {POOL_A: [0, 1, 2, 3], POOL_B: [4, 5, 6, 7]}


def test_a_device_in_no_pool_stays_under_the_base_and_an_empty_pool_goes() -> None:
    devices = [{"index": i, "attributes": {"pf": "0" if i < 2 else "7"}} for i in range(4)]
    inv = nic_inventory({**NIC_CLASS, "count": 4, "devices": devices})
    assert resources(inv, recipe_from_dict(NIC)) == {BASE: [2, 3], POOL_A: [0, 1]}


def test_no_devices_at_all_still_serves_the_base() -> None:
    inv = Inventory(backend="simulated", devices=())
    assert resources(inv, recipe_from_dict(NIC)) == {BASE: []}


def test_time_slicing_a_pool() -> None:
    doc = {"sharing": {"timeSlicing": {"resources": [{"name": POOL_B, "replicas": 2}]}}}
    cfg = parse_config(doc, recipe_from_dict(NIC))
    plans = {p.resource: p for p in plan(nic_inventory(), cfg)}
    assert sorted(plans) == [POOL_A, POOL_B]
    assert plans[POOL_B].replicas == 2 and len(plans[POOL_B].devices) == 8


def test_allocate_gives_companions_and_names_the_cdi_kind() -> None:
    recipe = recipe_from_dict({**FPGA, "cdiKind": "example.com/fpga-card"})
    inv = simclass.parse(FPGA_CLASS, recipe).inventory
    doc = {"flags": {"deviceListStrategy": ["envvar", "cdi-annotations", "cdi-cri"]}}
    cfg = parse_config(doc, recipe)
    (p,) = plan(inv, cfg)
    core = ResourceCore(p, recipe, cfg, HealthBoard(HealthTracker()))
    (a,) = core.allocate([[inv.devices[1].uuid]])
    assert a.devices == (
        DeviceNodeSpec("/dev/xclmgmt1", "/dev/xclmgmt1", "rw"),
        DeviceNodeSpec("/dev/dri/renderD129", "/dev/dri/renderD129", "rw"),
    )
    assert a.envs == {"EXAMPLE_FPGA_VISIBLE_DEVICES": inv.devices[1].uuid}
    assert a.annotations == {annotation_key("cdi.k8s.io/", "example.com/fpga"): "example.com/fpga-card=1"}
    assert a.cdi_devices == ("example.com/fpga-card=1",)


def test_a_fault_on_a_vf_is_seen_by_its_pool_only() -> None:
    recipe = recipe_from_dict(NIC)
    inv = nic_inventory()
    cfg = parse_config(None, recipe)
    board = HealthBoard(HealthTracker(recover_after=None))
    cores = {p.resource: ResourceCore(p, recipe, cfg, board) for p in plan(inv, cfg)}
    board.apply(HealthEvent("xid", inv.devices[5].uuid, 1.0, xid=79, sticky=True))
    assert [d.healthy for d in cores[POOL_A].devices()] == [True] * 4
    assert [d.healthy for d in cores[POOL_B].devices()] == [True, False, True, True]
    (a,) = cores[POOL_B].allocate([[inv.devices[4].uuid]])
    assert [d.host_path for d in a.devices] == ["/dev/sro-vf4", "/dev/sro-nicctl"]


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """Unix socket paths are limited to 107 bytes (pytest's own temp dirs are too long)."""
    d = Path(tempfile.mkdtemp(prefix="dpp", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_each_pool_registers_with_the_kubelet(short_tmp: Path) -> None:
    recipe = recipe_from_dict(NIC)
    inv = nic_inventory()
    root = short_tmp / "driver"
    driverstate.write_atomic(root / "devices.json", json.dumps(driverstate.inventory_to_doc(inv, 120, 255)))
    plugin_dir = short_tmp / "plugins"
    plugin_dir.mkdir()
    kubelet = FakeKubelet(plugin_dir)
    plugin = Plugin(recipe, SimulatedBackend(root, 0.02), plugin_dir, poll=0.05, liveness_every=0.2)
    stop = threading.Event()
    thread = threading.Thread(target=plugin.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(kubelet.requests) == 2)
        assert sorted(r.resource_name for r in kubelet.requests) == [POOL_A, POOL_B]
        wait_until(plugin.ready)
        with grpc.insecure_channel(f"unix://{plugin_dir / socket_name(POOL_B)}") as channel:
            stub = api_pb2_grpc.DevicePluginStub(channel)
            first = next(stub.ListAndWatch(api_pb2.Empty(), timeout=10))
            assert [d.ID for d in first.devices] == [d.uuid for d in inv.devices[4:]]
            resp = stub.Allocate(
                api_pb2.AllocateRequest(
                    container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[inv.devices[6].uuid])]
                ),
                timeout=5,
            )
            (c,) = resp.container_responses
            assert [d.host_path for d in c.devices] == ["/dev/sro-vf6", "/dev/sro-nicctl"]
            assert dict(c.envs) == {"EXAMPLE_NIC_VISIBLE_DEVICES": inv.devices[6].uuid}
            # a VF of the other pool is not this resource's to give
            with pytest.raises(grpc.RpcError) as e:
                stub.Allocate(
                    api_pb2.AllocateRequest(
                        container_requests=[
                            api_pb2.ContainerAllocateRequest(devices_ids=[inv.devices[0].uuid])
                        ]
                    ),
                    timeout=5,
                )
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # the fault CLI's way: the VF goes out of its pool's healthy list
        driverstate.set_fault(root, inv.devices[4].uuid, 79)
        units = {a.id: a.unit for s in plugin.slots for a in s.server.core.plan.devices}
        wait_until(lambda: not plugin.board.healthy(units[inv.devices[4].uuid]))
    finally:
        stop.set()
        thread.join(timeout=5)
        kubelet.stop()
