"""A simulated device class: a custom simulated recipe plus a small YAML file in, devices out (pure).

Why: the simulated GPU lets people try scheduling, quotas and failure handling with no GPU; a
custom recipe (an FPGA, a SmartNIC's VFs) deserves the same. The recipe says what the hardware's
nodes, libraries and binaries are called; this class config says how many devices to make, what
they are (product, memory, attributes that resource pools select on) and which of the recipe's
library and binary names the simulated driver should provide. Every product ends " (simulated)",
so nobody mistakes one for hardware. Errors name the field to fix.

    driverVersion: "2.16.204-sim"
    class: fpga                        # free text, shown by the binaries and in devices.json
    count: 2
    defaults: {product: "Example U250 FPGA (simulated)", memoryMiB: 65536}
    devices: [{index: 0, attributes: {pf: "0"}}, {index: 1, attributes: {pf: "1"}}]
    attributes: {vendor: example}      # every device
    libraries: [libxrt_core.so.2]      # made under <root>/lib; each matches one of the recipe's globs
    binaries: [xbutil]                 # made under <root>/bin; each is one of the recipe's binaries
"""

from __future__ import annotations

import fnmatch
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sro.api.recipes import Recipe
from sro.devices.model import Device, DeviceUUID, Inventory, node_path
from sro.devices.simconfig import MAX_DEVICES, SimConfigError, driver_version

