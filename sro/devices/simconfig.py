"""The simulated driver's device description: a YAML file in, an `Inventory` out (pure).

Why: people test scheduling, sharing, MIG and failure handling of a GPU cluster without a GPU by
describing the GPUs they want (product, memory, compute capability, NUMA node, NVLink topology, MIG
layout) in a small file. UUIDs and PCI bus ids are derived deterministically when not given, so the
same file gives the same devices on every run. Errors name the field to fix.

    driverVersion: "550.0-sim"
    personality: simgpu           # or nvidia: NVIDIA's device nodes and NVML (sro.devices.simulated_nvidia)
    defaults: {product: SRO Simulated H100, memoryMiB: 81920, computeCapability: "9.0"}
    count: 8                      # or an explicit `devices:` list (the two merge: list first)
    numaNodes: [0, 0, 0, 0, 1, 1, 1, 1]
    nvlinkIslands: [[0, 1, 2, 3], [4, 5, 6, 7]]   # full mesh inside each island
    nvlinkLinks: 4                # links per pair inside an island (default 1)
    nvlinks: [{between: [3, 4], links: 1}]       # extra pairs
    devices:
      - {index: 0, mig: [{profile: 1g.10gb}, {profile: 1g.10gb}, {profile: 3g.40gb}]}
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from sro.devices.model import Device, DeviceUUID, Inventory, MigDevice

_NAMESPACE = uuid.UUID("6f1c35e2-58a4-4c3e-9c35-7e2b1c0d5a11")  # fixed: same file -> same UUIDs
_MIG_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb$")
DEFAULTS: Mapping[str, Any] = {
    "product": "SRO Simulated GPU",
    "memoryMiB": 16384,
    "computeCapability": "8.0",
}
MAX_DEVICES = 64
# A driver version is also a node label value (discovery, the operator's upgrade) and goes verbatim
# into the `simgpu-smi` shell script: so exactly a label value's syntax, 1-63 characters of
# [0-9A-Za-z._-], alphanumeric at both ends.
DRIVER_VERSION = re.compile(r"^[0-9A-Za-z]([0-9A-Za-z._-]{0,61}[0-9A-Za-z])?$")
# What the simulated driver looks like on the node: its own `simgpu` devices, or `nvidia` (NVIDIA's
# device nodes and a libnvidia-ml.so.1 serving NVML: `sro.devices.simulated_nvidia`).
PERSONALITIES = ("simgpu", "nvidia")


class SimConfigError(ValueError):
    """The simulated device description is malformed; the message names the field."""


def _int(value: Any, where: str, lo: int = 0, hi: int = 1 << 31) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise SimConfigError(f"{where}: expected an integer in [{lo}, {hi}], got {value!r}")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str | int | float) or isinstance(value, bool) or str(value) == "":
        raise SimConfigError(f"{where}: expected a non-empty string, got {value!r}")
    return str(value)


def driver_version(value: Any, where: str = "driverVersion") -> str:
    """`value` as a driver version, or SimConfigError naming `where` and the rule it breaks."""
    text = _str(value, where)
    if not DRIVER_VERSION.fullmatch(text):
        raise SimConfigError(
            f"{where}: {text!r} is not a driver version: 1-63 characters of 0-9 A-Z a-z . _ -, "
            "starting and ending with a letter or digit"
        )
    return text


def personality(doc: Any) -> str:
    """The document's `personality` (default simgpu), or SimConfigError naming the known ones."""
    value = doc.get("personality", PERSONALITIES[0]) if isinstance(doc, Mapping) else PERSONALITIES[0]
    if value not in PERSONALITIES:
        raise SimConfigError(f"personality: expected one of {list(PERSONALITIES)}, got {value!r}")
    return str(value)


