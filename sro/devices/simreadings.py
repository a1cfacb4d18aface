"""Readings of simulated devices (pure): the model the exporter reports for the simulated driver.

Why a stated model: people test dashboards, alerts, autoscaling and reports of a GPU cluster with
no GPU, so the numbers must react to what happens on the cluster the way a GPU's would, and be
reproducible (golden files, tests). Every reading is a function of the inputs below and a seeded
noise; nothing is read from the clock or the machine here (`sro.devices.telemetry` reads the fault
and load files and calls `step` once per collection; `Stepper`, which its readers share, only calls
the clock it is given).

Inputs, per device at collection number `tick` (dt seconds after the previous one):
- `holders`: how many containers hold the device (whole, a time-sliced replica of it, or one of its
  MIG devices, keyed by that MIG device's UUID) — from the kubelet's pod-resources API;
- `loads`: what `sro simulate load --device N --util U --memory M` set (either part may be unset);
- `faults`: the active faults of `sro simulate fault`.

The model:
- target utilisation (%): the load's `--util` when set, else 45 per holding container, at most 100
  (one pod 45, two pods time-slicing the device 90, three or more 100); an idle device 0.
- target framebuffer used (MiB): the load's `--memory` when set, else 25 % of the framebuffer per
  holding container, at most 90 %; an idle device 0.
- noise: a busy device's utilisation moves by at most ±3 points and its memory by at most ±0.5 %
  of the framebuffer; temperature by ±1 °C and power by ±1 % of the board's maximum, always. The
  noise is deterministic: a hash of (seed, device UUID, tick, reading), so the same inputs give the
  same readings in any process. An idle device reads exactly 0 % and 0 MiB.
- `DCGM_FI_DEV_GPU_UTIL` = clamp(target + noise, 0, 100), whole percent; `DCGM_FI_DEV_MEM_COPY_UTIL`
  = 60 % of it. `DCGM_FI_DEV_FB_RESERVED` = 0.6 % of the framebuffer; `FB_USED` = clamp(target +
  noise, 0, framebuffer - reserved); `FB_FREE` = framebuffer - reserved - used.
- temperature follows utilisation: `GPU_TEMP` = 30 + 0.5 × util (30 °C idle, 80 °C flat out);
  `MEMORY_TEMP` = GPU_TEMP + 4.
- power follows utilisation: idle at 15 % of the board's maximum, linear to the maximum at 100 %
  (700 W for products named H100, 400 W for A100, 300 W otherwise); `TOTAL_ENERGY_CONSUMPTION`
  (mJ) adds power × dt.
- clocks: `SM_CLOCK` is the product's boost clock while util > 0 (H100 1980, A100 1410, others
  1500 MHz) and 210 MHz idle; `MEM_CLOCK` is the product's (2619, 1593, 1215 MHz).
- profiling ratios: `GR_ENGINE_ACTIVE` = util / 100, `PIPE_TENSOR_ACTIVE` = half of it,
  `DRAM_ACTIVE` = MEM_COPY_UTIL / 100. Encoder, decoder and PCIe replays stay 0.
- PCIe traffic follows memory-copy utilisation (data a job moves in and out of its memory crosses
  PCIe): received (host to GPU) = MEM_COPY_UTIL / 100 × 25 % of the link's bandwidth per direction,
  transmitted = half of that; the link is x16 of generation 5 for compute capability 9.x and
  later, 4 for 8.x, 3 before (985, 1969, 3938 MB/s per lane). Given in whole KB/s (NVML's unit,
  `PCIE_TX_THROUGHPUT`/`PCIE_RX_THROUGHPUT`) and in bytes/s (`DCGM_FI_PROF_PCIE_TX_BYTES`/`_RX_BYTES`
  = KB/s × 1024). An idle device moves nothing.
- NVLink traffic follows utilisation on GPUs with NVLink peers: each direction of a link to a peer
  that answers carries its sender's util / 100 × 40 % of 25 GB/s (NVLink 3 and 4 links), so a GPU
  transmits by its own utilisation and receives by its peers' (what one sends, the other gets).
  `NVLINK_TX_KIB`/`NVLINK_RX_KIB` count the KiB over all links since the model started (rate × dt);
  `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL` is the rate received plus transmitted, in MB/s. A GPU with no
  peers, or with idle ones, reads what it sends.
- `DCGM_FI_DEV_VGPU_LICENSE_STATUS` is 0: a simulated GPU is no vGPU and holds no license.
- errors, from the fault state: each injected fault counts once (by its injection time): Xid 48
  (double-bit ECC) adds 1 to the double-bit ECC counters (volatile and aggregate) and to the
  uncorrectable remapped rows, Xid 92 (high single-bit ECC rate) adds 1 to the single-bit ones,
  Xid 63 (row remapping event) adds 1 correctable remapped row; `ROW_REMAP_FAILURE` is 1 while an
  Xid 64 fault is active. A device with an active Xid 79 ("fallen off the bus") gives no readings
  at all — it stops answering, as NVML reports GPU_IS_LOST — and comes back when it is cleared.
  A fault on a MIG device counts for its GPU. The counters live in the state, so they start again
  from 0 when the exporter restarts (as volatile ECC counters do on a driver reload).
- MIG: each MIG device gets FB_USED/FB_FREE/FB_RESERVED and the profiling ratios from its own
  holders and load on its own framebuffer (NVML reports no utilisation for MIG devices); its GPU's
  utilisation is the framebuffer-weighted mean of its MIG devices', its memory their sum; PCIe and
  NVLink traffic are the GPU's.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sro.devices import fields as f
from sro.devices.driverstate import Fault, Load
from sro.devices.model import Device, DeviceUUID, Inventory, MigDevice

POD_UTIL = 45.0  # % per holding container
POD_MEMORY = 0.25  # share of the framebuffer per holding container
MAX_POD_MEMORY = 0.90
RESERVED = 0.006  # share of the framebuffer the driver keeps
UTIL_NOISE = 3.0  # ± points
MEMORY_NOISE = 0.005  # ± share of the framebuffer
TEMP_NOISE = 1.0  # ± °C
POWER_NOISE = 0.01  # ± share of the board's maximum
IDLE_TEMP, TEMP_PER_UTIL, MEMORY_TEMP_OFFSET = 30.0, 0.5, 4.0
IDLE_POWER = 0.15  # share of the board's maximum
MEM_COPY_SHARE, TENSOR_SHARE = 0.6, 0.5
IDLE_SM_CLOCK = 210
PCIE_RX_SHARE, PCIE_TX_RATIO = 0.25, 0.5  # of a direction's bandwidth at 100 % memory copy; tx/rx
PCIE_LANES = 16
PCIE_LANE_MBPS = {3: 985, 4: 1969, 5: 3938}  # MB/s per lane and direction, by PCIe generation
NVLINK_SHARE = 0.4  # of a link's bandwidth per direction at 100 % utilisation
NVLINK_LINK_BPS = 25e9  # bytes/s per link and direction (NVLink 3 and 4)
FALLEN_OFF_THE_BUS = 79
ROW_REMAP_FAILURE_XID = 64


@dataclass(frozen=True)
class Board:
    """What the model takes from a product: maximum power (W), boost SM clock and memory clock (MHz)."""

    power_max_w: float
    sm_clock_mhz: int
    mem_clock_mhz: int


BOARDS: tuple[tuple[str, Board], ...] = (
    ("H100", Board(700.0, 1980, 2619)),
    ("A100", Board(400.0, 1410, 1593)),
)
DEFAULT_BOARD = Board(300.0, 1500, 1215)

# Xid -> the error counters one injected fault of it adds to
XID_COUNTERS: Mapping[int, tuple[str, ...]] = {
    48: (f.ECC_DBE_VOL, f.ECC_DBE_AGG, f.UNCORRECTABLE_REMAPPED_ROWS),
    92: (f.ECC_SBE_VOL, f.ECC_SBE_AGG),
    63: (f.CORRECTABLE_REMAPPED_ROWS,),
}
COUNTERS = (
    f.ECC_SBE_VOL,
    f.ECC_DBE_VOL,
    f.ECC_SBE_AGG,
    f.ECC_DBE_AGG,
    f.UNCORRECTABLE_REMAPPED_ROWS,
    f.CORRECTABLE_REMAPPED_ROWS,
)


def board(product: str) -> Board:
    return next((b for name, b in BOARDS if name in product), DEFAULT_BOARD)


def pcie_generation(compute_capability: str) -> int:
    """The PCIe generation of a GPU's link: 5 from Hopper (9.x) on, 4 for Ampere/Ada (8.x), else 3."""
    major = compute_capability.partition(".")[0]
    cc = int(major) if major.isdigit() else 0
    return 5 if cc >= 9 else 4 if cc == 8 else 3


