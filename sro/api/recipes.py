"""Recipes: what one kind of special hardware is, as data.

A recipe says how to recognise the hardware on a node (PCI vendor/class as NFD sees them), the
extended resource it becomes, which device backend inventories it, which env var and CDI kind
select devices, and what a container needs to use it (device nodes, control nodes, libraries and
binaries per capability, found under the driver root). The node agents (device plugin, hook, CDI
generator, discovery) and the operator all read the same recipe, so they cannot disagree.

Built in: `nvidia-gpu` (real NVIDIA GPUs through NVML) and `simulated-gpu` (the simulated driver,
labelled as simulated everywhere it shows). Custom recipes load from YAML (a ConfigMap in-cluster).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from sro.api import builtin_recipes as builtin
from sro.api import recipecheck
from sro.api.names import PREFIX
from sro.api.yamltext import load_yaml_file

# nvml: NVIDIA GPUs through NVML; simulated: sro's simulated driver (its device list under the driver
# root); devnodes: any hardware whose devices are the character nodes matching `device_node` in /dev.
Backend = Literal["nvml", "simulated", "devnodes"]
# What the exporter publishes for a recipe: full telemetry (the backend's readings) or, for hardware
# with no telemetry sro can read, device health and allocation only.
Metrics = Literal["telemetry", "health"]

SIMULATED_DRIVER_ROOT = builtin.SIMULATED_DRIVER_ROOT
SIMULATED_DEVICE_LIST = builtin.SIMULATED_DEVICE_LIST
SIMULATED_FAULTS = builtin.SIMULATED_FAULTS
SIMULATED_LIB_DIR = builtin.SIMULATED_LIB_DIR
SIMULATED_BIN_DIR = builtin.SIMULATED_BIN_DIR


class RecipeError(ValueError):
    """A recipe document is malformed; the message names the field to fix."""


@dataclass(frozen=True)
class Recipe:
    name: str
    resource: str  # extended resource name, e.g. nvidia.com/gpu
    backend: Backend
    pci_vendor: str  # 4 hex digits, as in NFD's pci-<vendor>.present
    pci_classes: tuple[str, ...]  # PCI class codes (2 or 4 hex digits) that count as this hardware
    visible_devices_env: str  # env var listing devices for runtimes/hooks
    capabilities_env: str  # env var selecting library groups
    default_capabilities: tuple[str, ...]
    cdi_kind: str  # vendor.com/class of CDI device names
    driver_root: str  # where the driver's files live on the host
    device_node: str  # per-device node path pattern; {minor} and {index} are filled in
    control_nodes: tuple[str, ...]  # nodes every container using the hardware needs
    libraries: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # capability -> sonames/globs
    binaries: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # capability -> file names
    simulated: bool = False
    # capability -> directories (relative to the driver root) mounted whole, e.g. vulkan ICD files
    directories: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # firmware files/globs (relative to the driver root) every container using the hardware gets
    firmware: tuple[str, ...] = ()
    # more nodes that belong to each device, patterns under /dev with `{index}` or `{index+N}` (an
    # FPGA card's render node beside its management node): a container given the device gets them too
    companion_nodes: tuple[str, ...] = ()
    # PCI device ids (4 hex digits) that narrow the vendor/class match (discovery, node selection)
    pci_devices: tuple[str, ...] = ()
    # argv lists run by validation in a pod given one device; argv[0] is one of `binaries`
    validation_commands: tuple[tuple[str, ...], ...] = ()
    metrics: Metrics = "telemetry"
    # resource name -> device attribute selector: devices matching a pool are announced under its
    # resource instead of `resource` (a SmartNIC's VF pools); empty = every device under `resource`
    pools: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def label_prefix(self) -> str:
        """Namespace of this hardware's own node labels: GFD's `nvidia.com/` for the built-in
        nvidia-gpu (what GPU Feature Discovery publishes), `sro.dev/<name>.` for every other recipe
        (a custom recipe's resource domain is not ours to label under)."""
        return "nvidia.com/" if self.name == builtin.NVIDIA_GPU["name"] else f"{PREFIX}{self.name}."

    @property
    def announced_resources(self) -> tuple[str, ...]:
        """Every extended resource the recipe's devices are announced under: its pools' when it has
        pools (a device in no pool stays under `resource`), and `resource` itself."""
        return (*sorted(self.pools), self.resource)

    @property
    def count_label(self) -> str:
        """The label discovery publishes with the number of devices (GFD's `gpu.count`)."""
        return self.label_prefix + ("gpu.count" if self.name == builtin.NVIDIA_GPU["name"] else "count")

    def default_node_selector_terms(self) -> tuple[dict[str, str], ...]:
        """Alternative label sets that select this hardware's nodes, as discovery publishes them with
        its default config (`pci-<class>_<vendor>.present`). Simulated hardware matches no PCI
        device: its nodes opt in with `sro.dev/<recipe>.enabled=true`. A custom recipe's nodes carry
        `sro.dev/<recipe>.present=true`, set by the NodeFeatureRule the operator applies for it from
        its PCI vendor/class/device match."""
        if self.simulated:
            return ({f"{PREFIX}{self.name}.enabled": "true"},)
        if self.name not in recipecheck.BUILTIN_NAMES:
            return ({f"{PREFIX}{self.name}.present": "true"},)
        return tuple(
            {f"feature.node.kubernetes.io/pci-{c}_{self.pci_vendor}.present": "true"}
            for c in self.pci_classes
        )


NVIDIA_GPU = Recipe(**builtin.NVIDIA_GPU)
SIMULATED_GPU = Recipe(**builtin.SIMULATED_GPU)

BUILTIN: Mapping[str, Recipe] = {r.name: r for r in (NVIDIA_GPU, SIMULATED_GPU)}

# `spec.driver.mode: simulated`: the built-in recipes sro's simulated driver can stand in for, with
# the personality `sro driver simulate --personality` gives it (simulated-gpu's driver is simulated
# in every mode, with the default personality).
SIMULATED_PERSONALITIES: Mapping[str, str] = {NVIDIA_GPU.name: "nvidia", SIMULATED_GPU.name: "simgpu"}


def on_simulated_driver(recipe: Recipe) -> Recipe:
    """`recipe` as it runs on sro's simulated driver: the same recipe, with the simulated driver's
    root as its driver root, so every agent (runtime, device plugin, exporter, validation, holder
    scan) finds the simulated devices, libraries and binaries where the driver puts them."""
    if recipe.simulated:
        return recipe
    if recipe == NVIDIA_GPU:
        return replace(recipe, driver_root=builtin.SIMULATED_NVIDIA_DRIVER_ROOT)
    raise RecipeError(
        f"recipe {recipe.name!r}: sro's simulated driver has no personality for it "
        f"(only {', '.join(sorted(SIMULATED_PERSONALITIES))})"
    )


def recipe_from_file(path: Path) -> Recipe:
    """A custom recipe from a YAML/JSON file; RecipeError naming the file and what is wrong, one line."""
    return load_yaml_file(path, recipe_from_dict, RecipeError)


def recipe_from_dict(doc: Mapping[str, Any]) -> Recipe:
    """A recipe from its YAML/JSON document (the layout of docs' recipe file); RecipeError naming the
    field to fix (`recipe 'x'.companionNodes[0]: ...`). The rules are `recipecheck`'s, the very ones
    the OCI hook applies to an installed recipe file, so both refuse the same documents."""
    plain = dict(doc) if isinstance(doc, Mapping) else doc
    name = plain.get("name") if isinstance(plain, dict) else None
    where = f"recipe {name!r}" if isinstance(name, str) and name else "recipe"
    try:
        fields = recipecheck.recipe_fields(plain)
    except recipecheck.Refused as e:
        raise RecipeError(f"{where}.{e.field}: {e.why}" if e.field else f"{where}: {e.why}") from e
    return Recipe(**fields)  # type: ignore[arg-type]  # recipe_fields checked every type


def recipe_to_dict(recipe: Recipe) -> dict[str, Any]:
    """The canonical document of `recipe`: every field, camelCase, lists not tuples, JSON-ready;
    `recipe_from_dict(recipe_to_dict(r)) == r`. The operator ships it to the node agents and
    `sro runtime install` writes it for the hook, so every agent reads the recipe that was admitted."""
    return {
        "name": recipe.name,
        "resource": recipe.resource,
        "backend": recipe.backend,
        "pciVendor": recipe.pci_vendor,
        "pciClasses": list(recipe.pci_classes),
        "pciDevices": list(recipe.pci_devices),
        "visibleDevicesEnv": recipe.visible_devices_env,
        "capabilitiesEnv": recipe.capabilities_env,
        "defaultCapabilities": list(recipe.default_capabilities),
        "cdiKind": recipe.cdi_kind,
        "driverRoot": recipe.driver_root,
        "deviceNode": recipe.device_node,
        "companionNodes": list(recipe.companion_nodes),
        "controlNodes": list(recipe.control_nodes),
        "libraries": {k: list(v) for k, v in recipe.libraries.items()},
        "binaries": {k: list(v) for k, v in recipe.binaries.items()},
        "directories": {k: list(v) for k, v in recipe.directories.items()},
        "firmware": list(recipe.firmware),
        "validation": {"commands": [list(argv) for argv in recipe.validation_commands]},
        "metrics": recipe.metrics,
        "pools": {k: dict(v) for k, v in recipe.pools.items()},
    }
