"""USB feature source: devices from sysfs, labelled `usb-<class>_<vendor>_<device>.present`.

As in NFD, a device whose class is 00 ("defined per interface") counts once per interface class,
and only classes in `sources.usb.deviceClassWhitelist` (default 0e, ef, fe, ff) are labelled.
"""

from __future__ import annotations

from pathlib import Path

from sro.host.reading import HostReader
from sro.node.discovery.config import Config
from sro.node.discovery.features import Attrs, Features, is_hex, nfd_key

NAME = "usb"


class UsbSource:
    name = NAME

    def discover(self, reader: HostReader, config: Config) -> Features:
        base = f"{reader.host.sys}/bus/usb/devices"  # a string: the directory is absent on most nodes
        devices: list[Attrs] = []
        for dev in reader.list_dir(base):
            if ":" in dev:  # an interface, read with its device below
                continue
            path = Path(base, dev)
            ids = {}
            for attr, key in (("idVendor", "vendor"), ("idProduct", "device"), ("bDeviceClass", "class")):
                value = reader.read_value(path / attr, required=True)
                want = 2 if key == "class" else 4
                if value is None or not is_hex(value.lower(), want):
                    if value is not None:
                        reader.problem(path / attr, f"expected {want} hex digits, got {value[:40]!r}")
                    break
                ids[key] = value.lower()
            else:
                serial = reader.read_value(path / "serial")
                classes = [ids["class"]]
                if ids["class"] == "00":
                    classes = self._interface_classes(reader, dev)
                for cls in classes:
                    attrs = {**ids, "class": cls, "address": dev}
                    if serial:
                        attrs["serial"] = serial
                    devices.append(attrs)
        return Features(instances={"device": tuple(devices)})

    @staticmethod
    def _interface_classes(reader: HostReader, dev: str) -> list[str]:
        base = reader.host.sys / "bus/usb/devices"
        out: list[str] = []
        for entry in reader.list_dir(base / dev):
            if entry.startswith(f"{dev}:"):
                value = reader.read_value(base / dev / entry / "bInterfaceClass")
                if value is not None and is_hex(value.lower(), 2) and value.lower() not in out:
                    out.append(value.lower())
        return out

    def labels(self, features: Features, config: Config) -> dict[str, str]:
        out: dict[str, str] = {}
        for dev in features.instances.get("device", ()):
            if not any(dev["class"].startswith(w) for w in config.usb_class_whitelist):
                continue
            if any(f not in dev for f in config.usb_label_fields):
                continue  # e.g. serial asked for but the device has none
            label = "_".join(dev[f] for f in config.usb_label_fields)
            out[nfd_key(NAME, f"{label}.present")] = "true"
        return out


SOURCE = UsbSource()
