"""NVML's view of the simulated NVIDIA driver: the state file its libnvidia-ml.so.1 serves.

Why a file written here and read in C: the compiled library (native/simnvml) must answer pynvml,
nvidia-smi and any other NVML client in any container without Python, while the simulated driver's
truth (devices.json, faults.json, loads.json) and its readings model (`sro.devices.simreadings`,
the one the exporter uses) live in Python. So Python renders everything NVML can be asked into one
line-oriented text file (the format is fixed in the design: `<kind> key=value ...`, values
percent-encoded, unknown keys and kinds ignored by the reader) and replaces it atomically; the
library re-reads it when its inode or mtime changes.

Who writes it: `sro driver simulate --personality nvidia` at install and every second while it
holds the driver, and `sro simulate fault` / `sro simulate load` at once (when the driver root has
the state directory), so a fault or a load shows in NVML without waiting for the next tick. Several
writers may take turns, so each one starts from the previous file as well as from what it kept in
memory: counters (energy, ECC, remapped rows) never go back and a fault already counted is not
counted again (`merge_state`). `render` and `next_text` are pure; `StateWriter` does the I/O.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sro.api.builtin_recipes import SIMNVML_STATE_DIR
from sro.devices import driverstate, simreadings
from sro.devices import fields as f
from sro.devices.driverstate import Fault, Load
from sro.devices.model import Device, DeviceUUID, Inventory
from sro.devices.simnvml_format import StateFormatError, line, parse

FORMAT_VERSION = 1
STATE_FILE = "state"
LOCK_FILE = ".simnvml.lock"  # under the driver root: writers take turns
DEFAULT_CUDA = 12040

# NVIDIA's driver branches and the CUDA version they report (nvmlSystemGetCudaDriverVersion).
# fmt: off
CUDA_BY_BRANCH: tuple[tuple[int, int], ...] = (
    (470, 11040), (495, 11050), (510, 11060), (515, 11070), (520, 11080), (525, 12000), (530, 12010),
    (535, 12020), (545, 12030), (550, 12040), (555, 12050), (560, 12060), (565, 12070), (570, 12080),
    (575, 12090), (580, 13000),
)
# fmt: on
# compute capability major -> NVML architecture name (8.9 is Ada, the rest of 8.x Ampere)
ARCH_BY_CC_MAJOR = {
    3: "kepler",
    5: "maxwell",
    6: "pascal",
    7: "volta",
    8: "ampere",
    9: "hopper",
    10: "blackwell",
}
PCIE_WIDTH = 16

# NVIDIA's MIG capability minors (/proc/driver/nvidia-caps/mig-minors): 1 config, 2 monitor, then
# per GPU 15 GPU instances of 1 access minor followed by 8 compute-instance access minors.
MIG_CAPS_FIRST = 3
MIG_GI_PER_GPU = 15
MIG_CI_PER_GI = 8
_MINORS_PER_GI = 1 + MIG_CI_PER_GI

# Readings the model gives in the state's own units (KB/s for PCIe, KiB since load for NVLink, the
# GPU's total over its links), named in `fields` by these constants; a name `fields` lacks (an
# older model) reads 0. NVLink traffic is shared evenly by the GPU's links.
OPTIONAL_READINGS: Mapping[str, tuple[str, ...]] = {
    key: tuple(getattr(f, name) for name in names if hasattr(f, name))
    for key, names in {
        "pcie_tx": ("PCIE_TX_THROUGHPUT",),
        "pcie_rx": ("PCIE_RX_THROUGHPUT",),
        "nvlink_tx": ("NVLINK_TX_KIB",),
        "nvlink_rx": ("NVLINK_RX_KIB",),
    }.items()
}
# state key -> model field, for the readings that are always there (the `reading` line, in order)
READING_FIELDS: tuple[tuple[str, str], ...] = (
    ("util", f.GPU_UTIL),
    ("memutil", f.MEM_COPY_UTIL),
    ("fb_used", f.FB_USED),
    ("fb_reserved", f.FB_RESERVED),
    ("temp", f.GPU_TEMP),
    ("memtemp", f.MEMORY_TEMP),
)
COUNTER_KEYS: Mapping[str, str] = {  # reading key -> model counter, seeded from the previous file
    "ecc_sbe_vol": f.ECC_SBE_VOL,
    "ecc_dbe_vol": f.ECC_DBE_VOL,
    "ecc_sbe_agg": f.ECC_SBE_AGG,
    "ecc_dbe_agg": f.ECC_DBE_AGG,
    "remap_corr": f.CORRECTABLE_REMAPPED_ROWS,
    "remap_unc": f.UNCORRECTABLE_REMAPPED_ROWS,
}


def nvml_bus_id(bus_id: str) -> str:
    """sro's '0000:3b:00.0' as NVML writes it: '00000000:3B:00.0'."""
    domain, _, rest = bus_id.partition(":")
    try:
        return f"{int(domain, 16):08X}:{rest.upper()}" if rest else bus_id.upper()
    except ValueError:
        return bus_id.upper()


