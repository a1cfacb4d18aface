"""Accelerator features from the device backends, labelled the way GPU feature discovery does.

`gfd_labels` is the pure core: an inventory (records from `sro.devices.model`) plus its recipe ->
GPU feature discovery's labels (NVIDIA's k8s-device-plugin `internal/lm`): `nvidia.com/gpu.product`,
`gpu.memory` in MiB, `gpu.count`, `gpu.replicas`, `gpu.sharing-strategy`, `gpu.compute.major/minor`,
`gpu.family`, `gpu.machine`, `mig.capable`, `mps.capable`, the driver's version
(`cuda.driver-version.full/major/minor/revision` and the deprecated `cuda.driver.major/minor/rev`),
the CUDA version the driver supports (`cuda.runtime-version.full/major/minor`, deprecated
`cuda.runtime.major/minor`), and with a MIG strategy other than `none` (GFD's `MIG_STRATEGY`
environment variable, as its flag reads it) `mig.strategy` and its MIG labels: under `single`
`gpu.product` becomes `<model>-MIG-<profile>` and `gpu.count`/`gpu.memory`/`gpu.slices.gi/ci` count
the MIG devices (`<model>-MIG-INVALID` and zeros when the node's MIG layout does not fit the
strategy), under `mixed` each profile gets `mig-<profile>.product/count/replicas/memory/slices.*`.
Multiprocessor and engine counts need NVML's MIG attributes, which the inventory does not carry.

For a simulated recipe the same facts go under the recipe's own prefix (`sro.dev/simulated-gpu.product`,
...) together with `sro.dev/simulated-gpu.simulated=true`, so no selector written for real NVIDIA
hardware ever matches a simulated device. GPUs that NVML names as simulated (the simulated driver's
NVIDIA personality: "NVIDIA A100-SXM4-40GB (simulated)") keep NVIDIA's keys, because that driver is
there to test what is written for NVIDIA, and the node also gets `sro.dev/simulated=true`.
The custom recipes installed on the node add their own devices and labels (`recipes`).

The source reads the simulated driver's device list from the host (through the HostReader, so fake
trees and `capture-host` see it) and asks NVML (`sro.devices.nvml`) where there is one: under the
containerized driver root `/run/nvidia/driver` (the GPU Operator's, and the simulated NVIDIA
driver's; NVML is loaded from its library directory), else where the host has a real NVIDIA control
node (a character device, so a fake tree never reaches the real driver).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import MappingProxyType

from sro.api.builtin_recipes import SIMULATED_NVIDIA_DRIVER_ROOT
from sro.api.names import SIMULATED_LABEL
from sro.api.recipes import NVIDIA_GPU, SIMULATED_DEVICE_LIST, SIMULATED_DRIVER_ROOT, SIMULATED_GPU, Recipe
from sro.devices.driverstate import DriverStateError, inventory_from_doc
from sro.devices.model import Device, DeviceUUID, Inventory, MigDevice
from sro.devices.nvml import LIBRARY_DIRS, NVML_LIBRARY, NvmlBackend
from sro.host.reading import HostReader
from sro.node.discovery import recipes
from sro.node.discovery.config import Config
from sro.node.discovery.features import Attrs, Features
from sro.node.discovery.remembered import Remembered

NAME = "accelerators"
RECIPES = {"nvml": NVIDIA_GPU, "simulated": SIMULATED_GPU}
# Products with MIG support (NVML's IsMigCapable where the inventory does not say).
MIG_PRODUCTS = re.compile(r"\b(A100|A30|H100|H200|H20|H800|GH200|B200|GB200|B100)\b")
MIG_STRATEGIES = ("none", "single", "mixed")
MIG_STRATEGY_ENV = ("GFD_MIG_STRATEGY", "MIG_STRATEGY")  # GFD's flag reads these, first wins
SIMULATED_PRODUCT = re.compile(r"\(simulated\)\s*$", re.IGNORECASE)
_NOT_VALUE_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")
_SLICES = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.")  # "1g.5gb", "1c.3g.20gb"


def sanitise(value: str) -> str:
    """GFD's label-value form of a name: spaces and odd characters -> '-', ends alphanumeric."""
    return _NOT_VALUE_CHARS.sub("-", value.strip()).strip("-_.")[:63].strip("-_.")