SIMULATED_SUFFIX = " (simulated)"
_NAMESPACE = uuid.UUID("0b7d3c5e-2f6a-4d0e-8a51-3c9e6f1d2b47")  # fixed: same file -> same UUIDs
KNOWN = frozenset(
    {"driverVersion", "class", "count", "defaults", "devices", "attributes", "libraries", "binaries", "seed"}
)
DEVICE_KNOWN = frozenset({"index", "product", "memoryMiB", "pciBusId", "numaNode", "uuid", "attributes"})
# an attribute is a selector key and value of a resource pool, and goes into a shell script
_ATTR_KEY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_ATTR_VALUE = re.compile(r"^[A-Za-z0-9._:/-]{0,63}$")
_FILE_NAME = re.compile(r"^[A-Za-z0-9._+-]{1,128}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SimClassError(SimConfigError):
    """The class config does not fit the recipe, or is malformed; the message names the field."""


@dataclass(frozen=True)
class SimClass:
    """What the simulated driver makes for one device class."""

    inventory: Inventory  # devices with their nodes, companions and attributes; the recipe's control nodes
    device_class: str
    libraries: tuple[str, ...]  # file names under <root>/lib
    binaries: tuple[str, ...]  # file names under <root>/bin


def _int(value: Any, where: str, lo: int = 0, hi: int = 1 << 31) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise SimClassError(f"{where}: expected an integer in [{lo}, {hi}], got {value!r}")
    return value


def _text(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float) or str(value).strip() == "":
        raise SimClassError(f"{where}: expected a non-empty string, got {value!r}")
    text = str(value)
    if any(ord(c) < 32 or c == "\x7f" for c in text) or len(text) > 200:
        raise SimClassError(f"{where}: expected one line of at most 200 characters, got {text!r}")
    return text


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SimClassError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _attributes(value: Any, where: str) -> dict[str, str]:
    out = {}
    for key, raw in _mapping(value, where).items():
        if not isinstance(key, str) or not _ATTR_KEY.fullmatch(key):
            raise SimClassError(f"{where}: {key!r} is not an attribute name (letters, digits, . _ -)")
        if isinstance(raw, bool) or not isinstance(raw, str | int):
            raise SimClassError(f"{where}.{key}: expected a string, got {raw!r}")
        text = str(raw)
        if not _ATTR_VALUE.fullmatch(text):
            raise SimClassError(
                f"{where}.{key}: {text!r} is not an attribute value (letters, digits, . _ : / -)"
            )
        out[key] = text
    return out


def _names(doc: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise SimClassError(f"{key}: expected a list of file names, got {type(value).__name__}")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not _FILE_NAME.fullmatch(name) or name in (".", ".."):
            raise SimClassError(f"{key}[{i}]: {name!r} is not a file name (letters, digits, . _ + -)")
    if len(set(value)) != len(value):
        raise SimClassError(f"{key}: names must be unique, got {value!r}")
    return tuple(value)


def product_name(value: Any, where: str) -> str:
    """The product as shown everywhere: ends in " (simulated)" (added when the config left it out)."""
    text = _text(value, where)
    return text if text.endswith(SIMULATED_SUFFIX) else text + SIMULATED_SUFFIX


def device_uuid(recipe: str, seed: str, index: int) -> DeviceUUID:
    """Deterministic and distinct from every other recipe's devices on the host."""
    return DeviceUUID(f"{recipe}-{uuid.uuid5(_NAMESPACE, f'{seed}/{recipe}/{index}')}")


def check_recipe(recipe: Recipe) -> None:
    """What the simulated driver needs of a recipe beyond its own checks (its binaries are shell
    scripts that read the recipe's visible-devices variable)."""
    if recipe.backend != "simulated":
        raise SimClassError(
            f"recipe {recipe.name!r}: backend {recipe.backend!r}; only a simulated recipe simulates"
        )
    if not _ENV_NAME.fullmatch(recipe.visible_devices_env):
        raise SimClassError(
            f"recipe {recipe.name!r}: visibleDevicesEnv {recipe.visible_devices_env!r} is no env name"
        )


def parse(doc: Any, recipe: Recipe) -> SimClass:
    """A parsed class config (None: an empty file) for `recipe` -> what the simulated driver makes."""
    check_recipe(recipe)
    doc = _mapping(doc, "top level")
    unknown = sorted(set(doc) - KNOWN)
    if unknown:
        raise SimClassError(f"top level: unknown field(s) {unknown}; known: {sorted(KNOWN)}")
    version = driver_version(doc.get("driverVersion", "0.0-simulated"))
    device_class = _text(doc.get("class", recipe.name), "class")
    seed = _text(doc.get("seed", "sro"), "seed")
    defaults = _mapping(doc.get("defaults"), "defaults")
    bad = sorted(set(defaults) - (DEVICE_KNOWN - {"index", "uuid"}))
    if bad:
        raise SimClassError(
            f"defaults: unknown field(s) {bad}; known: {sorted(DEVICE_KNOWN - {'index', 'uuid'})}"
        )
    common = _attributes(doc.get("attributes"), "attributes")
    entries = doc.get("devices", [])
    if not isinstance(entries, list):
        raise SimClassError(f"devices: expected a list, got {type(entries).__name__}")
    count = _int(doc.get("count", len(entries)), "count", 1, MAX_DEVICES)
    per_device: dict[int, Mapping[str, Any]] = {}
    for k, entry in enumerate(entries):
        where = f"devices[{k}]"
        entry = _mapping(entry, where)
        bad = sorted(set(entry) - DEVICE_KNOWN)
        if bad:
            raise SimClassError(f"{where}: unknown field(s) {bad}; known: {sorted(DEVICE_KNOWN)}")
        index = _int(entry.get("index", k), f"{where}.index", 0, count - 1)
        if index in per_device:
            raise SimClassError(f"{where}.index: device {index} is listed twice")
        per_device[index] = entry

    devices = []
    for i in range(count):
        spec = {**defaults, **per_device.get(i, {})}
        where = f"devices[{i}]" if i in per_device else "defaults"
        numa = spec.get("numaNode")
        devices.append(
            Device(
                uuid=DeviceUUID(_text(spec["uuid"], f"{where}.uuid"))
                if "uuid" in spec
                else device_uuid(recipe.name, seed, i),
                index=i,
                minor=i,
                device_node=node_path(recipe.device_node, i),
                pci_bus_id=_text(spec.get("pciBusId", f"0000:{0x40 + i:02x}:00.0"), f"{where}.pciBusId"),
                product=product_name(spec.get("product", f"{device_class}"), f"{where}.product"),
                memory_mib=_int(spec.get("memoryMiB", 0), f"{where}.memoryMiB"),
                compute_capability="",
                numa_node=None if numa is None else _int(numa, f"{where}.numaNode", 0, 1023),
                simulated=True,
                companion_nodes=tuple(node_path(p, i) for p in recipe.companion_nodes),
                attributes={**common, **_attributes(spec.get("attributes"), f"{where}.attributes")},
            )
        )
    if len({d.uuid for d in devices}) != len(devices):
        raise SimClassError("devices[].uuid: UUIDs must be unique")
    nodes = [n for d in devices for n in (d.device_node, *d.companion_nodes)] + list(recipe.control_nodes)
    if len(set(nodes)) != len(nodes):
        raise SimClassError(
            f"recipe {recipe.name!r}: device, companion and control nodes must all differ, got {nodes}"
        )

    libraries = _names(doc, "libraries")
    globs = [g for group in recipe.libraries.values() for g in group]
    for i, name in enumerate(libraries):
        if not any(fnmatch.fnmatchcase(name, g) for g in globs):
            raise SimClassError(f"libraries[{i}]: {name!r} matches none of the recipe's libraries {globs}")
    binaries = _names(doc, "binaries")
    known_bins = sorted({b for group in recipe.binaries.values() for b in group})
    for i, name in enumerate(binaries):
        if name not in known_bins:
            raise SimClassError(f"binaries[{i}]: {name!r} is not one of the recipe's binaries {known_bins}")
    inv = Inventory(
        backend="simulated",
        devices=tuple(devices),
        driver_version=version,
        control_nodes=recipe.control_nodes,
        simulated=True,
    )
    return SimClass(inventory=inv, device_class=device_class, libraries=libraries, binaries=binaries)


def with_version(sim: SimClass, version: str) -> SimClass:
    """The same class under another driver version (`sro driver simulate --driver-version`)."""
    return replace(sim, inventory=replace(sim.inventory, driver_version=version))