def _list(doc: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise SimConfigError(f"{where}{key}: expected a list, got {type(value).__name__}")
    return value


def device_uuid(seed: str, index: int) -> DeviceUUID:
    return DeviceUUID(f"GPU-{uuid.uuid5(_NAMESPACE, f'{seed}/gpu/{index}')}")


def mig_uuid(seed: str, index: int, mig_index: int) -> DeviceUUID:
    return DeviceUUID(f"MIG-{uuid.uuid5(_NAMESPACE, f'{seed}/gpu/{index}/mig/{mig_index}')}")


def _mig(
    entries: list[Any], parent: DeviceUUID, seed: str, index: int, total_mib: int, where: str
) -> tuple[MigDevice, ...]:
    out = []
    used = 0
    for k, entry in enumerate(entries):
        w = f"{where}.mig[{k}]"
        if not isinstance(entry, Mapping):
            raise SimConfigError(f"{w}: expected a mapping with a 'profile' like 1g.10gb")
        profile = _str(entry.get("profile"), f"{w}.profile")
        m = _MIG_PROFILE.match(profile)
        if not m:
            raise SimConfigError(f"{w}.profile: expected '<n>g.<mem>gb' (e.g. 1g.10gb), got {profile!r}")
        mem = _int(entry.get("memoryMiB", int(m.group(2)) * 1024), f"{w}.memoryMiB", 1)
        used += mem
        out.append(
            MigDevice(
                uuid=mig_uuid(seed, index, k),
                parent_uuid=parent,
                index=k,
                profile=profile,
                memory_mib=mem,
                gi_id=_int(entry.get("gi", k + 1), f"{w}.gi"),
                ci_id=_int(entry.get("ci", 0), f"{w}.ci"),
            )
        )
    if used > total_mib:
        raise SimConfigError(f"{where}.mig: slices need {used} MiB, the device has {total_mib} MiB")
    return tuple(out)


def parse(doc: Any, device_node: str = "/dev/sro-simgpu{index}", minor_base: int = 0) -> Inventory:
    """Turn a parsed YAML document into the simulated inventory (device nodes per `device_node`)."""
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        raise SimConfigError(f"top level: expected a mapping, got {type(doc).__name__}")
    known = {
        "driverVersion",
        "defaults",
        "count",
        "devices",
        "numaNodes",
        "nvlinkIslands",
        "nvlinkLinks",
        "nvlinks",
        "seed",
        "personality",
    }
    unknown = sorted(set(doc) - known)
    if unknown:
        raise SimConfigError(f"top level: unknown field(s) {unknown}; known: {sorted(known)}")
    personality(doc)
    seed = _str(doc.get("seed", "sro"), "seed")
    defaults = dict(DEFAULTS)
    raw_defaults = doc.get("defaults", {})
    if not isinstance(raw_defaults, Mapping):
        raise SimConfigError("defaults: expected a mapping")
    defaults.update(raw_defaults)
    entries = _list(doc, "devices", "")
    count = _int(doc.get("count", len(entries)), "count", 0, MAX_DEVICES)
    if len(entries) > count:
        count = len(entries)
    numa = _list(doc, "numaNodes", "")
    if numa and len(numa) != count:
        raise SimConfigError(f"numaNodes: {len(numa)} entries for {count} devices")

    specs: list[dict[str, Any]] = []
    for i in range(count):
        spec = dict(defaults)
        if numa:
            spec["numaNode"] = _int(numa[i], f"numaNodes[{i}]", 0, 1023)
        if i < len(entries):
            entry = entries[i]
            if not isinstance(entry, Mapping):
                raise SimConfigError(f"devices[{i}]: expected a mapping")
            if "index" in entry and entry["index"] != i:
                raise SimConfigError(
                    f"devices[{i}].index: devices are listed in index order, got {entry['index']!r}"
                )
            spec.update(entry)
        specs.append(spec)

    links: dict[tuple[int, int], int] = {}

    def add_link(a: int, b: int, n: int, where: str) -> None:
        for x in (a, b):
            _int(x, where, 0, count - 1)
        if a == b:
            raise SimConfigError(f"{where}: a device cannot be NVLinked to itself ({a})")
        links[(min(a, b), max(a, b))] = n

    per_pair = _int(doc.get("nvlinkLinks", 1), "nvlinkLinks", 1, 64)
    for k, island in enumerate(_list(doc, "nvlinkIslands", "")):
        if not isinstance(island, list):
            raise SimConfigError(f"nvlinkIslands[{k}]: expected a list of device indices")
        for a in island:
            for b in island:
                if a != b:
                    add_link(a, b, per_pair, f"nvlinkIslands[{k}]")
    for k, pair in enumerate(_list(doc, "nvlinks", "")):
        between = pair.get("between") if isinstance(pair, Mapping) else None
        if not isinstance(between, list) or len(between) != 2:
            raise SimConfigError(f"nvlinks[{k}].between: expected two device indices")
        add_link(
            between[0], between[1], _int(pair.get("links", 1), f"nvlinks[{k}].links", 1, 64), f"nvlinks[{k}]"
        )

    uuids = [
        DeviceUUID(_str(s["uuid"], f"devices[{i}].uuid")) if "uuid" in s else device_uuid(seed, i)
        for i, s in enumerate(specs)
    ]
    if len(set(uuids)) != len(uuids):
        raise SimConfigError("devices[].uuid: UUIDs must be unique")
    devices = []
    for i, s in enumerate(specs):
        where = f"devices[{i}]"
        mem = _int(s.get("memoryMiB"), f"{where}.memoryMiB", 1)
        cc = _str(s.get("computeCapability"), f"{where}.computeCapability")
        if not re.match(r"^\d+\.\d+$", cc):
            raise SimConfigError(f"{where}.computeCapability: expected '<major>.<minor>', got {cc!r}")
        peers = {uuids[b if a == i else a]: n for (a, b), n in links.items() if i in (a, b)}
        mig_entries = s.get("mig") or []
        if not isinstance(mig_entries, list):
            raise SimConfigError(f"{where}.mig: expected a list of slices")
        numa_node = s.get("numaNode")
        devices.append(
            Device(
                uuid=uuids[i],
                index=i,
                minor=minor_base + i,
                device_node=device_node.format(index=i, minor=minor_base + i),
                pci_bus_id=_str(s.get("pciBusId", f"0000:{0x10 + i:02x}:00.0"), f"{where}.pciBusId"),
                product=_str(s.get("product"), f"{where}.product"),
                memory_mib=mem,
                compute_capability=cc,
                numa_node=None if numa_node is None else _int(numa_node, f"{where}.numaNode", 0, 1023),
                nvlinks=peers,
                mig_enabled=bool(mig_entries),
                mig_devices=_mig(mig_entries, uuids[i], seed, i, mem, where),
                simulated=True,
            )
        )
    return Inventory(
        backend="simulated",
        devices=tuple(devices),
        driver_version=driver_version(doc.get("driverVersion", "0.0-simulated")),
        simulated=True,
    )
