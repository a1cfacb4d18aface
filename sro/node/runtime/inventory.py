"""What a recipe's driver offers on this node, and what one container gets out of it.

Why two records: `DriverInventory` is what was found on the host (device nodes with their numbers,
library/binary/directory/firmware files, by capability group) and is produced by `driverfiles`;
`InjectionPlan` is the pure answer to "this container asked for X" — the exact device nodes,
bind mounts and linker folders the hook injects, the wrapper writes into the OCI spec, or a CDI spec
lists. Everything here is plain data, so the decision is unit-tested without a single file.
"""

from __future__ import annotations

from sro.node.runtime.leanpath import dirname

TYPE_CHECKING = False  # no typing/dataclasses import at run time: the hook imports this module
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from dataclasses import dataclass, field
    from typing import Literal, TypeVar

    from sro.node.runtime.activation import Request

    T = TypeVar("T")
else:
    from sro.node.runtime.records import dataclass, field


class UnknownDeviceError(ValueError):
    """A container asked for a device id the driver does not have."""


@dataclass(frozen=True)
class DeviceNode:
    """A character device: where it is on the host and where the container sees it."""

    path: str  # container path, e.g. /dev/sro-simgpu0
    host_path: str  # host path (under the dev root; equal to `path` on a real node)
    major: int
    minor: int
    file_mode: int = 0o666
    device_id: str = ""  # the id users name it by ("0"); "" for control nodes
    companion: bool = False  # one more node of device `device_id` (its primary node comes first)

    @property
    def cgroup_rule(self) -> str:
        return f"c {self.major}:{self.minor} rwm"


@dataclass(frozen=True)
class FileMount:
    """A read-only bind mount of a driver file or directory into the container."""

    host_path: str
    container_path: str
    kind: Literal["file", "dir"] = "file"


@dataclass(frozen=True)
class DriverInventory:
    """One recipe's files on one node, found under its driver root and dev root."""

    recipe: str
    devices: tuple[DeviceNode, ...]  # each device's primary node, then its companions
    control_nodes: tuple[DeviceNode, ...]
    libraries: Mapping[str, tuple[FileMount, ...]] = field(default_factory=dict)
    binaries: Mapping[str, tuple[FileMount, ...]] = field(default_factory=dict)
    directories: Mapping[str, tuple[FileMount, ...]] = field(default_factory=dict)
    firmware: tuple[FileMount, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)  # other names (UUIDs) -> device id

    def device(self, ref: str) -> DeviceNode:
        wanted = self.aliases.get(ref, ref)
        for d in self.devices:
            if d.device_id == wanted:
                return d
        have = ", ".join(dict.fromkeys(d.device_id for d in self.devices)) or "none"
        raise UnknownDeviceError(f"unknown device id {ref!r} for {self.recipe} (this node has: {have})")

    def nodes_of(self, ref: str) -> tuple[DeviceNode, ...]:
        """Every node of device `ref`: its primary node, then its companions."""
        wanted = self.device(ref).device_id
        return tuple(d for d in self.devices if d.device_id == wanted)

    def by_device(self) -> dict[str, tuple[DeviceNode, ...]]:
        """Device id -> its nodes (primary first), in the order the devices were found."""
        out: dict[str, tuple[DeviceNode, ...]] = {}
        for d in self.devices:
            out[d.device_id] = (*out.get(d.device_id, ()), d)
        return out


@dataclass(frozen=True)
class InjectionPlan:
    """Exactly what goes into one container."""

    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[FileMount, ...] = ()
    ld_folders: tuple[str, ...] = ()  # container folders holding injected libraries

    @property
    def empty(self) -> bool:
        return not (self.device_nodes or self.mounts)

    @property
    def cgroup_rules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d.cgroup_rule for d in self.device_nodes))

    def merge(self, other: InjectionPlan) -> InjectionPlan:
        return InjectionPlan(
            device_nodes=_unique(self.device_nodes + other.device_nodes, key=lambda d: d.path),
            mounts=_unique(self.mounts + other.mounts, key=lambda m: m.container_path),
            ld_folders=tuple(dict.fromkeys(self.ld_folders + other.ld_folders)),
        )


def _unique(items: Iterable[T], key: Callable[[T], str]) -> tuple[T, ...]:
    seen: dict[str, T] = {}
    for item in items:
        seen.setdefault(key(item), item)
    return tuple(seen.values())


def _groups(groups: Mapping[str, tuple[FileMount, ...]], caps: Iterable[str]) -> tuple[FileMount, ...]:
    return tuple(m for cap in caps for m in groups.get(cap, ()))


def plan(request: Request, inventory: DriverInventory) -> InjectionPlan:
    """The devices, control nodes and capability files `request` gets; raises UnknownDeviceError."""
    if request.all_devices:
        devices = inventory.devices
    else:
        devices = tuple(n for ref in request.devices for n in inventory.nodes_of(ref))
    libraries = _groups(inventory.libraries, request.capabilities)
    mounts = (
        libraries
        + _groups(inventory.binaries, request.capabilities)
        + _groups(inventory.directories, request.capabilities)
        + inventory.firmware
    )
    folders = tuple(dict.fromkeys(dirname(m.container_path) for m in libraries))
    empty = InjectionPlan()
    return empty.merge(
        InjectionPlan(device_nodes=devices + inventory.control_nodes, mounts=mounts, ld_folders=folders)
    )


def plan_all(requests: Iterable[Request], inventories: Mapping[str, DriverInventory]) -> InjectionPlan:
    """One plan for every recipe a container asked for."""
    out = InjectionPlan()
    for req in requests:
        inv = inventories.get(req.recipe.name)
        if inv is None:
            raise UnknownDeviceError(f"no driver inventory for recipe {req.recipe.name!r} on this node")
        out = out.merge(plan(req, inv))
    return out