def family(major: int, minor: int) -> str:
    """GFD's architecture family for a CUDA compute capability."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    names = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper", 10: "blackwell"}
    return names.get(major, "undefined")


def cuda_version(value: int) -> str:
    """NVML's CUDA driver version (12040) as GFD writes it (12.4)."""
    return f"{value // 1000}.{value % 1000 // 10}"


def _gfd_key(recipe: Recipe, suffix: str) -> str:
    if not recipe.simulated:
        return recipe.label_prefix + suffix
    # Simulated: the recipe prefix already says "gpu"; no CUDA is involved.
    return recipe.label_prefix + suffix.removeprefix("gpu.").removeprefix("cuda.")


def version_labels(driver_version: str, cuda: str = "", *, deprecated: bool = True) -> dict[str, str]:
    """GFD's driver and CUDA version labels (keys without the prefix); none for an odd version.
    `deprecated` adds the older names GFD still writes (`cuda.driver.major`, `cuda.runtime.major`)."""
    out: dict[str, str] = {}
    parts = driver_version.split(".")
    if driver_version and 2 <= len(parts) <= 3 and all(p.isdigit() for p in parts):
        major, minor, rev = (*parts, "")[:3]
        out |= {"cuda.driver-version.full": driver_version, "cuda.driver-version.major": major}
        out |= {"cuda.driver-version.minor": minor, "cuda.driver-version.revision": rev}
        if deprecated:
            out |= {"cuda.driver.major": major, "cuda.driver.minor": minor, "cuda.driver.rev": rev}
    cuda_major, _, cuda_minor = cuda.partition(".")
    if cuda_major.isdigit() and cuda_minor.isdigit():
        out |= {"cuda.runtime-version.full": cuda, "cuda.runtime-version.major": cuda_major}
        out["cuda.runtime-version.minor"] = cuda_minor
        if deprecated:
            out |= {"cuda.runtime.major": cuda_major, "cuda.runtime.minor": cuda_minor}
    return out


def _slices(profile: str) -> dict[str, str]:
    m = _SLICES.match(profile)
    return {"slices.gi": m.group(2), "slices.ci": m.group(1) or m.group(2)} if m else {}


def mig_labels(devices: Sequence[Device], strategy: str) -> dict[str, str]:
    """GFD's labels for a MIG strategy (keys without the prefix); they override the full-GPU ones."""
    if strategy not in ("single", "mixed"):
        return {}
    out = {"mig.strategy": strategy}
    model = sanitise(min(devices, key=lambda d: d.index).product)
    migs = [m for d in devices for m in d.mig_devices]
    profiles: dict[str, list[MigDevice]] = {}
    for m in migs:
        profiles.setdefault(m.profile, []).append(m)
    if strategy == "single":
        enabled = [d for d in devices if d.mig_enabled]
        if not enabled:
            return out  # no GPU in MIG mode: the full GPUs' labels stand
        if len(enabled) < len(devices) or any(not d.mig_devices for d in enabled) or len(profiles) != 1:
            invalid = {"product": f"{model}-MIG-INVALID", "count": "0", "replicas": "0", "memory": "0"}
            return out | {f"gpu.{k}": v for k, v in invalid.items()}
    for profile, group in sorted(profiles.items()):
        resource = "gpu" if strategy == "single" else f"mig-{profile}"
        attrs = {
            "product": f"{model}-MIG-{profile}",
            "count": str(len(group)),
            "replicas": "1",
            "memory": str(group[0].memory_mib),
            **_slices(profile),
        }
        out |= {f"{resource}.{k}": v for k, v in attrs.items()}
    return out


def gfd_labels(
    devices: Sequence[Device],
    recipe: Recipe,
    *,
    driver_version: str = "",
    cuda: str = "",
    machine: str = "",
    mig_strategy: str = "none",
) -> dict[str, str]:
    """GFD's labels for one backend's devices (the first device by index describes the node)."""
    if not devices:
        return {}
    first = min(devices, key=lambda d: d.index)
    out = {
        "gpu.count": str(len(devices)),
        "gpu.product": sanitise(first.product),
        "gpu.memory": str(first.memory_mib),
        "gpu.replicas": "1",
        "gpu.sharing-strategy": "none",
    }
    if not recipe.simulated:  # GFD's, kept off the simulated recipe's own label set
        out["mps.capable"] = "false"  # the device plugin shares by time-slicing only
    major, _, minor = first.compute_capability.partition(".")
    if major.isdigit() and minor.isdigit():
        out["gpu.compute.major"] = str(int(major))
        out["gpu.compute.minor"] = str(int(minor))
        out["gpu.family"] = family(int(major), int(minor))
    capable = any(d.mig_enabled or d.mig_devices or MIG_PRODUCTS.search(d.product) for d in devices)
    out["mig.capable"] = str(bool(capable)).lower()
    out |= version_labels(driver_version, cuda, deprecated=not recipe.simulated)
    if machine and sanitise(machine):
        out["gpu.machine"] = sanitise(machine)
    out |= mig_labels(devices, mig_strategy)
    labels = {_gfd_key(recipe, k): v for k, v in out.items() if v}
    if recipe.simulated:
        labels[recipe.label_prefix + "simulated"] = "true"
    elif any(SIMULATED_PRODUCT.search(d.product) for d in devices):
        labels[SIMULATED_LABEL] = "true"
    return labels


