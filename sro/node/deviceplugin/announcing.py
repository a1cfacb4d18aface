"""Which ids the plugin announces under which resource (pure): MIG strategy and time-slicing.

Why separate: the kubelet only knows announced ids; everything the plugin does later (health,
preferred allocation, Allocate) maps an announced id back to a unit (a GPU or a MIG device) and its
physical parent. Building that table once, from the inventory and the config, keeps the gRPC
methods to lookups. MIG strategies follow NVIDIA's: `none` announces whole GPUs, `single` announces
the MIG devices under the base resource (all GPUs must be MIG-enabled with one profile), `mixed`
announces one resource per MIG profile next to the whole non-MIG GPUs. Time-slicing replicates a
unit `replicas` times as `<id>::<n>`, per device, optionally renamed (`.shared`). A recipe's pools
(a SmartNIC's VFs per physical function) announce a device whose attributes match a pool's
selector under the pool's resource, each its own kubelet registration, the others under the base.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sro.devices.model import Device, DeviceUUID, Inventory, MigDevice
from sro.node.deviceplugin.config import ConfigError, PluginConfig, TimeSlice

REPLICA_SEPARATOR = "::"


@dataclass(frozen=True)
class Unit:
    """What one container may get: a whole GPU or a MIG device."""

    uuid: DeviceUUID
    parent: DeviceUUID  # physical GPU (health follows it)
    index: str  # "3" for a GPU, "3:1" for MIG device 1 of GPU 3
    numa_node: int | None
    device_nodes: tuple[str, ...]
    nvlinks: tuple[tuple[DeviceUUID, int], ...] = ()
    mig_profile: str = ""


@dataclass(frozen=True)
class Announced:
    id: str
    unit: Unit
    replica: int = 0  # 0 when not shared, else 1..replicas


@dataclass(frozen=True)
class ResourcePlan:
    resource: str
    devices: tuple[Announced, ...]
    replicas: int = 1  # > 1 when the resource is time-sliced

    def by_id(self) -> dict[str, Announced]:
        return {a.id: a for a in self.devices}


def _gpu_unit(d: Device) -> Unit:
    # a device's companion nodes (an FPGA's render node) go with it wherever its node goes
    nodes = (d.device_node, *(c for c in d.companion_nodes if c != d.device_node))
    return Unit(d.uuid, d.uuid, str(d.index), d.numa_node, nodes, tuple(sorted(d.nvlinks.items())))


def _mig_unit(d: Device, m: MigDevice) -> Unit:
    nodes = (d.device_node, m.device_node) if m.device_node else (d.device_node,)
    return Unit(m.uuid, d.uuid, f"{d.index}:{m.index}", d.numa_node, nodes, (), m.profile)


def mig_resource(base: str, profile: str) -> str:
    domain, name = base.split("/")
    # nvidia.com/gpu -> nvidia.com/mig-1g.10gb (NVIDIA's names); others keep their own name
    return f"{domain}/mig-{profile}" if name == "gpu" else f"{base}-mig-{profile}"


def pool_of(device: Device, pools: Mapping[str, Mapping[str, str]]) -> str | None:
    """The first pool (by resource name) whose selector `device`'s attributes match (every key
    equal), or None: the device stays under the recipe's own resource."""
    for resource in sorted(pools):
        if all(device.attributes.get(k) == v for k, v in pools[resource].items()):
            return resource
    return None


def _pooled(inv: Inventory, config: PluginConfig, out: dict[str, list[Unit]]) -> dict[str, list[Unit]]:
    """`out` with the base resource's units moved to the pools their devices match."""
    if not config.pools:
        return out
    devices = inv.by_uuid()
    base = config.resource_name
    pooled: dict[str, list[Unit]] = {base: [], **{r: [] for r in sorted(config.pools)}}
    for resource, us in out.items():
        for u in us:
            pool = pool_of(devices[u.parent], config.pools) if resource == base else None
            pooled.setdefault(pool or resource, []).append(u)
    return pooled


def units(inv: Inventory, config: PluginConfig) -> dict[str, list[Unit]]:
    """Units per base resource name, before time-slicing (a recipe's pools split the base one)."""
    return _pooled(inv, config, _units(inv, config))