def cuda_version(driver_version: str) -> int:
    """The CUDA version a driver reports (12040 = 12.4): its branch's, by the leading number."""
    m = re.match(r"\d+", driver_version)
    if m is None:
        return DEFAULT_CUDA
    branch = int(m.group())
    return next((cuda for b, cuda in reversed(CUDA_BY_BRANCH) if b <= branch), CUDA_BY_BRANCH[0][1])


def nvml_version(driver_version: str) -> str:
    return f"{cuda_version(driver_version) // 1000}.{driver_version}"


def architecture(compute_capability: str) -> str:
    major, _, minor = compute_capability.partition(".")
    if major == "8" and minor == "9":
        return "ada"
    if major == "7" and minor == "5":
        return "turing"
    return ARCH_BY_CC_MAJOR.get(int(major), "unknown") if major.isdigit() else "unknown"


def pcie_generation(compute_capability: str) -> int:
    """As the readings model has it: 5 from compute capability 9 (Hopper) on, 4 for 8.x, else 3."""
    major = compute_capability.partition(".")[0]
    cc = int(major) if major.isdigit() else 0
    return 5 if cc >= 9 else 4 if cc == 8 else 3


def serial(uuid: str) -> str:
    """A 13-digit board serial, fixed by the UUID (NVIDIA's serials look like 1320221000000)."""
    return "1" + str(int.from_bytes(hashlib.blake2b(uuid.encode(), digest_size=8).digest(), "big"))[
        -12:
    ].zfill(12)


def mig_cap_minor(gpu_minor: int, gi: int, ci: int) -> int:
    """The minor of `/dev/nvidia-caps/nvidia-cap<N>` giving access to compute instance `ci` of
    GPU instance `gi` on GPU `gpu_minor`, in NVIDIA's mig-minors layout."""
    if not (0 <= gi < MIG_GI_PER_GPU and 0 <= ci < MIG_CI_PER_GI):
        raise ValueError(
            f"MIG gi {gi} ci {ci}: NVIDIA numbers gi 0-{MIG_GI_PER_GPU - 1}, ci 0-{MIG_CI_PER_GI - 1}"
        )
    return MIG_CAPS_FIRST + gpu_minor * MIG_GI_PER_GPU * _MINORS_PER_GI + gi * _MINORS_PER_GI + 1 + ci


def fault_seqs(
    inv: Inventory, faults: Mapping[DeviceUUID, Fault]
) -> list[tuple[int, int, DeviceUUID, Fault, int]]:
    """(gpu index, mig index or -1, uuid, fault, seq) of every fault on a device of `inv`, in
    injection order; seq = microseconds since the epoch of the injection, made unique upwards."""
    where: dict[DeviceUUID, tuple[int, int]] = {d.uuid: (d.index, -1) for d in inv.devices}
    where.update({m.uuid: (d.index, m.index) for d in inv.devices for m in d.mig_devices})
    out = []
    last = -1
    for uuid, fault in sorted(faults.items(), key=lambda kv: (kv[1].since, kv[0])):
        if uuid not in where:
            continue
        seq = max(int(fault.since * 1e6), last + 1)
        last = seq
        out.append((*where[uuid], uuid, fault, seq))
    return out


def _int(values: Mapping[str, float], name: str) -> int:
    return round(values.get(name, 0))


def _optional(values: Mapping[str, float], key: str) -> float:
    return next((values[name] for name in OPTIONAL_READINGS[key] if name in values), 0.0)


def _gpu_line(d: Device, lost: bool) -> str:
    b = simreadings.board(d.product)
    arch = architecture(d.compute_capability)
    return line(
        "gpu",
        index=d.index,
        minor=d.minor,
        uuid=d.uuid,
        bus=nvml_bus_id(d.pci_bus_id),
        name=d.product,
        memory=d.memory_mib,
        cc=d.compute_capability,
        arch=arch,
        numa=-1 if d.numa_node is None else d.numa_node,
        serial=serial(d.uuid),
        mig=int(d.mig_enabled),
        power_limit=round(b.power_max_w * 1000),
        max_sm_clock=b.sm_clock_mhz,
        max_mem_clock=b.mem_clock_mhz,
        pcie_gen=pcie_generation(d.compute_capability),
        pcie_width=PCIE_WIDTH,
        lost=int(lost),
    )


