"""The simulated driver's state files: the device list, the fault state and the load state.

Why files: the simulated driver (`sro driver simulate`), fault injection (`sro simulate fault`), the
device plugin, the exporter and runtime injection are separate processes, often in separate
containers that share only the host's driver root. JSON files replaced atomically (write + rename,
under a lock for read-modify-write) are the whole protocol: a reader sees the old file or the new
one, never half of one, and a watcher notices the new inode with a cheap stat().
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sro.api.recipes import SIMULATED_DEVICE_LIST, SIMULATED_FAULTS
from sro.devices.model import Device, DeviceUUID, Inventory, MigDevice

FORMAT_VERSION = 1
# What `sro simulate load` sets (utilisation and memory per device), read by the exporter's
# simulated readings (`sro.devices.simreadings`); next to the fault state, under the driver root.
SIMULATED_LOADS = "loads.json"
# How often each device was reset (`sro driver reset`), read by the exporter
# (`sro_device_resets_total`). Its own file, not the fault state: `sro simulate fault --clear` and a
# simulated reboot rewrite faults.json, and neither may reset the counts; a counter that restarts
# with the device plugin or the exporter would read as no resets to `increase()`.
SIMULATED_RESETS = "resets.json"


class DriverStateError(ValueError):
    """A state file is missing or malformed; the message names the file and field."""


@dataclass(frozen=True)
class Fault:
    xid: int
    since: float  # wall-clock time it was injected
    message: str = ""


@dataclass(frozen=True)
class Load:
    """A load the user put on a simulated device; None leaves that reading to the model."""

    util: float | None  # percent, 0..100
    memory_mib: int | None  # framebuffer used
    since: float = 0.0


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def inventory_to_doc(
    inv: Inventory,
    major: int,
    control_minor: int | Sequence[int],
    device_class: str = "",
    files: Sequence[str] = (),
) -> dict[str, Any]:
    """The device list's document. `control_minor` is one minor for every control node or one per
    node; `device_class` and `files` (paths relative to the driver root that the driver made, for
    `remove` to take exactly those) are a simulated device class's (`simclass`)."""
    minors = [control_minor] * len(inv.control_nodes) if isinstance(control_minor, int) else control_minor
    doc: dict[str, Any] = {
        "formatVersion": FORMAT_VERSION,
        "simulated": True,
        "backend": inv.backend,
        "driverVersion": inv.driver_version,
        "major": major,
        "controlNodes": [{"path": p, "minor": m} for p, m in zip(inv.control_nodes, minors, strict=True)],
        "devices": [
            {
                "uuid": d.uuid,
                "index": d.index,
                "minor": d.minor,
                "deviceNode": d.device_node,
                "pciBusId": d.pci_bus_id,
                "product": d.product,
                "memoryMiB": d.memory_mib,
                "computeCapability": d.compute_capability,
                "numaNode": d.numa_node,
                "nvlinks": dict(d.nvlinks),
                "migEnabled": d.mig_enabled,
                "mig": [
                    {
                        "uuid": m.uuid,
                        "index": m.index,
                        "profile": m.profile,
                        "memoryMiB": m.memory_mib,
                        "gi": m.gi_id,
                        "ci": m.ci_id,
                        "deviceNode": m.device_node,
                    }
                    for m in d.mig_devices
                ],
                **({"companionNodes": list(d.companion_nodes)} if d.companion_nodes else {}),
                **({"attributes": dict(sorted(d.attributes.items()))} if d.attributes else {}),
            }
            for d in inv.devices
        ],
    }
    if device_class:
        doc["class"] = device_class
    if files:
        doc["files"] = list(files)
    return doc


