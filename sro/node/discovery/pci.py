"""PCI feature source: devices from sysfs, labelled `pci-<fields>.present` as NFD does.

Reads class, vendor, device, subsystem ids (mandatory, as in NFD) and the optional SR-IOV, IOMMU and
modalias attributes of each device under `/sys/bus/pci/devices`. A device whose mandatory attribute is
missing or not hex is skipped with a problem naming the file; every other device still counts.

Optional attributes are looked up only where they can exist, so that a pass does not pay a failed
lookup per device for what the kernel never shows: `sriov_numvfs` only where `sriov_totalvfs` is
(the kernel shows both, or neither, on an SR-IOV physical function), `iommu_group/type` only when
`/sys/kernel/iommu_groups` lists a group (without one no device has an `iommu_group`; where that
directory is absent — an old kernel, a fake tree — every device is looked at).
"""

from __future__ import annotations

import re

from sro.host.reading import HostReader
from sro.node.discovery.config import PCI_FIELDS, Config
from sro.node.discovery.features import Attrs, Features, is_hex, nfd_key

NAME = "pci"
OPTIONAL = ("sriov_totalvfs", "sriov_numvfs", "iommu_group/type", "modalias")
IOMMU_GROUPS = "kernel/iommu_groups"  # under /sys
# What the kernel writes (drivers/pci/pci-sysfs.c): module autoloading matches on this string.
MODALIAS = re.compile(
    r"pci:v[0-9A-F]{8}d[0-9A-F]{8}sv[0-9A-F]{8}sd[0-9A-F]{8}bc[0-9A-F]{2}sc[0-9A-F]{2}i[0-9A-F]{2}"
)


def read_attr(reader: HostReader, dev: str, attr: str, required: bool) -> str | None:
    """One attribute of the device directory `dev`, NFD-normalised: stripped, no `0x`, class cut
    to base+subclass. Paths are plain strings: a pathlib join costs more than reading a sysfs
    attribute, and a pass reads nine per PCI device."""
    path = f"{dev}/{attr}"
    raw = reader.read_value(path, required=required)
    if raw is None:
        return None
    if attr == "modalias":
        if not MODALIAS.fullmatch(raw):
            # Bad content read fine: the device still counts; report it, removals go on.
            reader.warn(path, f"not a PCI modalias: {raw[:60]!r}; ignored")
            return None
        return raw
    value = raw.removeprefix("0x").lower()
    if attr in PCI_FIELDS:
        want = 6 if attr == "class" else 4
        if not is_hex(value, want):
            reader.problem(path, f"expected {want} hex digits, got {raw[:40]!r}")
            return None
        if attr == "class":
            value = value[:4]
    return value


def _optional_attrs(reader: HostReader) -> tuple[str, ...]:
    """The optional attributes worth a lookup on this node: without IOMMU groups, no device has one."""
    groups = reader.entries(f"{reader.host.sys}/{IOMMU_GROUPS}")
    if groups is not None and not groups:
        return tuple(a for a in OPTIONAL if not a.startswith("iommu_group/"))
    return OPTIONAL


class PciSource:
    name = NAME

    def discover(self, reader: HostReader, config: Config) -> Features:
        devices: list[Attrs] = []
        base = f"{reader.host.sys}/bus/pci/devices"
        names = reader.list_dir(base)
        optional = _optional_attrs(reader) if names else OPTIONAL
        for dev in names:
            attrs: dict[str, str] = {}
            dev_dir = f"{base}/{dev}"
            for attr in PCI_FIELDS:
                value = read_attr(reader, dev_dir, attr, required=True)
                if value is None:
                    break
                attrs[attr] = value
            else:
                physfn = True
                for attr in optional:
                    if attr == "sriov_numvfs" and not physfn:
                        continue  # not an SR-IOV physical function: neither file is there
                    before = len(reader.problems)
                    value = read_attr(reader, dev_dir, attr, required=False)
                    if value is not None:
                        attrs[attr] = value
                    elif attr == "sriov_totalvfs" and len(reader.problems) == before:
                        physfn = False  # missing (an unreadable one still has its sriov_numvfs read)
                attrs["address"] = dev
                devices.append(attrs)
        return Features(instances={"device": tuple(devices)})

    def labels(self, features: Features, config: Config) -> dict[str, str]:
        out: dict[str, str] = {}
        for dev in features.instances.get("device", ()):
            if not dev["class"].startswith(config.pci_class_whitelist):
                continue
            label = "_".join(dev[f] for f in config.pci_label_fields)
            out[nfd_key(NAME, f"{label}.present")] = "true"
            if "sriov_totalvfs" in dev:
                out[nfd_key(NAME, f"{label}.sriov.capable")] = "true"
        return out


SOURCE = PciSource()
