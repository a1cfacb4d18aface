"""The device model every backend fills and every consumer reads.

Why one model: the device plugin, the exporter and discovery must not care whether a GPU came from
NVML or from the simulated driver. A backend returns an `Inventory` (frozen records: ids, UUIDs,
indices, PCI bus ids, product, memory, compute capability, NUMA node, NVLink peers, MIG devices)
and a stream of `HealthEvent`s; everything else is pure code over these records.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, NewType, Protocol

DeviceUUID = NewType("DeviceUUID", str)

# NVIDIA's device plugin treats these Xids as application errors, not device faults
# (k8s-device-plugin internal/rm/health.go).
DEFAULT_IGNORED_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})


@dataclass(frozen=True)
class MigDevice:
    """A MIG slice of a GPU: a device of its own for allocation, with its parent's health."""

    uuid: DeviceUUID
    parent_uuid: DeviceUUID
    index: int  # position among the parent's MIG devices
    profile: str  # e.g. "1g.5gb"
    memory_mib: int
    gi_id: int  # GPU instance id
    ci_id: int  # compute instance id
    device_node: str = ""  # host path of the MIG capability node, when there is one


@dataclass(frozen=True)
class Device:
    """One physical (or simulated) accelerator."""

    uuid: DeviceUUID
    index: int
    minor: int  # minor number of its device node
    device_node: str  # host path of its device node
    pci_bus_id: str  # "0000:3b:00.0"
    product: str
    memory_mib: int
    compute_capability: str  # "8.0"
    numa_node: int | None = None
    # peer uuid -> number of NVLink links joining the two (0 peers absent)
    nvlinks: Mapping[DeviceUUID, int] = field(default_factory=dict)
    mig_enabled: bool = False
    mig_devices: tuple[MigDevice, ...] = ()
    simulated: bool = False
    # more nodes of this one device (an FPGA's render node beside its management node), as
    # containers see them: a container given the device gets them too
    companion_nodes: tuple[str, ...] = ()
    # free-form facts a recipe's resource pools select on (a SmartNIC VF's `pf`), from the
    # simulated class config; empty for GPUs
    attributes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Inventory:
    """Every device of one backend on one node, in index order."""

    backend: str  # "nvml" | "simulated" | "devnodes"
    devices: tuple[Device, ...]
    driver_version: str = ""
    control_nodes: tuple[str, ...] = ()
    simulated: bool = False

    def by_uuid(self) -> dict[DeviceUUID, Device]:
        return {d.uuid: d for d in self.devices}

    def find(self, ref: str) -> Device | None:
        """The device named by UUID, index ("3") or PCI bus id; None if nothing matches."""
        for d in self.devices:
            if ref in (d.uuid, str(d.index)) or ref.lower() == d.pci_bus_id.lower():
                return d
        return None

    def mig_by_uuid(self) -> dict[DeviceUUID, MigDevice]:
        return {m.uuid: m for d in self.devices for m in d.mig_devices}


HealthKind = Literal["xid", "ecc-double-bit", "ecc-single-bit", "cleared", "lost"]


@dataclass(frozen=True)
class HealthEvent:
    """Something a backend saw about a device's health.

    `device` None means "every device" (NVIDIA's fail-safe when the event source itself breaks).
    `sticky` faults stay active until a `cleared` event (the simulated driver's fault state);
    non-sticky ones (an NVML Xid event) are points in time.
    """

    kind: HealthKind
    device: DeviceUUID | None
    at: float  # time.monotonic() of when it was seen
    xid: int | None = None
    sticky: bool = False
    message: str = ""


_NODE_FIELD = re.compile(r"\{(index|minor)(?:\+(\d+))?\}")


def node_path(pattern: str, index: int, minor: int | None = None) -> str:
    """`pattern` with its `{index}`, `{index+N}` and `{minor}` filled in (a recipe's device node
    or companion node pattern); `minor` defaults to the index."""

    def fill(m: re.Match[str]) -> str:
        base = index if m.group(1) == "index" else (index if minor is None else minor)
        return str(base + int(m.group(2) or 0))

    return _NODE_FIELD.sub(fill, pattern)


class EventsStop(threading.Event):
    """The health event source's stop flag, which also says when the source first went idle.

    A source looks at the devices, yields what is active now, then waits on its stop flag until the
    next look (the simulated and devnodes backends do): its first wait means the state at start is
    delivered, and a consumer's prime need not sleep its whole time (0.3 s on every exporter and
    device plugin start). A source that never waits on it (NVML blocks in its own event wait)
    leaves the prime to its timeout.
    """

    def __init__(self) -> None:
        super().__init__()
        self.idle = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.idle.set()
        return super().wait(timeout)


class Backend(Protocol):
    """What the device plugin (and the exporter) need from a source of devices."""

    name: str

    def inventory(self) -> Inventory: ...

    def inventory_token(self) -> object:
        """Changes when the inventory may have changed (the plugin then reads it again)."""
        ...

    def events(self, stop: threading.Event) -> Iterator[HealthEvent]:
        """Health events until `stop` is set; must notice `stop` within about a second."""
        ...

    def close(self) -> None: ...
