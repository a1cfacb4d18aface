"""The CDI names a node's devices answer to beyond their node number: GPU UUIDs and MIG devices.

Why: the device nodes found under /dev (`driverfiles`) give every GPU one name, the number in its
node's name (`/dev/nvidia3` -> "3"), and that is the name the device plugin's `cdi-annotations`
strategy uses for a whole GPU (NVML's minor number and the simulated driver's device list agree on
it). A MIG device has no node of its own that says which GPU it belongs to, so it is named by its
UUID, which only the driver's device list knows (`devices.json` of the simulated driver, in both
personalities). GPU UUIDs become extra names too, for people who ask for one by hand
(`podman run --device sro.dev/simulated-gpu=GPU-...`). A real NVIDIA driver has no device list:
its GPUs keep their node numbers, UUIDs are read from /proc/driver/nvidia/gpus/*/information where
the installer can see it, and MIG devices are not listed (the note says so).

Pure but for `read_device_list` and `read_proc_uuids`, which read the host under an injected root.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sro.devices.driverstate import DriverStateError, read_inventory
from sro.devices.model import Inventory
from sro.node.runtime.inventory import DeviceNode, DriverInventory, FileMount

PROC_GPUS = "proc/driver/nvidia/gpus"


@dataclass(frozen=True)
class ExtraDevice:
    """A CDI device beyond the per-node ones: its name and the nodes it gives."""

    name: str
    nodes: tuple[DeviceNode, ...]


def read_device_list(driver_root: str) -> Inventory | None:
    """The driver's device list (None when it has none, or an unreadable one: then the GPUs keep
    only their node numbers, which is never wrong, only shorter)."""
    try:
        return read_inventory(Path(driver_root))
    except (DriverStateError, OSError):
        return None


def parse_proc_information(text: str) -> tuple[str, int] | None:
    """(uuid, minor) from one /proc/driver/nvidia/gpus/<bus>/information file, else None."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    uuid, minor = fields.get("GPU UUID", ""), fields.get("Device Minor", "")
    if not uuid.startswith("GPU-") or not minor.isdigit():
        return None
    return uuid, int(minor)


def read_proc_uuids(host_root: str) -> dict[str, int]:
    """UUID -> minor of every GPU a real NVIDIA driver lists under the host's /proc."""
    base = os.path.join(host_root, PROC_GPUS)
    out: dict[str, int] = {}
    try:
        buses = sorted(os.listdir(base))
    except OSError:
        return out
    for bus in buses:
        try:
            with open(os.path.join(base, bus, "information")) as f:
                found = parse_proc_information(f.read(1 << 16))
        except OSError:
            continue
        if found is not None:
            out[found[0]] = found[1]
    return out


def _node_for(path: str, inv: DriverInventory) -> DeviceNode | None:
    return next((d for d in inv.devices if d.host_path == path and not d.companion), None)


def _stat_node(host_root: str, path: str, container_path: str) -> DeviceNode | None:
    """A MIG capability node as the host names it (stat through `host_root`)."""
    try:
        st = os.stat(os.path.join(host_root, path.lstrip("/")))
    except OSError:
        return None
    if not stat.S_ISCHR(st.st_mode):
        return None
    return DeviceNode(
        container_path, path, os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode)
    )


def _container_path(host_path: str, dev_root: str) -> str:
    """`<dev_root>/x` is `/dev/x` in the container (the same rule as `driverfiles.dev_path`)."""
    root = dev_root.rstrip("/") or "/"
    if root != "/dev" and (host_path == root or host_path.startswith(root + "/")):
        return "/dev" + host_path[len(root) :]
    return host_path


def extra_devices(
    inv: DriverInventory,
    listed: Inventory | None,
    proc_uuids: Mapping[str, int],
    host_root: str = "/",
    dev_root: str = "/dev",
) -> tuple[tuple[ExtraDevice, ...], tuple[str, ...]]:
    """(extra devices, notes): a GPU's UUID as another name for its node, and each MIG device by
    UUID with its parent's node and its own capability node; notes say what could not be listed."""
    out: list[ExtraDevice] = []
    notes: list[str] = []
    taken = {d.device_id for d in inv.devices}

    def add(name: str, nodes: Sequence[DeviceNode]) -> None:
        if name and name not in taken:
            taken.add(name)
            out.append(ExtraDevice(name, tuple(nodes)))

    if listed is not None:
        for gpu in listed.devices:
            node = _node_for(gpu.device_node, inv)
            if node is None:
                notes.append(f"GPU {gpu.index} ({gpu.uuid}): no device node {gpu.device_node}")
                continue
            add(gpu.uuid, inv.nodes_of(node.device_id))  # with its companion nodes, if any
            for mig in gpu.mig_devices:
                nodes = [node]
                if mig.device_node:
                    cap = _stat_node(host_root, mig.device_node, _container_path(mig.device_node, dev_root))
                    if cap is None:
                        notes.append(f"MIG {mig.uuid}: no capability node {mig.device_node}")
                        continue
                    nodes.append(cap)
                add(mig.uuid, nodes)
    else:
        by_minor = {d.minor: d for d in inv.devices if not d.companion}
        for uuid, minor in sorted(proc_uuids.items(), key=lambda kv: kv[1]):
            if minor in by_minor:
                add(uuid, (by_minor[minor],))
        if inv.devices and not proc_uuids:
            notes.append("no device list: GPUs are named by their node number only, MIG devices not at all")
    return tuple(out), tuple(notes)


def library_links(inv: DriverInventory, driver_root_seen: str) -> tuple[FileMount, ...]:
    """Every other name a mounted library has in its host folder (a symlink to it: its soname,
    `libnvidia-ml.so.1 -> libnvidia-ml.so.550.90.07`), as a mount of the same file under that name.

    Why: without ldconfig in the container (the live spec runs no hook) nothing makes the soname
    links, and the loader and dlopen look a library up by its soname. `driver_root_seen` is the
    driver root as this process sees it; container paths are relative to it."""
    out: list[FileMount] = []
    for mounts in inv.libraries.values():
        for m in mounts:
            folder = os.path.join(driver_root_seen, os.path.dirname(m.container_path).lstrip("/"))
            target = os.path.realpath(os.path.join(folder, os.path.basename(m.container_path)))
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            for name in names:
                path = os.path.join(folder, name)
                own = name == os.path.basename(m.container_path)
                if not own and os.path.islink(path) and os.path.realpath(path) == target:
                    out.append(FileMount(m.host_path, os.path.join(os.path.dirname(m.container_path), name)))
    return tuple(out)
