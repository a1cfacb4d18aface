"""What a container gets for the device ids the kubelet allocated (pure).

Why pure: Allocate is where a wrong answer hands a workload the wrong GPU, so the decision is a
function of (requested ids, the resource plan, current health, recipe, config, driver files) that
unit tests hit directly; the gRPC servicer only translates. Every request is validated before
anything is returned: unknown ids, unhealthy devices, duplicates and over-large requests of a
time-sliced resource are refused with a message naming the id. Strategies (combinable):
`envvar` (the recipe's visible-devices variable), `device-specs` (device and control nodes),
`mounts` (driver libraries and binaries, read-only), `cdi-annotations` and `cdi-cri` (CDI names).
`device-specs` is always part of the answer: the device nodes the kubelet writes into the OCI spec
from it are the only allocation the runtime hook believes for an unprivileged container.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sro.api.recipes import Recipe
from sro.node.deviceplugin.announcing import Announced, ResourcePlan, Unit
from sro.node.deviceplugin.config import TRUSTED_STRATEGY, PluginConfig

ANNOTATION_NAME = "sro-device-plugin"


class AllocationError(ValueError):
    """A request the plugin refuses; `reason` is one of unknown, unhealthy, duplicate, too-many."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class MountSpec:
    container_path: str
    host_path: str
    read_only: bool = True


@dataclass(frozen=True)
class DeviceNodeSpec:
    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True)
class ContainerAllocation:
    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[MountSpec, ...] = ()
    devices: tuple[DeviceNodeSpec, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()


def validate(
    ids: Sequence[str], plan: ResourcePlan, healthy: Callable[[Unit], bool], config: PluginConfig
) -> list[Announced]:
    """The announced devices for `ids`, or AllocationError naming the first bad id."""
    if not ids:
        raise AllocationError("unknown", f"{plan.resource}: empty device list in the request")
    table = plan.by_id()
    seen: set[str] = set()
    out = []
    for i in ids:
        a = table.get(i)
        if a is None:
            raise AllocationError(
                "unknown", f"{plan.resource}: unknown device id {i!r} (not announced by this plugin)"
            )
        if i in seen:
            raise AllocationError("duplicate", f"{plan.resource}: device id {i!r} requested twice")
        if not healthy(a.unit):
            raise AllocationError(
                "unhealthy", f"{plan.resource}: device {i!r} is unhealthy and cannot be allocated"
            )
        seen.add(i)
        out.append(a)
    if plan.replicas > 1 and config.fail_requests_greater_than_one and len(ids) > 1:
        raise AllocationError(
            "too-many",
            f"{plan.resource}: time-sliced resource allows one replica per container "
            f"(failRequestsGreaterThanOne), got {len(ids)}",
        )
    return out


def unique_units(announced: Sequence[Announced]) -> list[Unit]:
    """The units behind the ids, each once (two replicas of one GPU give one GPU), in id order."""
    units: dict[str, Unit] = {}
    for a in announced:
        units.setdefault(a.unit.uuid, a.unit)
    return list(units.values())


def _annotation_key(prefix: str, resource: str) -> str:
    # CDI's annotation key form: <prefix><plugin>_<device>; the name part must be a DNS-ish label
    slug = re.sub(r"[^a-zA-Z0-9.-]+", "-", resource).strip("-")
    return f"{prefix}{ANNOTATION_NAME}_{slug}"[:253]


def container_allocation(
    announced: Sequence[Announced],
    plan: ResourcePlan,
    recipe: Recipe,
    config: PluginConfig,
    driver_files: Sequence[MountSpec] = (),
) -> ContainerAllocation:
    units = unique_units(announced)
    names = [u.uuid if config.id_strategy == "uuid" else u.index for u in units]
    strategies = set(config.list_strategies) | {TRUSTED_STRATEGY}  # the channel the hook believes
    envs: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if "envvar" in strategies:
        envs[recipe.visible_devices_env] = ",".join(names)
    devices: list[DeviceNodeSpec] = []
    if "device-specs" in strategies:
        paths: list[str] = []
        for u in units:
            paths.extend(p for p in u.device_nodes if p not in paths)
        paths.extend(p for p in recipe.control_nodes if p not in paths)
        devices = [DeviceNodeSpec(p, p) for p in paths]
    mounts = tuple(driver_files) if "mounts" in strategies else ()
    cdi_names = tuple(f"{recipe.cdi_kind}={n}" for n in names)
    if "cdi-annotations" in strategies:
        annotations[_annotation_key(config.cdi_annotation_prefix, plan.resource)] = ",".join(cdi_names)
    return ContainerAllocation(
        envs=envs,
        mounts=mounts,
        devices=tuple(devices),
        annotations=annotations,
        cdi_devices=cdi_names if "cdi-cri" in strategies else (),
    )