def inventory_from_doc(doc: Any, where: str) -> Inventory:
    try:
        if doc.get("formatVersion") != FORMAT_VERSION:
            raise DriverStateError(
                f"{where}: formatVersion {doc.get('formatVersion')!r}, expected {FORMAT_VERSION}"
            )
        devices = []
        for d in doc["devices"]:
            parent = DeviceUUID(d["uuid"])
            migs = tuple(
                MigDevice(
                    uuid=DeviceUUID(m["uuid"]),
                    parent_uuid=parent,
                    index=int(m["index"]),
                    profile=str(m["profile"]),
                    memory_mib=int(m["memoryMiB"]),
                    gi_id=int(m["gi"]),
                    ci_id=int(m["ci"]),
                    device_node=str(m.get("deviceNode", "")),
                )
                for m in d.get("mig", [])
            )
            devices.append(
                Device(
                    uuid=parent,
                    index=int(d["index"]),
                    minor=int(d["minor"]),
                    device_node=str(d["deviceNode"]),
                    pci_bus_id=str(d["pciBusId"]),
                    product=str(d["product"]),
                    memory_mib=int(d["memoryMiB"]),
                    compute_capability=str(d["computeCapability"]),
                    numa_node=None if d.get("numaNode") is None else int(d["numaNode"]),
                    nvlinks={DeviceUUID(k): int(v) for k, v in d.get("nvlinks", {}).items()},
                    mig_enabled=bool(d.get("migEnabled", False)),
                    mig_devices=migs,
                    simulated=True,
                    companion_nodes=tuple(str(c) for c in d.get("companionNodes", [])),
                    attributes={str(k): str(v) for k, v in d.get("attributes", {}).items()},
                )
            )
        return Inventory(
            backend="simulated",
            devices=tuple(devices),
            driver_version=str(doc.get("driverVersion", "")),
            control_nodes=tuple(str(c["path"]) for c in doc.get("controlNodes", [])),
            simulated=True,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, DriverStateError):
            raise
        raise DriverStateError(f"{where}: malformed device list ({type(e).__name__}: {e})") from e


def read_inventory(driver_root: Path) -> Inventory:
    path = driver_root / SIMULATED_DEVICE_LIST
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise DriverStateError(
            f"{path}: no simulated driver here (run `sro driver simulate --config FILE`)"
        ) from None
    except json.JSONDecodeError as e:
        raise DriverStateError(f"{path}: not JSON: {e}") from e
    return inventory_from_doc(doc, str(path))


