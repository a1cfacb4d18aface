"""The simulated readings model (pure): pods and loads drive utilisation and memory, noise is bounded
and seeded, temperature and power follow utilisation, faults drive the error counters."""

from __future__ import annotations

import pytest

from sro.api.recipes import SIMULATED_GPU
from sro.devices import fields as f
from sro.devices import simconfig
from sro.devices.driverstate import Fault, Load
from sro.devices.model import DeviceUUID, Inventory
from sro.devices.simreadings import SimState, board, noise, step


def inventory(**doc: object) -> Inventory:
    base: dict[str, object] = {
        "count": 2,
        "defaults": {"product": "SRO Simulated H100", "memoryMiB": 81920, "computeCapability": "9.0"},
    }
    base.update(doc)
    return simconfig.parse(base, SIMULATED_GPU.device_node)


INV = inventory()
A, B = INV.devices[0].uuid, INV.devices[1].uuid


def read(holders: dict[DeviceUUID, int] | None = None, loads: dict[DeviceUUID, Load] | None = None,
         faults: dict[DeviceUUID, Fault] | None = None, state: SimState | None = None, dt: float = 0.0,
         inv: Inventory = INV) -> tuple[SimState, dict[DeviceUUID, dict[str, float]], dict[DeviceUUID, str]]:  # fmt: skip
    s = step(state or SimState(), inv, holders or {}, loads or {}, faults or {}, dt, "seed")
    return s.state, s.readings, s.silent


def test_idle_device_reads_exactly_idle() -> None:
    _, r, silent = read()
    assert silent == {}
    for uuid in (A, B):
        assert r[uuid][f.GPU_UTIL] == 0 and r[uuid][f.FB_USED] == 0 and r[uuid][f.MEM_COPY_UTIL] == 0
        assert r[uuid][f.SM_CLOCK] == 210 and r[uuid][f.MEM_CLOCK] == 2619
        assert 29 <= r[uuid][f.GPU_TEMP] <= 31
        assert r[uuid][f.FB_FREE] + r[uuid][f.FB_RESERVED] == 81920


def test_pods_raise_utilisation_and_memory() -> None:
    _, one, _ = read({A: 1})
    _, two, _ = read({A: 2})
    _, many, _ = read({A: 5})
    assert (
        42 <= one[A][f.GPU_UTIL] <= 48 and 87 <= two[A][f.GPU_UTIL] <= 93 and 97 <= many[A][f.GPU_UTIL] <= 100
    )
    assert abs(one[A][f.FB_USED] - 0.25 * 81920) <= 0.005 * 81920 + 1
    assert abs(two[A][f.FB_USED] - 0.50 * 81920) <= 0.005 * 81920 + 1
    assert many[A][f.FB_USED] <= 0.9 * 81920 + 0.005 * 81920 + 1
    assert one[A][f.SM_CLOCK] == 1980
    assert one[B][f.GPU_UTIL] == 0  # the other device is idle


def test_load_overrides_the_pods() -> None:
    _, r, _ = read({A: 1}, {A: Load(util=80.0, memory_mib=40000)})
    assert 77 <= r[A][f.GPU_UTIL] <= 83
    assert abs(r[A][f.FB_USED] - 40000) <= 0.005 * 81920 + 1
    _, util_only, _ = read({A: 1}, {A: Load(util=10.0, memory_mib=None)})
    assert util_only[A][f.GPU_UTIL] <= 13 and util_only[A][f.FB_USED] > 19000  # memory still from the pod
    _, full, _ = read({}, {A: Load(util=100.0, memory_mib=81920)})
    assert (
        full[A][f.FB_USED] + full[A][f.FB_RESERVED] + full[A][f.FB_FREE] == 81920 and full[A][f.FB_FREE] == 0
    )


def test_noise_is_bounded_and_seeded() -> None:
    values = [noise("s", "GPU-x", t, "util") for t in range(2000)]
    assert all(-1 <= v <= 1 for v in values) and min(values) < -0.9 and max(values) > 0.9
    assert noise("s", "GPU-x", 7, "util") == noise("s", "GPU-x", 7, "util")
    assert noise("s", "GPU-x", 7, "util") != noise("t", "GPU-x", 7, "util")
    state = SimState()
    utils = []
    for _ in range(200):
        state, r, _ = read({A: 1}, state=state)
        utils.append(r[A][f.GPU_UTIL])
    assert min(utils) >= 42 and max(utils) <= 48 and len(set(utils)) > 3
    assert read({A: 1})[1] == read({A: 1})[1]  # same inputs, same readings


