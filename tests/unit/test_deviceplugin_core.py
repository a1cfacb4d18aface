"""Health as announced: a GPU's fault covers its replicas and MIG devices; a MIG fault only itself;
the board wakes waiting streams on every change and only then."""

from __future__ import annotations

import threading

from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.devices import simconfig
from sro.devices.health import HealthTracker
from sro.devices.model import DeviceUUID, HealthEvent
from sro.node.deviceplugin.announcing import plan
from sro.node.deviceplugin.config import parse_config
from sro.node.deviceplugin.core import HealthBoard, ResourceCore


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_gpu_fault_covers_its_replicas_and_recovers() -> None:
    inv = simconfig.parse({"count": 2})
    cfg = parse_config(
        {"sharing": {"timeSlicing": {"resources": [{"name": SIMULATED_GPU.resource, "replicas": 3}]}}},
        SIMULATED_GPU,
    )
    (p,) = plan(inv, cfg)
    clock = Clock()
    board = HealthBoard(HealthTracker(recover_after=5), clock)
    core = ResourceCore(p, SIMULATED_GPU, cfg, board)
    assert board.apply(HealthEvent("xid", inv.devices[0].uuid, 0.0, xid=79, sticky=True))
    states = {d.id: d.healthy for d in core.devices()}
    assert [v for k, v in states.items() if k.startswith(inv.devices[0].uuid)] == [False] * 3
    assert [v for k, v in states.items() if k.startswith(inv.devices[1].uuid)] == [True] * 3
    board.apply(HealthEvent("cleared", inv.devices[0].uuid, 1.0))
    clock.now = 5.9
    board.tick()
    assert not all(d.healthy for d in core.devices())
    clock.now = 6.0
    assert board.tick() is None
    assert all(d.healthy for d in core.devices())


def test_mig_fault_only_that_mig_device_parent_fault_all() -> None:
    inv = simconfig.parse({"count": 1, "devices": [{"mig": [{"profile": "1g.5gb"}, {"profile": "1g.5gb"}]}]})
    cfg = parse_config({"flags": {"migStrategy": "single"}}, NVIDIA_GPU)
    (p,) = plan(inv, cfg)
    board = HealthBoard(HealthTracker(recover_after=None), Clock())
    core = ResourceCore(p, NVIDIA_GPU, cfg, board)
    mig0 = inv.devices[0].mig_devices[0].uuid
    board.apply(HealthEvent("xid", mig0, 0.0, xid=94))
    assert [d.healthy for d in core.devices()] == [False, True]
    board.apply(HealthEvent("xid", inv.devices[0].uuid, 0.0, xid=79))
    assert [d.healthy for d in core.devices()] == [False, False]


def test_board_wakes_waiters_on_change_only() -> None:
    board = HealthBoard(HealthTracker(), Clock())
    v0 = board.version
    woke: list[int] = []
    t = threading.Thread(target=lambda: woke.append(board.wait_change(v0, 10)))
    t.start()
    assert not board.apply(HealthEvent("xid", DeviceUUID("GPU-a"), 0.0, xid=13))  # ignored: no change
    assert board.apply(HealthEvent("xid", DeviceUUID("GPU-a"), 0.0, xid=79))
    t.join(timeout=5)
    assert woke == [v0 + 1]
    assert board.wait_change(v0, 0.01) == v0 + 1  # a change already seen returns at once


def test_preferred_skips_unhealthy_even_if_offered() -> None:
    inv = simconfig.parse({"count": 3})
    cfg = parse_config(None, SIMULATED_GPU)
    (p,) = plan(inv, cfg)
    board = HealthBoard(HealthTracker(recover_after=None), Clock())
    core = ResourceCore(p, SIMULATED_GPU, cfg, board)
    board.apply(HealthEvent("xid", inv.devices[0].uuid, 0.0, xid=79))
    assert core.preferred([d.uuid for d in inv.devices], [], 2) == [inv.devices[1].uuid, inv.devices[2].uuid]