@contextmanager
def _locked(driver_root: Path) -> Iterator[None]:
    driver_root.mkdir(parents=True, exist_ok=True)
    with open(driver_root / ".faults.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def faults_from_doc(doc: Any, where: str) -> dict[DeviceUUID, Fault]:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("faults", {}), Mapping):
        raise DriverStateError(f"{where}: expected {{'faults': {{uuid: {{xid, since}}}}}}")
    out = {}
    for uuid, f in doc.get("faults", {}).items():
        if not isinstance(f, Mapping) or not isinstance(f.get("xid"), int):
            raise DriverStateError(f"{where}: faults[{uuid!r}].xid must be an integer")
        out[DeviceUUID(uuid)] = Fault(
            xid=f["xid"], since=float(f.get("since", 0)), message=str(f.get("message", ""))
        )
    return out


def _read_json(path: Path) -> Any:
    """The state file's JSON, or None when there is no file (nothing set)."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as e:
        raise DriverStateError(f"{path}: not JSON: {e}") from e


def read_faults(driver_root: Path) -> dict[DeviceUUID, Fault]:
    """Active faults by device (or MIG device) UUID; no file means no faults."""
    path = driver_root / SIMULATED_FAULTS
    doc = _read_json(path)
    return {} if doc is None else faults_from_doc(doc, str(path))


def _write_faults(driver_root: Path, faults: Mapping[DeviceUUID, Fault]) -> None:
    doc = {
        "faults": {
            u: {"xid": f.xid, "since": f.since, "message": f.message} for u, f in sorted(faults.items())
        }
    }
    write_atomic(driver_root / SIMULATED_FAULTS, json.dumps(doc, indent=2) + "\n")


def set_fault(driver_root: Path, uuid: DeviceUUID, xid: int, message: str = "") -> None:
    with _locked(driver_root):
        faults = read_faults(driver_root)
        faults[uuid] = Fault(xid=xid, since=time.time(), message=message or f"simulated Xid {xid}")
        _write_faults(driver_root, faults)


def clear_faults(driver_root: Path, uuids: list[DeviceUUID] | None) -> list[DeviceUUID]:
    """Clear the faults of `uuids` (all when None); returns the ones that were active."""
    with _locked(driver_root):
        try:
            faults = read_faults(driver_root)
        except DriverStateError:
            if uuids is not None:
                raise
            faults = {}  # clearing everything also repairs a damaged fault file
        cleared = [u for u in faults if uuids is None or u in uuids]
        _write_faults(driver_root, {u: f for u, f in faults.items() if u not in cleared})
        return cleared


def loads_from_doc(doc: Any, where: str) -> dict[DeviceUUID, Load]:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("loads", {}), Mapping):
        raise DriverStateError(f"{where}: expected {{'loads': {{uuid: {{util, memoryMiB}}}}}}")
    out = {}
    for uuid, entry in doc.get("loads", {}).items():
        if not isinstance(entry, Mapping):
            raise DriverStateError(f"{where}: loads[{uuid!r}]: expected a mapping with util and/or memoryMiB")
        util, memory = entry.get("util"), entry.get("memoryMiB")
        if util is not None and (
            isinstance(util, bool) or not isinstance(util, int | float) or not 0 <= util <= 100
        ):
            raise DriverStateError(
                f"{where}: loads[{uuid!r}].util must be a number in [0, 100], got {util!r}"
            )
        if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int) or memory < 0):
            raise DriverStateError(
                f"{where}: loads[{uuid!r}].memoryMiB must be a non-negative integer, got {memory!r}"
            )
        out[DeviceUUID(uuid)] = Load(
            util=None if util is None else float(util), memory_mib=memory, since=float(entry.get("since", 0))
        )
    return out


def read_loads(driver_root: Path) -> dict[DeviceUUID, Load]:
    """Loads set by `sro simulate load`, by device (or MIG device) UUID; no file means none."""
    path = driver_root / SIMULATED_LOADS
    doc = _read_json(path)
    return {} if doc is None else loads_from_doc(doc, str(path))


def _write_loads(driver_root: Path, loads: Mapping[DeviceUUID, Load]) -> None:
    doc = {
        "loads": {
            u: {
                k: v
                for k, v in (("util", x.util), ("memoryMiB", x.memory_mib), ("since", x.since))
                if v is not None
            }
            for u, x in sorted(loads.items())
        }
    }
    write_atomic(driver_root / SIMULATED_LOADS, json.dumps(doc, indent=2) + "\n")


def set_load(driver_root: Path, uuid: DeviceUUID, util: float | None, memory_mib: int | None) -> None:
    with _locked(driver_root):
        loads = read_loads(driver_root)
        loads[uuid] = Load(util=util, memory_mib=memory_mib, since=time.time())
        _write_loads(driver_root, loads)


def clear_loads(driver_root: Path, uuids: list[DeviceUUID] | None) -> list[DeviceUUID]:
    """Clear the loads of `uuids` (all when None); returns the ones that were set."""
    with _locked(driver_root):
        try:
            loads = read_loads(driver_root)
        except DriverStateError:
            if uuids is not None:
                raise
            loads = {}  # clearing everything also repairs a damaged load file
        cleared = [u for u in loads if uuids is None or u in uuids]
        _write_loads(driver_root, {u: x for u, x in loads.items() if u not in cleared})
        return cleared


def resets_from_doc(doc: Any, where: str) -> dict[DeviceUUID, int]:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("resets", {}), Mapping):
        raise DriverStateError(f"{where}: expected {{'resets': {{uuid: count}}}}")
    out = {}
    for uuid, n in doc.get("resets", {}).items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise DriverStateError(f"{where}: resets[{uuid!r}] must be a non-negative integer, got {n!r}")
        out[DeviceUUID(uuid)] = n
    return out


def read_resets(driver_root: Path) -> dict[DeviceUUID, int]:
    """Resets so far by device (or MIG device) UUID; no file means none yet."""
    path = driver_root / SIMULATED_RESETS
    doc = _read_json(path)
    return {} if doc is None else resets_from_doc(doc, str(path))


def count_resets(driver_root: Path, uuids: Sequence[DeviceUUID]) -> dict[DeviceUUID, int]:
    """Add one reset to each of `uuids` (under the state lock, so two resets at once both count);
    returns the new counts of those devices."""
    with _locked(driver_root):
        counts = read_resets(driver_root)
        for u in dict.fromkeys(uuids):
            counts[u] = counts.get(u, 0) + 1
        doc = {"resets": dict(sorted(counts.items()))}
        write_atomic(driver_root / SIMULATED_RESETS, json.dumps(doc, indent=2) + "\n")
        return {u: counts[u] for u in uuids}