# --- features: the inventory as NFD-style instances, and back -----------------------------------


def _device_attrs(inv: Inventory) -> tuple[Attrs, ...]:
    return tuple(
        {
            "backend": inv.backend,
            "uuid": d.uuid,
            "index": str(d.index),
            "pci_bus_id": d.pci_bus_id,
            "product": d.product,
            "memory_mib": str(d.memory_mib),
            "compute_capability": d.compute_capability,
            "mig_enabled": str(d.mig_enabled).lower(),
            "mig_devices": str(len(d.mig_devices)),
        }
        for d in inv.devices
    )


def _mig_attrs(inv: Inventory) -> tuple[Attrs, ...]:
    return tuple(
        {
            "backend": inv.backend,
            "uuid": m.uuid,
            "parent": d.uuid,
            "index": str(m.index),
            "profile": m.profile,
            "memory_mib": str(m.memory_mib),
            "gi": str(m.gi_id),
            "ci": str(m.ci_id),
        }
        for d in inv.devices
        for m in d.mig_devices
    )


def _attrs_of(_: str, inv: Inventory) -> tuple[tuple[Attrs, ...], tuple[Attrs, ...]]:
    """(device, MIG device) instances of an inventory, read-only: they are remembered and shared."""
    return (
        tuple(MappingProxyType(a) for a in _device_attrs(inv)),
        tuple(MappingProxyType(a) for a in _mig_attrs(inv)),
    )


# An inventory equal to the last one (the remembered simulated device list is the same object
# every pass; NVML's is compared field by field) gives the same instances without building them.
_inventory_attrs = Remembered(_attrs_of)


def _devices(features: Features, backend: str) -> list[Device]:
    migs: dict[str, list[MigDevice]] = {}
    for a in features.instances.get("mig_device", ()):
        if a["backend"] == backend:
            migs.setdefault(a["parent"], []).append(
                MigDevice(
                    uuid=DeviceUUID(a["uuid"]),
                    parent_uuid=DeviceUUID(a["parent"]),
                    index=int(a["index"]),
                    profile=a["profile"],
                    memory_mib=int(a["memory_mib"]),
                    gi_id=int(a["gi"]),
                    ci_id=int(a["ci"]),
                )
            )
    return [
        Device(
            uuid=DeviceUUID(a["uuid"]),
            index=int(a["index"]),
            minor=-1,
            device_node="",
            pci_bus_id=a["pci_bus_id"],
            product=a["product"],
            memory_mib=int(a["memory_mib"]),
            compute_capability=a["compute_capability"],
            mig_enabled=a["mig_enabled"] == "true",
            mig_devices=tuple(migs.get(a["uuid"], ())),
            simulated=backend == "simulated",
        )
        for a in features.instances.get("device", ())
        if a["backend"] == backend
    ]


def mig_strategy(env: Iterable[tuple[str, str]]) -> str:
    """The MIG strategy GFD's environment variables name; `none` when unset or unknown."""
    values = dict(env)
    chosen = next((values[k] for k in MIG_STRATEGY_ENV if values.get(k)), "none").strip().lower()
    return chosen if chosen in MIG_STRATEGIES else "none"


# --- the source -----------------------------------------------------------------------------------


# The simulated driver's device list changes only when the driver is (re)installed: its JSON parse is
# remembered while the text is the same (an Inventory is a frozen record, shared read-only).
_device_list: Remembered[str, Inventory] = Remembered(
    lambda where, text: inventory_from_doc(json.loads(text), where)
)