def pcie_kbps(d: Device, mem_copy_util: float) -> tuple[int, int]:
    """(transmitted, received) PCIe traffic in KB/s of a GPU at this memory-copy utilisation."""
    direction = PCIE_LANES * PCIE_LANE_MBPS[pcie_generation(d.compute_capability)] * 1e6 / 1024
    rx = round(mem_copy_util / 100 * PCIE_RX_SHARE * direction)
    return round(rx * PCIE_TX_RATIO), rx


def nvlink_bps(d: Device, utils: Mapping[DeviceUUID, float]) -> tuple[float, float]:
    """(sent, received) bytes/s over a GPU's NVLinks; `utils` has the utilisation of every GPU that
    answers. Each direction of a link carries its sender's util / 100 × 40 % of the link's bandwidth."""
    if d.uuid not in utils:
        return 0.0, 0.0
    per_link = NVLINK_SHARE * NVLINK_LINK_BPS / 100
    peers = {peer: n for peer, n in d.nvlinks.items() if peer in utils}
    sent = utils[d.uuid] * per_link * sum(peers.values())
    return sent, sum(n * utils[peer] * per_link for peer, n in peers.items())


@dataclass(frozen=True)
class SimState:
    """What the model carries from one collection to the next."""

    tick: int = 0
    energy_mj: Mapping[DeviceUUID, float] = field(default_factory=dict)
    counters: Mapping[DeviceUUID, Mapping[str, int]] = field(default_factory=dict)
    counted: frozenset[tuple[DeviceUUID, int, float]] = frozenset()  # (uuid, xid, since) seen
    nvlink_kib: Mapping[DeviceUUID, tuple[float, float]] = field(default_factory=dict)  # (tx, rx)


