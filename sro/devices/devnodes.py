"""The `devnodes` device backend: real hardware that sro has no telemetry library for.

Why: an FPGA, a SmartNIC or an inference card is usable by a container once it gets the card's
character nodes (and the vendor's libraries, which the runtime injects from the recipe). The kernel
driver already says which cards there are: one node per card, named by the recipe's `deviceNode`
pattern (`/dev/xclmgmt{index}`). So the inventory is those nodes (the number in the name is the
index, the UUID `<recipe>-<index>`, the companions that exist beside them), and health is what the
node says: a card whose node (or a companion) disappears (driver unbound, card hot-removed) is
unhealthy until it is back. A stat() of a handful of nodes every half second keeps a removal to
event delay under the second the device plugin promises, with no inotify and nothing to leak.

A card seen once stays in the inventory while the process lives, so a node that goes away shows as
an unhealthy device, never as a device that silently stops being announced.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from sro.api.recipes import Recipe
from sro.devices.model import Device, DeviceUUID, HealthEvent, Inventory, node_path

POLL_INTERVAL = 0.5
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def _host_path(dev_root: Path, node: str) -> Path:
    """`node` as containers see it (/dev/x) under `dev_root`, where this process sees /dev."""
    return dev_root / Path(node).relative_to("/dev")


def node_index(name: str, pattern: str) -> int | None:
    """The number in file name `name` where the file-name part of `pattern` has `{index}` or
    `{minor}`; None when `name` is not such a node (pure)."""
    prefix, sep, suffix = os.path.basename(pattern).replace("{minor}", "{index}").partition("{index}")
    if not sep or len(name) <= len(prefix) + len(suffix):
        return None
    if not name.startswith(prefix) or not name.endswith(suffix):
        return None
    digits = name[len(prefix) : len(name) - len(suffix)]
    if not (digits.isascii() and digits.isdigit()) or (len(digits) > 1 and digits[0] == "0"):
        return None
    return int(digits)


def _char_rdev(path: Path) -> int | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_rdev if stat.S_ISCHR(st.st_mode) else None


def pci_bus_id(sys_root: Path, rdev: int) -> str:
    """The PCI address sysfs gives the char device `rdev` (its `device` link), or ""."""
    try:
        target = os.readlink(sys_root / "dev" / "char" / f"{os.major(rdev)}:{os.minor(rdev)}" / "device")
    except OSError:
        return ""
    name = os.path.basename(target)
    return name if _PCI_ADDRESS.fullmatch(name) else ""


class DevnodesBackend:
    name = "devnodes"

    def __init__(
        self,
        recipe: Recipe,
        dev_root: Path = Path("/dev"),
        sys_root: Path = Path("/sys"),
        poll_interval: float = POLL_INTERVAL,
    ) -> None:
        self.recipe = recipe
        self.dev_root = dev_root
        self.sys_root = sys_root
        self.poll_interval = poll_interval
        self._known: dict[int, Device] = {}
        self._lock = threading.Lock()

    def _scan(self) -> dict[int, tuple[str, int]]:
        """Index -> (file name, rdev) of the char nodes matching the recipe's device node pattern."""
        directory = _host_path(self.dev_root, os.path.dirname(self.recipe.device_node))
        found: dict[int, tuple[str, int]] = {}
        try:
            names = os.listdir(directory)
        except OSError:
            return found
        for name in names:
            index = node_index(name, self.recipe.device_node)
            if index is None:
                continue
            rdev = _char_rdev(directory / name)
            if rdev is not None:
                found[index] = (name, rdev)
        return found

    def _device(self, index: int, name: str, rdev: int) -> Device:
        node = os.path.join(os.path.dirname(self.recipe.device_node), name)
        companions = tuple(
            c
            for c in (node_path(p, index) for p in self.recipe.companion_nodes)
            if _char_rdev(_host_path(self.dev_root, c)) is not None
        )
        return Device(
            uuid=DeviceUUID(f"{self.recipe.name}-{index}"),
            index=index,
            minor=os.minor(rdev),
            device_node=node,
            pci_bus_id=pci_bus_id(self.sys_root, rdev),
            product=self.recipe.name,
            memory_mib=0,
            compute_capability="",
            companion_nodes=companions,
        )

    def _update(self) -> None:
        with self._lock:
            for index, (name, rdev) in self._scan().items():
                if index not in self._known:
                    self._known[index] = self._device(index, name, rdev)

    def inventory(self) -> Inventory:
        """Every card seen since the backend opened (one whose node went away stays, unhealthy)."""
        self._update()
        with self._lock:
            devices = tuple(self._known[i] for i in sorted(self._known))
        controls = tuple(c for c in self.recipe.control_nodes if _host_path(self.dev_root, c).exists())
        return Inventory(backend=self.name, devices=devices, control_nodes=controls)

    def inventory_token(self) -> object:
        """Changes when a new card appears (one going away is a health event instead)."""
        self._update()
        with self._lock:
            return tuple(sorted(self._known))

    def missing(self, device: Device) -> list[str]:
        """The nodes of `device` that are not char devices under the dev root now."""
        return [
            n
            for n in (device.device_node, *device.companion_nodes)
            if _char_rdev(_host_path(self.dev_root, n)) is None
        ]

    def events(self, stop: threading.Event) -> Iterator[HealthEvent]:
        lost: set[DeviceUUID] = set()
        while not stop.is_set():
            self._update()
            with self._lock:
                devices = list(self._known.values())
            for d in devices:
                gone = self.missing(d)
                if gone and d.uuid not in lost:
                    lost.add(d.uuid)
                    message = f"device node {', '.join(gone)} disappeared"
                    yield HealthEvent("lost", d.uuid, time.monotonic(), sticky=True, message=message)
                elif not gone and d.uuid in lost:
                    lost.discard(d.uuid)
                    yield HealthEvent("cleared", d.uuid, time.monotonic(), message="device node back")
            stop.wait(self.poll_interval)

    def close(self) -> None:
        pass