def nvml_driver_root(reader: HostReader) -> Path | None:
    """The containerized driver root under the host's /run, when it holds NVML's library."""
    root = reader.host.run / SIMULATED_NVIDIA_DRIVER_ROOT.removeprefix("/run/")
    # one listing instead of a lookup per library directory: most nodes have no such root, or an
    # empty one (the mount point of a driver container not running)
    top = set(reader.entries(root) or ())
    dirs = [d for d in LIBRARY_DIRS if d.partition("/")[0] in top]
    return root if any(reader.exists(f"{root}/{d}/{NVML_LIBRARY}") for d in dirs) else None


class AcceleratorSource:
    name = NAME

    def discover(self, reader: HostReader, config: Config) -> Features:
        inventories: list[Inventory] = []
        path = (
            f"{reader.host.var_lib}/{SIMULATED_DRIVER_ROOT.removeprefix('/var/lib/')}/{SIMULATED_DEVICE_LIST}"
        )
        data = reader.read_text(path)
        if data is not None:
            try:
                inventories.append(_device_list(path, data))
            except (json.JSONDecodeError, DriverStateError) as e:
                reader.problem(path, f"unusable simulated device list ({e})")
        cuda: dict[str, str] = {}
        nvml: Inventory | None = None
        driver_root = nvml_driver_root(reader)
        if driver_root is not None or reader.is_char_device(f"{reader.host.dev}/nvidiactl"):
            found = self._nvml(reader, driver_root)
            if found is not None:
                nvml = found[0]
                inventories.append(nvml)
                cuda = {"nvml": found[1]} if found[1] else {}
        drivers = {inv.backend: inv.driver_version for inv in inventories}
        by_inventory = [_inventory_attrs(inv.backend, inv) for inv in inventories]
        machine = reader.read_shared(f"{reader.host.sys}/class/dmi/id/product_name") or ""  # system's too
        # only the variables it reads: copying (and decoding) the whole environment was a third of
        # this source's pass
        strategy = mig_strategy((k, os.environ[k]) for k in MIG_STRATEGY_ENV if k in os.environ)
        kinds, recipe_devices = recipes.features(reader, nvml)
        return Features(
            attributes={
                "driver": drivers,
                "cuda": cuda,
                "machine": {"product_name": machine} if machine else {},
                "mig": {"strategy": strategy},
                **({recipes.RECIPE: kinds} if kinds else {}),
            },
            instances={
                "device": tuple(a for attrs in by_inventory for a in attrs[0]),
                "mig_device": tuple(a for attrs in by_inventory for a in attrs[1]),
                **({recipes.RECIPE_DEVICE: recipe_devices} if recipe_devices else {}),
            },
        )

    @staticmethod
    def _nvml(reader: HostReader, driver_root: Path | None) -> tuple[Inventory, str] | None:
        """NVML's inventory and CUDA version (the `nvml` device backend), loaded from `driver_root`
        when there is one."""
        where = driver_root or reader.host.dev / "nvidiactl"
        try:
            backend = NvmlBackend(reader.host.sys, driver_root=driver_root)
            try:
                inv = backend.inventory()
                try:
                    version = cuda_version(int(backend.nvml.nvmlSystemGetCudaDriverVersion()))
                except backend.nvml.NVMLError:
                    version = ""
                return inv, version
            finally:
                backend.close()
        except Exception as e:  # no libnvidia-ml, driver mismatch, NVML errors: report, keep discovering
            reader.problem(where, f"NVML inventory failed: {type(e).__name__}: {e}")
            return None

    def labels(self, features: Features, config: Config) -> dict[str, str]:
        out: dict[str, str] = {}
        machine = features.attributes.get("machine", {}).get("product_name", "")
        drivers = features.attributes.get("driver", {})
        cuda = features.attributes.get("cuda", {})
        strategy = features.attributes.get("mig", {}).get("strategy", "none")
        for backend, recipe in RECIPES.items():
            out.update(
                gfd_labels(
                    _devices(features, backend),
                    recipe,
                    driver_version=drivers.get(backend, ""),
                    cuda=cuda.get(backend, ""),
                    machine=machine,
                    mig_strategy=strategy,
                )
            )
        kinds = features.attributes.get(recipes.RECIPE, {})
        out.update(recipes.labels(kinds, features.instances.get(recipes.RECIPE_DEVICE, ()), sanitise))
        return out


SOURCE = AcceleratorSource()