def _reading_line(d: Device, values: Mapping[str, float]) -> str:
    return line(
        "reading",
        index=d.index,
        **{key: _int(values, name) for key, name in READING_FIELDS},
        power=round(values.get(f.POWER_USAGE, 0) * 1000),
        energy=_int(values, f.TOTAL_ENERGY),
        sm_clock=_int(values, f.SM_CLOCK),
        mem_clock=_int(values, f.MEM_CLOCK),
        pcie_tx=round(_optional(values, "pcie_tx")),
        pcie_rx=round(_optional(values, "pcie_rx")),
        pcie_replay=_int(values, f.PCIE_REPLAY),
        **{key: _int(values, name) for key, name in COUNTER_KEYS.items()},
        remap_pending=0,
        remap_failure=_int(values, f.ROW_REMAP_FAILURE),
        enc=_int(values, f.ENC_UTIL),
        dec=_int(values, f.DEC_UTIL),
    )


def nvlink_numbers(inv: Inventory, d: Device) -> list[tuple[int, Device]]:
    """(link number, peer) of every NVLink of `d`: numbered from 0, peer by peer in index order."""
    peers = sorted((p for p in inv.devices if p.uuid in d.nvlinks), key=lambda p: p.index)
    out: list[tuple[int, Device]] = []
    for p in peers:
        first = len(out)
        out.extend((first + k, p) for k in range(d.nvlinks[p.uuid]))
    return out


def render(
    inv: Inventory, faults: Mapping[DeviceUUID, Fault], step: simreadings.Step, generation: int
) -> str:
    """The state file for `inv` with the readings of one model step (pure)."""
    version = inv.driver_version
    out = [
        line(
            "simnvml",
            version=FORMAT_VERSION,
            generation=generation,
            driver=version,
            cuda=cuda_version(version),
            nvml=nvml_version(version),
        )
    ]
    out.extend(_gpu_line(d, d.uuid in step.silent) for d in inv.devices)
    for d in inv.devices:
        if d.uuid in step.readings:
            out.append(_reading_line(d, step.readings[d.uuid]))
    for d in inv.devices:
        values = step.readings.get(d.uuid, {})
        links = nvlink_numbers(inv, d)
        # the GPU's counters shared by all its links (each stays monotonic); a lost peer's are down
        share = {k: _optional(values, k) / len(links) if links else 0.0 for k in ("nvlink_tx", "nvlink_rx")}
        for n, peer in links:
            out.append(
                line(
                    "nvlink",
                    index=d.index,
                    link=n,
                    peer_bus=nvml_bus_id(peer.pci_bus_id),
                    active=int(peer.uuid not in step.silent),
                    tx=int(share["nvlink_tx"]),
                    rx=int(share["nvlink_rx"]),
                )
            )
    for d in inv.devices:
        for m in d.mig_devices:
            values = step.readings.get(m.uuid, {})
            out.append(
                line(
                    "mig",
                    parent=d.index,
                    index=m.index,
                    uuid=m.uuid,
                    gi=m.gi_id,
                    ci=m.ci_id,
                    profile=m.profile,
                    memory=m.memory_mib,
                    cap_minor=mig_cap_minor(d.minor, m.gi_id, m.ci_id),
                    fb_used=_int(values, f.FB_USED),
                    fb_reserved=_int(values, f.FB_RESERVED),
                )
            )
    for index, mig, _uuid, fault, seq in fault_seqs(inv, faults):
        out.append(line("fault", index=index, mig=mig, xid=fault.xid, seq=seq))
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class Previous:
    """What the last state file says that the next writer carries on from."""

    generation: int = 0
    energy_mj: Mapping[DeviceUUID, float] = field(default_factory=dict)
    counters: Mapping[DeviceUUID, Mapping[str, int]] = field(default_factory=dict)
    faults: frozenset[tuple[DeviceUUID, int, int]] = frozenset()  # (uuid, xid, seq) it listed
    nvlink_kib: Mapping[DeviceUUID, tuple[float, float]] = field(default_factory=dict)  # (tx, rx), all links