def _units(inv: Inventory, config: PluginConfig) -> dict[str, list[Unit]]:
    base = config.resource_name
    if config.mig_strategy == "none":
        return {base: [_gpu_unit(d) for d in inv.devices]}
    mig_gpus = [d for d in inv.devices if d.mig_enabled]
    if config.mig_strategy == "single":
        if not mig_gpus:
            return {base: [_gpu_unit(d) for d in inv.devices]}
        if len(mig_gpus) != len(inv.devices):
            plain = [d.index for d in inv.devices if not d.mig_enabled]
            raise ConfigError(
                f"flags.migStrategy single: GPUs {plain} have MIG disabled while others have it enabled"
            )
        profiles = {m.profile for d in mig_gpus for m in d.mig_devices}
        if len(profiles) > 1:
            raise ConfigError(
                f"flags.migStrategy single: needs one MIG profile on the node, found {sorted(profiles)}"
            )
        return {base: [_mig_unit(d, m) for d in mig_gpus for m in d.mig_devices]}
    out: dict[str, list[Unit]] = {base: [_gpu_unit(d) for d in inv.devices if not d.mig_enabled]}
    for d in mig_gpus:
        for m in d.mig_devices:
            out.setdefault(mig_resource(base, m.profile), []).append(_mig_unit(d, m))
    return out


def _selects(rule: TimeSlice, unit: Unit, inv: Inventory) -> bool:
    if rule.devices is None:
        return True
    for ref in rule.devices:
        if ref in (unit.uuid, unit.index):
            return True
        d = inv.find(ref)
        if d is not None and d.uuid == unit.parent:
            return True
    return False


def _check_refs(rules: Iterable[TimeSlice], inv: Inventory, known: set[str]) -> None:
    for i, rule in enumerate(rules):
        for ref in rule.devices or ():
            if inv.find(ref) is None and ref not in known:
                raise ConfigError(
                    f"sharing.timeSlicing.resources[{i}].devices: no device {ref!r} on this node"
                )


def plan(inv: Inventory, config: PluginConfig) -> tuple[ResourcePlan, ...]:
    """Every resource this node announces, with its ids."""
    base_units = units(inv, config)
    known = {u.uuid for us in base_units.values() for u in us} | {
        u.index for us in base_units.values() for u in us
    }
    _check_refs(config.time_slicing, inv, known)
    for i, rule in enumerate(config.time_slicing):
        if rule.resource not in base_units:
            raise ConfigError(
                f"sharing.timeSlicing.resources[{i}].name: {rule.resource!r} is not announced here "
                f"(announced: {sorted(base_units)})"
            )
    grouped: dict[tuple[str, int], list[Announced]] = {}
    order: list[tuple[str, int]] = []
    for resource, us in base_units.items():
        order.append((resource, 1))
        grouped.setdefault((resource, 1), [])
        for u in us:
            rules = [r for r in config.time_slicing if r.resource == resource and _selects(r, u, inv)]
            if len(rules) > 1:
                raise ConfigError(
                    f"sharing.timeSlicing.resources: device {u.index} ({u.uuid}) is selected by more than one rule"
                )
            if not rules:
                grouped[(resource, 1)].append(Announced(u.uuid, u))
                continue
            rule = rules[0]
            name = rule.rename or (f"{resource}.shared" if config.rename_by_default else resource)
            key = (name, rule.replicas)
            if key not in grouped:
                order.append(key)
                grouped[key] = []
            grouped[key].extend(
                Announced(f"{u.uuid}{REPLICA_SEPARATOR}{n}", u, n) for n in range(1, rule.replicas + 1)
            )
    merged: dict[str, list[Announced]] = {}
    replicas: dict[str, int] = {}
    for name, n in order:
        merged.setdefault(name, []).extend(grouped[(name, n)])
        replicas[name] = max(replicas.get(name, 1), n)
    # A resource with no devices is not registered; the base one is while nothing else is (so the
    # plugin serves, is ready and announces zero), or always where the recipe has no pools.
    anything = any(merged.values())
    return tuple(
        ResourcePlan(name, tuple(devs), replicas[name])
        for name, devs in merged.items()
        if devs or (name == config.resource_name and (not config.pools or not anything))
    )
