"""Accelerator features from the device backends, labelled the way GPU feature discovery does.

`gfd_labels` is the pure core: an inventory (records from `sro.devices.model`) plus its recipe ->
GFD-compatible labels (`nvidia.com/gpu.product`, `gpu.memory` in MiB, `gpu.count`,
`gpu.compute.major/minor`, `gpu.family`, `cuda.driver-version.*`, `gpu.machine`, `mig.capable`, ...).
For a simulated recipe the same facts go under the recipe's own prefix
(`sro.dev/simulated-gpu.product`, ...) together with `sro.dev/simulated-gpu.simulated=true`, so no
selector written for real NVIDIA hardware ever matches a simulated device.

The source reads the simulated driver's device list from the host (through the HostReader, so fake
trees and `capture-host` see it) and asks NVML (`sro.devices.nvml`) only where the host has a real
NVIDIA control node (a character device, so a fake tree never reaches the real driver).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from sro.api.recipes import NVIDIA_GPU, SIMULATED_DEVICE_LIST, SIMULATED_DRIVER_ROOT, SIMULATED_GPU, Recipe
from sro.devices.driverstate import DriverStateError, inventory_from_doc
from sro.devices.model import Device, DeviceUUID, Inventory
from sro.devices.nvml import NvmlBackend
from sro.host.reading import HostReader
from sro.node.discovery.config import Config
from sro.node.discovery.features import Attrs, Features

NAME = "accelerators"
RECIPES = {"nvml": NVIDIA_GPU, "simulated": SIMULATED_GPU}
# Products with MIG support (NVML's IsMigCapable where the inventory does not say).
MIG_PRODUCTS = re.compile(r"\b(A100|A30|H100|H200|H20|H800|GH200|B200|GB200|B100)\b")
_NOT_VALUE_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


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


def _gfd_key(recipe: Recipe, suffix: str) -> str:
    if not recipe.simulated:
        return recipe.label_prefix + suffix
    # Simulated: the recipe prefix already says "gpu"; no CUDA is involved.
    return recipe.label_prefix + suffix.removeprefix("gpu.").removeprefix("cuda.")


def gfd_labels(
    devices: Sequence[Device], recipe: Recipe, *, driver_version: str = "", machine: str = ""
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
    major, _, minor = first.compute_capability.partition(".")
    if major.isdigit() and minor.isdigit():
        out["gpu.compute.major"] = str(int(major))
        out["gpu.compute.minor"] = str(int(minor))
        out["gpu.family"] = family(int(major), int(minor))
    capable = any(d.mig_enabled or d.mig_devices or MIG_PRODUCTS.search(d.product) for d in devices)
    out["mig.capable"] = str(bool(capable)).lower()
    parts = driver_version.split(".")
    if driver_version and all(p.isdigit() for p in parts):
        out["cuda.driver-version.full"] = driver_version
        for name, value in zip(("major", "minor", "revision"), parts, strict=False):
            out[f"cuda.driver-version.{name}"] = value
    if machine and sanitise(machine):
        out["gpu.machine"] = sanitise(machine)
    labels = {_gfd_key(recipe, k): v for k, v in out.items() if v}
    if recipe.simulated:
        labels[recipe.label_prefix + "simulated"] = "true"
    return labels


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


def _device(attrs: Attrs) -> Device:
    return Device(
        uuid=DeviceUUID(attrs["uuid"]),
        index=int(attrs["index"]),
        minor=-1,
        device_node="",
        pci_bus_id=attrs["pci_bus_id"],
        product=attrs["product"],
        memory_mib=int(attrs["memory_mib"]),
        compute_capability=attrs["compute_capability"],
        mig_enabled=attrs["mig_enabled"] == "true",
        simulated=attrs["backend"] == "simulated",
    )


class AcceleratorSource:
    name = NAME

    def discover(self, reader: HostReader, config: Config) -> Features:
        inventories: list[Inventory] = []
        sim_root = reader.host.var_lib / SIMULATED_DRIVER_ROOT.removeprefix("/var/lib/")
        path = sim_root / SIMULATED_DEVICE_LIST
        data = reader.read_text(path)
        if data is not None:
            try:
                inventories.append(inventory_from_doc(json.loads(data), str(path)))
            except (json.JSONDecodeError, DriverStateError) as e:
                reader.problem(path, f"unusable simulated device list ({e})")
        if reader.is_char_device(reader.host.dev / "nvidiactl"):
            inventories.extend(self._nvml(reader))
        drivers = {inv.backend: inv.driver_version for inv in inventories}
        machine = reader.read_value(reader.host.sys / "class/dmi/id/product_name") or ""
        return Features(
            attributes={"driver": drivers, "machine": {"product_name": machine} if machine else {}},
            instances={"device": tuple(a for inv in inventories for a in _device_attrs(inv))},
        )

    @staticmethod
    def _nvml(reader: HostReader) -> list[Inventory]:
        """NVML's inventory (the device backends' `nvml` backend) on a node with an NVIDIA driver."""
        try:
            backend = NvmlBackend(reader.host.sys)
            try:
                return [backend.inventory()]
            finally:
                backend.close()
        except Exception as e:  # no libnvidia-ml, driver mismatch, NVML errors: report, keep discovering
            reader.problem(reader.host.dev / "nvidiactl", f"NVML inventory failed: {type(e).__name__}: {e}")
            return []

    def labels(self, features: Features, config: Config) -> dict[str, str]:
        out: dict[str, str] = {}
        machine = features.attributes.get("machine", {}).get("product_name", "")
        drivers = features.attributes.get("driver", {})
        for backend, recipe in RECIPES.items():
            devices = [_device(a) for a in features.instances.get("device", ()) if a["backend"] == backend]
            out.update(gfd_labels(devices, recipe, driver_version=drivers.get(backend, ""), machine=machine))
        return out


SOURCE = AcceleratorSource()