def previous(text: str) -> Previous:
    """The carried-over part of a state file; StateFormatError (or KeyError, ValueError) if damaged."""
    records = parse(text)
    generation = 0
    gpus: dict[str, DeviceUUID] = {}
    migs: dict[tuple[str, str], DeviceUUID] = {}
    energy: dict[DeviceUUID, float] = {}
    counters: dict[DeviceUUID, dict[str, int]] = {}
    faults = set()
    nvlink: dict[DeviceUUID, tuple[float, float]] = {}
    for r in records:
        v = r.values
        if r.kind == "simnvml":
            generation = int(v["generation"])
        elif r.kind == "gpu":
            gpus[v["index"]] = DeviceUUID(v["uuid"])
        elif r.kind == "mig":
            migs[(v["parent"], v["index"])] = DeviceUUID(v["uuid"])
    for r in records:
        v = r.values
        if r.kind == "reading" and v["index"] in gpus:
            uuid = gpus[v["index"]]
            energy[uuid] = float(v["energy"])
            counters[uuid] = {name: int(v[key]) for key, name in COUNTER_KEYS.items()}
        elif r.kind == "fault":
            uuid_or_none = gpus.get(v["index"]) if v["mig"] == "-1" else migs.get((v["index"], v["mig"]))
            if uuid_or_none is not None:
                faults.add((uuid_or_none, int(v["xid"]), int(v["seq"])))
        elif r.kind == "nvlink" and v["index"] in gpus:
            tx, rx = nvlink.get(gpus[v["index"]], (0.0, 0.0))
            nvlink[gpus[v["index"]]] = (tx + int(v["tx"]), rx + int(v["rx"]))
    return Previous(generation, energy, counters, frozenset(faults), nvlink)


def merge_state(
    memory: simreadings.SimState, prev: Previous, inv: Inventory, faults: Mapping[DeviceUUID, Fault]
) -> simreadings.SimState:
    """The model's state to step from: what this writer kept and what the last file says, whichever
    is further (another writer may have written since); a fault the last file listed is counted."""
    energy = dict(memory.energy_mj)
    for uuid, mj in prev.energy_mj.items():
        energy[uuid] = max(energy.get(uuid, 0.0), mj)
    counters = {u: dict(c) for u, c in memory.counters.items()}
    for uuid, theirs in prev.counters.items():
        mine = counters.setdefault(uuid, {})
        for name, n in theirs.items():
            mine[name] = max(mine.get(name, 0), n)
    counted = set(memory.counted)
    for _index, _mig, uuid, fault, seq in fault_seqs(inv, faults):
        if (uuid, fault.xid, seq) in prev.faults:
            counted.add((uuid, fault.xid, fault.since))
    nvlink = dict(memory.nvlink_kib)
    for uuid, (tx, rx) in prev.nvlink_kib.items():
        kept = nvlink.get(uuid, (0.0, 0.0))
        nvlink[uuid] = (max(kept[0], tx), max(kept[1], rx))
    return dataclasses.replace(
        memory,
        tick=max(memory.tick, prev.generation),
        energy_mj=energy,
        counters=counters,
        counted=frozenset(counted),
        nvlink_kib=nvlink,
    )


def next_text(
    inv: Inventory,
    faults: Mapping[DeviceUUID, Fault],
    loads: Mapping[DeviceUUID, Load],
    memory: simreadings.SimState,
    previous_text: str | None,
    dt: float,
    seed: str = "sro",
) -> tuple[str, simreadings.SimState]:
    """The next state file and the model state to keep (pure): one step of the exporter's model
    with no holders (NVML sees no pods), from `memory` and the previous file; generation = tick."""
    prev = Previous()
    if previous_text is not None:
        with contextlib.suppress(StateFormatError, KeyError, ValueError):
            prev = previous(previous_text)
    state = merge_state(memory, prev, inv, faults)
    step = simreadings.step(state, inv, {}, loads, faults, dt, seed)
    return render(inv, faults, step, step.state.tick), step.state


def state_path(driver_root: Path) -> Path:
    return driver_root / SIMNVML_STATE_DIR / STATE_FILE


def enabled(driver_root: Path) -> bool:
    """Whether this driver root serves NVML (the NVIDIA personality made its state directory)."""
    return (driver_root / SIMNVML_STATE_DIR).is_dir()


@contextmanager
def _locked(driver_root: Path) -> Iterator[None]:
    with open(driver_root / LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class StateWriter(simreadings.Stepper):
    """Writes the state file of one driver root, keeping the model's state between writes (as the
    exporter's `SimulatedTelemetry` does) so energy and error counters accumulate."""

    def write(self) -> Path:
        """Read the driver's state files, step the model, replace the state file; DriverStateError
        when the device list or the fault state cannot be read (the last good file stays). A damaged
        load file is ignored, as the exporter ignores it."""
        root = self.driver_root
        path = state_path(root)
        with _locked(root):
            inv = driverstate.read_inventory(root)
            faults = driverstate.read_faults(root)
            try:
                loads = driverstate.read_loads(root)
            except driverstate.DriverStateError:
                loads = {}
            try:
                previous_text: str | None = path.read_text()
            except FileNotFoundError:
                previous_text = None
            dt = self.elapsed()
            text, self.state = next_text(inv, faults, loads, self.state, previous_text, dt, self.seed)
            driverstate.write_atomic(path, text)
        return path


def write_state(driver_root: Path) -> Path:
    """Write the state file once (after a fault or a load changed): `StateWriter(root).write()`."""
    return StateWriter(driver_root).write()
