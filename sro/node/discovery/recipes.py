"""The custom recipes installed on this node, their devices, and the labels that say so.

Why from the runtime's install root: discovery is installed once for the cluster, not per
SpecialResource, so it cannot be handed each SR's recipe; `sro runtime install --recipe-file` writes
every custom recipe the node serves to `/var/lib/sro/runtime/recipes/<name>.json` (canonical JSON),
which the discovery DaemonSet mounts read-only. Each recipe is inventoried with its own backend,
through the HostReader (so fake trees and `capture-host` see it too):
- `simulated`: the simulated driver's device list under the recipe's driver root;
- `devnodes`: the character nodes in /dev matching the recipe's device node pattern;
- `nvml`: NVML's inventory, which the accelerator source takes anyway (passed in).
A recipe file that does not parse is a problem naming the file (the source keeps its old labels
this pass: nothing is removed because a file could not be read), never a crash. A recipe whose
file is gone loses its labels on the next pass (the publisher removes the keys it owns).

Labels, under the recipe's own prefix `sro.dev/<name>.`, only where it has devices: `count`,
`product` (of its first device, sanitised as GFD does) and, for a simulated recipe, `simulated=true`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from sro.api.names import PREFIX, RUNTIME_ROOT
from sro.api.recipes import SIMULATED_DEVICE_LIST, Recipe, RecipeError, recipe_from_dict
from sro.devices.driverstate import DriverStateError, inventory_from_doc
from sro.devices.model import Device, DeviceUUID, Inventory
from sro.host.reading import HostReader
from sro.host.root import HostRoot
from sro.node.discovery.features import Attrs

RECIPES_DIR = "recipes"  # under the runtime's install root
RECIPE = "recipe"  # attribute feature: recipe name -> "simulated" | "hardware"
RECIPE_DEVICE = "recipe_device"  # instance feature: one per device of an installed custom recipe


def label_prefix(name: str) -> str:
    return f"{PREFIX}{name}."


def host_path(host: HostRoot, path: str) -> Path | None:
    """Where an absolute node path lies in the host trees discovery sees; None when in none."""
    trees = (("/var/lib/", host.var_lib), ("/run/", host.run), ("/dev/", host.dev), ("/etc/", host.etc))
    for prefix, tree in trees:
        if path.startswith(prefix):
            return tree / path[len(prefix) :]
    return None


def installed(reader: HostReader) -> list[Recipe]:
    """The custom recipes installed on the node, by file name; a bad file is a problem, skipped."""
    where = host_path(reader.host, RUNTIME_ROOT + "/" + RECIPES_DIR)
    assert where is not None  # the runtime root is under /var/lib
    out = []
    for name in reader.list_dir(where):
        if not name.endswith(".json"):
            continue
        path = where / name
        text = reader.read_text(path)
        if text is None:
            continue  # vanished between listing and reading (an uninstall): nothing to say
        try:
            recipe = recipe_from_dict(json.loads(text))
        except (json.JSONDecodeError, RecipeError) as e:
            reader.problem(path, f"unusable installed recipe ({e})")
            continue
        out.append(recipe)
    return out


def _simulated(reader: HostReader, recipe: Recipe) -> Inventory | None:
    root = host_path(reader.host, recipe.driver_root.rstrip("/") + "/")
    if root is None:
        reader.warn(recipe.driver_root, f"recipe {recipe.name}: driver root not visible to discovery")
        return None
    path = root / SIMULATED_DEVICE_LIST
    data = reader.read_text(path)
    if data is None:
        return None  # the driver is not installed (yet): no devices
    try:
        return inventory_from_doc(json.loads(data), str(path))
    except (json.JSONDecodeError, DriverStateError) as e:
        reader.problem(path, f"recipe {recipe.name}: unusable simulated device list ({e})")
        return None


def _devnodes(reader: HostReader, recipe: Recipe) -> Inventory:
    """The char nodes matching the recipe's device node pattern, indexed by the number in the name."""
    directory, _, name = recipe.device_node.rpartition("/")
    prefix, _, suffix = name.replace("{minor}", "{index}").partition("{index}")
    where = reader.host.dev / directory.removeprefix("/dev").lstrip("/")  # recipecheck: under /dev/
    devices = []
    for entry in reader.list_dir(where):
        digits = entry[len(prefix) : len(entry) - len(suffix)] if suffix else entry[len(prefix) :]
        if not (
            entry.startswith(prefix) and entry.endswith(suffix) and digits.isascii() and digits.isdigit()
        ):
            continue
        if not reader.is_char_device(where / entry):
            continue
        index = int(digits)
        devices.append(
            Device(
                uuid=DeviceUUID(f"{recipe.name}-{index}"),
                index=index,
                minor=-1,
                device_node=f"{directory}/{entry}",
                pci_bus_id="",
                product=recipe.name,
                memory_mib=0,
                compute_capability="",
            )
        )
    return Inventory("devnodes", tuple(sorted(devices, key=lambda d: d.index)))


def inventory(reader: HostReader, recipe: Recipe, nvml: Inventory | None) -> Inventory | None:
    if recipe.backend == "simulated":
        return _simulated(reader, recipe)
    if recipe.backend == "devnodes":
        return _devnodes(reader, recipe)
    return nvml


def features(reader: HostReader, nvml: Inventory | None) -> tuple[dict[str, str], tuple[Attrs, ...]]:
    """(recipe name -> "simulated"|"hardware", one instance per device) of the installed recipes."""
    kinds: dict[str, str] = {}
    devices: list[Attrs] = []
    for recipe in installed(reader):
        kinds[recipe.name] = "simulated" if recipe.simulated else "hardware"
        inv = inventory(reader, recipe, nvml)
        for d in inv.devices if inv is not None else ():
            devices.append(
                {"recipe": recipe.name, "uuid": d.uuid, "index": str(d.index), "product": d.product}
            )
    return kinds, tuple(devices)


def labels(
    kinds: Mapping[str, str], devices: Sequence[Attrs], sanitise: Callable[[str], str]
) -> dict[str, str]:
    """The labels of every installed recipe with devices on the node (pure)."""
    out: dict[str, str] = {}
    for name, kind in sorted(kinds.items()):
        mine = sorted((d for d in devices if d["recipe"] == name), key=lambda d: int(d["index"]))
        if not mine:
            continue
        prefix = label_prefix(name)
        out[prefix + "count"] = str(len(mine))
        product = sanitise(mine[0]["product"])
        if product:
            out[prefix + "product"] = product
        if kind == "simulated":
            out[prefix + "simulated"] = "true"
    return out