@dataclass(frozen=True)
class Step:
    state: SimState
    readings: dict[DeviceUUID, dict[str, float]]  # by GPU or MIG device UUID
    silent: dict[DeviceUUID, str]  # devices that did not answer, with why


class Stepper:
    """What a reader of the model keeps between its steps: the model's state and when it last stepped.

    Why shared: the exporter (`sro.devices.telemetry.SimulatedTelemetry`) and the NVML state writer
    (`sro.devices.simnvml_state.StateWriter`) step the same model of one driver root, each at its own
    pace, and each must carry its state so energy and error counters accumulate."""

    def __init__(
        self, driver_root: Path, seed: str = "sro", clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.driver_root = driver_root
        self.seed = seed
        self.clock = clock
        self.state = SimState()
        self._last: float | None = None

    def elapsed(self) -> float:
        """Seconds since the previous call (0 the first time): the `dt` of the next step."""
        now = self.clock()
        dt = 0.0 if self._last is None else now - self._last
        self._last = now
        return dt


def noise(seed: str, uuid: str, tick: int, reading: str) -> float:
    """A deterministic number in [-1, 1] for one reading of one device at one tick."""
    digest = hashlib.blake2b(f"{seed}/{uuid}/{tick}/{reading}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / float(1 << 64) * 2.0 - 1.0


def _clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


def _targets(holders: int, load: Load | None, memory_mib: int) -> tuple[float, float]:
    util = load.util if load is not None and load.util is not None else min(100.0, POD_UTIL * holders)
    if load is not None and load.memory_mib is not None:
        memory = float(load.memory_mib)
    else:
        memory = min(MAX_POD_MEMORY, POD_MEMORY * holders) * memory_mib
    return util, memory


def _util_and_memory(
    uuid: str, memory_mib: int, holders: int, load: Load | None, seed: str, tick: int
) -> tuple[int, int, int]:
    """(util %, used MiB, reserved MiB) of one device or MIG device."""
    util_target, memory_target = _targets(holders, load, memory_mib)
    reserved = round(memory_mib * RESERVED)
    util = 0.0
    if util_target > 0:
        util = _clamp(util_target + UTIL_NOISE * noise(seed, uuid, tick, "util"), 0.0, 100.0)
    used = 0.0
    if memory_target > 0:
        jitter = MEMORY_NOISE * memory_mib * noise(seed, uuid, tick, "memory")
        used = _clamp(memory_target + jitter, 0.0, float(memory_mib - reserved))
    return round(util), round(used), reserved


def _memory_readings(memory_mib: int, used: int, reserved: int) -> dict[str, float]:
    return {f.FB_FREE: memory_mib - reserved - used, f.FB_USED: used, f.FB_RESERVED: reserved}


def _ratios(util: float) -> dict[str, float]:
    return {
        f.GR_ENGINE_ACTIVE: round(util / 100, 4),
        f.PIPE_TENSOR_ACTIVE: round(util / 100 * TENSOR_SHARE, 4),
        f.DRAM_ACTIVE: round(round(util * MEM_COPY_SHARE) / 100, 4),
    }


def _mig_readings(
    m: MigDevice, holders: Mapping[DeviceUUID, int], loads: Mapping[DeviceUUID, Load], seed: str, tick: int
) -> tuple[dict[str, float], int, int]:
    util, used, reserved = _util_and_memory(
        m.uuid, m.memory_mib, holders.get(m.uuid, 0), loads.get(m.uuid), seed, tick
    )
    return {**_memory_readings(m.memory_mib, used, reserved), **_ratios(util)}, util, used


def _device(
    d: Device,
    holders: Mapping[DeviceUUID, int],
    loads: Mapping[DeviceUUID, Load],
    seed: str,
    tick: int,
    out: dict[DeviceUUID, dict[str, float]],
) -> tuple[int, int, int]:
    """Fills `out` with the MIG devices' readings; returns the GPU's (util, used, reserved)."""
    if not d.mig_devices:
        return _util_and_memory(d.uuid, d.memory_mib, holders.get(d.uuid, 0), loads.get(d.uuid), seed, tick)
    weighted, used_sum = 0.0, 0
    for m in d.mig_devices:
        out[m.uuid], util, used = _mig_readings(m, holders, loads, seed, tick)
        weighted += util * m.memory_mib
        used_sum += used
    reserved = round(d.memory_mib * RESERVED)
    util = round(weighted / d.memory_mib)
    own = loads.get(d.uuid)
    if own is not None and own.util is not None:
        util = round(own.util)
    return util, min(used_sum, d.memory_mib - reserved), reserved


def _owner(inv: Inventory) -> dict[DeviceUUID, DeviceUUID]:
    """Any GPU or MIG UUID -> its GPU's UUID."""
    owner = {d.uuid: d.uuid for d in inv.devices}
    owner.update({m.uuid: d.uuid for d in inv.devices for m in d.mig_devices})
    return owner


def step(
    state: SimState,
    inv: Inventory,
    holders: Mapping[DeviceUUID, int],
    loads: Mapping[DeviceUUID, Load],
    faults: Mapping[DeviceUUID, Fault],
    dt: float,
    seed: str = "sro",
) -> Step:
    """One collection: the readings of every device and the state for the next one."""
    tick = state.tick + 1
    owner = _owner(inv)
    counters = {u: dict(c) for u, c in state.counters.items()}
    counted = set(state.counted)
    active: dict[DeviceUUID, set[int]] = {}
    for uuid, fault in sorted(faults.items()):
        gpu = owner.get(uuid)
        if gpu is None:
            continue
        active.setdefault(gpu, set()).add(fault.xid)
        key = (uuid, fault.xid, fault.since)
        if key not in counted:
            counted.add(key)
            for name in XID_COUNTERS.get(fault.xid, ()):
                gpu_counters = counters.setdefault(gpu, {})
                gpu_counters[name] = gpu_counters.get(name, 0) + 1
    energy = dict(state.energy_mj)
    nvlink = dict(state.nvlink_kib)
    readings: dict[DeviceUUID, dict[str, float]] = {}
    silent: dict[DeviceUUID, str] = {}
    busy: dict[DeviceUUID, tuple[int, int, int]] = {}  # (util, used, reserved) of those that answer
    for d in inv.devices:
        if FALLEN_OFF_THE_BUS in active.get(d.uuid, set()):
            silent[d.uuid] = f"Xid {FALLEN_OFF_THE_BUS}: the simulated GPU has fallen off the bus"
        else:
            busy[d.uuid] = _device(d, holders, loads, seed, tick, readings)
    utils = {uuid: float(u) for uuid, (u, _, _) in busy.items()}
    for d in inv.devices:
        if d.uuid not in busy:
            continue
        xids = active.get(d.uuid, set())
        util, used, reserved = busy[d.uuid]
        b = board(d.product)
        temp = IDLE_TEMP + TEMP_PER_UTIL * util + TEMP_NOISE * noise(seed, d.uuid, tick, "temp")
        power = b.power_max_w * (IDLE_POWER + (1 - IDLE_POWER) * util / 100)
        power += POWER_NOISE * b.power_max_w * noise(seed, d.uuid, tick, "power")
        energy[d.uuid] = energy.get(d.uuid, 0.0) + power * max(dt, 0.0) * 1000
        mem_copy = round(util * MEM_COPY_SHARE)
        pcie_tx, pcie_rx = pcie_kbps(d, mem_copy)
        sent, received = nvlink_bps(d, utils)
        tx_kib, rx_kib = nvlink.get(d.uuid, (0.0, 0.0))
        seconds = max(dt, 0.0)
        nvlink[d.uuid] = (tx_kib + sent * seconds / 1024, rx_kib + received * seconds / 1024)
        values: dict[str, float] = {
            f.SM_CLOCK: b.sm_clock_mhz if util > 0 else IDLE_SM_CLOCK,
            f.MEM_CLOCK: b.mem_clock_mhz,
            f.MEMORY_TEMP: round(temp + MEMORY_TEMP_OFFSET),
            f.GPU_TEMP: round(temp),
            f.POWER_USAGE: round(power, 3),
            f.TOTAL_ENERGY: round(energy[d.uuid]),
            f.PCIE_REPLAY: 0,
            f.GPU_UTIL: util,
            f.MEM_COPY_UTIL: mem_copy,
            f.ENC_UTIL: 0,
            f.DEC_UTIL: 0,
            **_memory_readings(d.memory_mib, used, reserved),
            **{name: counters.get(d.uuid, {}).get(name, 0) for name in COUNTERS},
            f.ROW_REMAP_FAILURE: 1 if ROW_REMAP_FAILURE_XID in xids else 0,
            f.NVLINK_BANDWIDTH_TOTAL: round((sent + received) / 1e6),
            f.VGPU_LICENSE_STATUS: 0,
            **_ratios(util),
            f.PCIE_TX_BYTES: pcie_tx * 1024,
            f.PCIE_RX_BYTES: pcie_rx * 1024,
            f.PCIE_TX_THROUGHPUT: pcie_tx,
            f.PCIE_RX_THROUGHPUT: pcie_rx,
            f.NVLINK_TX_KIB: round(nvlink[d.uuid][0]),
            f.NVLINK_RX_KIB: round(nvlink[d.uuid][1]),
        }
        readings[d.uuid] = values
    new_state = SimState(
        tick=tick, energy_mj=energy, counters=counters, counted=frozenset(counted), nvlink_kib=nvlink
    )
    return Step(new_state, readings, silent)