def test_temperature_and_power_follow_utilisation() -> None:
    temps, powers = [], []
    for util in (0.0, 50.0, 100.0):
        _, r, _ = read(loads={A: Load(util=util, memory_mib=None)})
        temps.append(r[A][f.GPU_TEMP])
        powers.append(r[A][f.POWER_USAGE])
        assert r[A][f.MEMORY_TEMP] - r[A][f.GPU_TEMP] in (3, 4, 5)
    assert temps[0] < temps[1] < temps[2] and 78 <= temps[2] <= 81
    assert powers[0] < powers[1] < powers[2]
    assert abs(powers[0] - 0.15 * 700) <= 7.01 and abs(powers[2] - 700) <= 7.01
    assert board("SRO Simulated A100 40GB").power_max_w == 400 and board("X").power_max_w == 300


def test_energy_accumulates_power_over_time() -> None:
    state, r1, _ = read({A: 1})
    assert r1[A][f.TOTAL_ENERGY] == 0
    state, r2, _ = read({A: 1}, state=state, dt=10.0)
    assert r2[A][f.TOTAL_ENERGY] == pytest.approx(r2[A][f.POWER_USAGE] * 10_000, abs=6)
    _, r3, _ = read({A: 1}, state=state, dt=10.0)
    assert r3[A][f.TOTAL_ENERGY] > r2[A][f.TOTAL_ENERGY]


def test_faults_count_once_and_xid79_silences_the_device() -> None:
    dbe = {A: Fault(xid=48, since=1.0)}
    state, r, _ = read(faults=dbe)
    assert r[A][f.ECC_DBE_VOL] == 1 and r[A][f.ECC_DBE_AGG] == 1 and r[A][f.UNCORRECTABLE_REMAPPED_ROWS] == 1
    state, r, _ = read(faults=dbe, state=state)
    assert r[A][f.ECC_DBE_VOL] == 1  # the same fault, counted once
    state, r, _ = read(faults={A: Fault(xid=48, since=2.0)}, state=state)
    assert r[A][f.ECC_DBE_VOL] == 2  # injected again
    state, r, _ = read(faults={A: Fault(xid=92, since=3.0), B: Fault(xid=64, since=3.0)}, state=state)
    assert r[A][f.ECC_SBE_VOL] == 1 and r[A][f.ECC_DBE_VOL] == 2
    assert r[B][f.ROW_REMAP_FAILURE] == 1 and r[A][f.ROW_REMAP_FAILURE] == 0
    state, r, _ = read(state=state)
    assert r[B][f.ROW_REMAP_FAILURE] == 0 and r[A][f.ECC_DBE_VOL] == 2  # cleared; counters stay
    state, r, silent = read(faults={B: Fault(xid=79, since=4.0)}, state=state)
    assert B not in r and "fallen off the bus" in silent[B] and A in r
    _, r, silent = read(state=state)
    assert B in r and silent == {}


def test_mig_devices_have_their_own_memory_and_the_gpu_the_mean() -> None:
    inv = inventory(count=1, devices=[{"mig": [{"profile": "3g.40gb"}, {"profile": "3g.40gb"}]}])
    gpu = inv.devices[0]
    m0, m1 = gpu.mig_devices
    _, r, _ = read({m0.uuid: 2}, inv=inv)
    assert r[m0.uuid][f.FB_USED] > 0 and r[m1.uuid][f.FB_USED] == 0
    assert f.GPU_UTIL not in r[m0.uuid] and 0.87 <= r[m0.uuid][f.GR_ENGINE_ACTIVE] <= 0.93
    assert 43 <= r[gpu.uuid][f.GPU_UTIL] <= 47  # half the framebuffer busy at ~90 %
    assert r[gpu.uuid][f.FB_USED] == r[m0.uuid][f.FB_USED]
    _, r, silent = read(faults={m1.uuid: Fault(xid=79, since=1.0)}, inv=inv)
    assert set(silent) == {gpu.uuid} and r == {}  # a MIG device's bus is its GPU's
