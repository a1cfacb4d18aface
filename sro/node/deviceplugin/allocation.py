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

With `cdi-annotations` the runtime (containerd >= 1.7, CRI-O) gives the container what the node's
live CDI spec lists for the names the annotation carries (`cdi.k8s.io/<plugin>_<resource>:
<kind>=<name>[,...]`, the format of CDI's own `AnnotationKey`/`AnnotationValue`): the nodes again
(a CDI device node replaces the kubelet's of the same path, so the container still has exactly its
allocated nodes), the control nodes, libraries and binaries. A whole GPU is named by the number in
its device node's name (`/dev/nvidia3` -> `3`: what the runtime state's spec names it by, from the
nodes it finds), a MIG device by its UUID. The kubelet puts only the plugin's annotations on the
container; a pod's own `cdi.k8s.io/*` annotations stay on the pod sandbox, where containerd does not
look for CDI names (tests/e2e/test_cdi_containerd.py).
"""

from __future__ import annotations

import hashlib
import os
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


CDI_KEY_NAME_MAX = 63  # CDI's AnnotationKey: <plugin>_<device id> at most this long
_KEY_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?")


def annotation_key(prefix: str, resource: str) -> str:
    """CDI's annotation key for this plugin's allocation of `resource`: `<prefix><plugin>_<id>`,
    the id the resource name with `/` as `_` (as AnnotationKey does) and anything else CDI refuses
    as `-`; one too long keeps a hash of the whole instead of its end. One key per resource: the
    kubelet merges every plugin's annotations into one container's."""
    device_id = re.sub(r"[^A-Za-z0-9_.-]+", "-", resource.replace("/", "_")).strip("-_.")
    name = f"{ANNOTATION_NAME}_{device_id}"
    if len(name) > CDI_KEY_NAME_MAX:
        digest = hashlib.sha256(resource.encode()).hexdigest()[:10]
        name = f"{name[: CDI_KEY_NAME_MAX - 11].rstrip('_.-')}-{digest}"
    assert _KEY_NAME.fullmatch(name), name
    return prefix + name


def _number_in(node: str, pattern: str) -> str | None:
    """The decimal number in `node`'s file name where `pattern` has its {index} or {minor}."""
    prefix, sep, suffix = os.path.basename(pattern).replace("{minor}", "{index}").partition("{index}")
    name = os.path.basename(node)
    if not sep or not name.startswith(prefix) or not name.endswith(suffix):
        return None
    digits = name[len(prefix) : len(name) - len(suffix)]
    return digits if digits.isascii() and digits.isdigit() else None


def cdi_device_name(unit: Unit, recipe: Recipe) -> str:
    """The name the node's live CDI spec gives `unit`: a MIG device's UUID, a GPU's node number
    (its index when its node is not named by the recipe's pattern)."""
    if unit.parent != unit.uuid:
        return str(unit.uuid)
    for node in unit.device_nodes:
        number = _number_in(node, recipe.device_node)
        if number is not None:
            return str(int(number))
    return unit.index


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
    cdi_names = tuple(f"{recipe.cdi_kind}={cdi_device_name(u, recipe)}" for u in units)
    if "cdi-annotations" in strategies:
        annotations[annotation_key(config.cdi_annotation_prefix, plan.resource)] = ",".join(cdi_names)
    return ContainerAllocation(
        envs=envs,
        mounts=mounts,
        devices=tuple(devices),
        annotations=annotations,
        cdi_devices=cdi_names if "cdi-cri" in strategies else (),
    )
