"""Which pods hold which device (pure): the kubelet's pod-resources answer mapped onto the inventory.

Why per pod, and why several: dcgm-exporter's users ask above all for `pod`/`namespace`/`container`
labels that are right with time-slicing (dcgm-exporter#277, #151), where several pods hold one
device. We do what dcgm-exporter does with `--kubernetes-virtual-gpus`: a device held by N
containers gets N series of each metric, one per container, each with that container's `pod`,
`namespace` and `container` and, for a time-sliced replica, `vgpu` (the replica number of the id
`<uuid>::<n>` the device plugin announced). Unlike dcgm-exporter, a device nobody holds keeps one
series without pod labels (dcgm-exporter drops it in that mode), so idle devices stay visible.
Sum or average by `UUID` to get per-device figures from per-pod series.

The device plugin announces ids as the device's UUID (MIG: the MIG device's UUID), its index ("3",
MIG "3:1") with `deviceIdStrategy: index`, and `<id>::<n>` for time-sliced replicas. UUIDs are
matched for any resource; an index only under the recipe's resource domain (`nvidia.com/...`), so
another vendor's device "0" is never taken for ours.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sro.devices.model import DeviceUUID, Inventory
from sro.host.podresources import Assignment

REPLICA_SEPARATOR = "::"  # as the device plugin announces time-sliced replicas


@dataclass(frozen=True, order=True)
class PodRef:
    namespace: str
    pod: str
    container: str
    vgpu: str = ""  # the time-sliced replica, when the id was one

    def labels(self) -> dict[str, str]:
        out = {"pod": self.pod, "namespace": self.namespace, "container": self.container}
        if self.vgpu:
            out["vgpu"] = self.vgpu
        return out


@dataclass(frozen=True)
class Attribution:
    by_unit: Mapping[DeviceUUID, tuple[PodRef, ...]] = field(default_factory=dict)  # GPU or MIG UUID
    allocated: Mapping[str, int] = field(default_factory=dict)  # recipe resource -> ids assigned
    unknown: tuple[str, ...] = ()  # ids of the recipe's resources that match no device here

    def holders(self) -> dict[DeviceUUID, int]:
        """Containers holding each GPU or MIG device (what the simulated readings follow)."""
        return {u: len({(p.namespace, p.pod, p.container) for p in refs}) for u, refs in self.by_unit.items()}


def in_domain(resource: str, domain: str) -> bool:
    """`nvidia.com/gpu`, `nvidia.com/gpu.shared`, `nvidia.com/mig-1g.10gb` are all in `nvidia.com`."""
    return resource.partition("/")[0] == domain


def resolve(device_id: str, inv: Inventory) -> tuple[DeviceUUID, str] | None:
    """(GPU or MIG UUID, replica number or "") of an announced id; None when it names no device."""
    base, _, replica = device_id.partition(REPLICA_SEPARATOR)
    for d in inv.devices:
        if base in (d.uuid, str(d.index)):
            return d.uuid, replica
        for m in d.mig_devices:
            if base in (m.uuid, f"{d.index}:{m.index}"):
                return m.uuid, replica
    return None


def attribute(assignments: Iterable[Assignment], inv: Inventory, domain: str) -> Attribution:
    by_unit: dict[DeviceUUID, set[PodRef]] = {}
    allocated: dict[str, int] = {}
    unknown: list[str] = []
    uuids = {d.uuid for d in inv.devices} | set(inv.mig_by_uuid())
    for a in assignments:
        ours = in_domain(a.resource, domain)
        if ours:
            allocated[a.resource] = allocated.get(a.resource, 0) + 1
        elif a.device_id.partition(REPLICA_SEPARATOR)[0] not in uuids:
            continue  # another vendor's device, named by its own id
        found = resolve(a.device_id, inv)
        if found is None:
            unknown.append(f"{a.resource}={a.device_id} ({a.namespace}/{a.pod})")
            continue
        unit, replica = found
        by_unit.setdefault(unit, set()).add(PodRef(a.namespace, a.pod, a.container, replica))
    return Attribution(
        by_unit={u: tuple(sorted(refs)) for u, refs in sorted(by_unit.items())},
        allocated=dict(sorted(allocated.items())),
        unknown=tuple(unknown),
    )
