"""Network feature source: physical interfaces and their SR-IOV state (`network-sriov.*`).

A physical interface is one with a `device` link. The interfaces under /sys/devices/virtual/net
(lo, bridges, veths: a container host has dozens) have none, so one listing of that directory
replaces a failed lookup per virtual interface; where it is absent (a fake tree) each interface is
looked at. `sriov_numvfs` is looked up only where `sriov_totalvfs` is (the kernel shows both or neither).
"""

from __future__ import annotations

from sro.host.reading import HostReader
from sro.node.discovery.config import Config
from sro.node.discovery.features import Attrs, Features, nfd_key

NAME = "network"


class NetworkSource:
    name = NAME

    def discover(self, reader: HostReader, config: Config) -> Features:
        base = f"{reader.host.sys}/class/net"
        ifaces: list[Attrs] = []
        names = reader.list_dir(base)
        virtual = set(reader.entries(f"{reader.host.sys}/devices/virtual/net") or ()) if names else set()
        for iface in names:
            if iface in virtual:
                continue  # virtual interface (lo, bridges, veths): NFD skips these
            device = f"{base}/{iface}/device"  # strings: a pathlib join costs more than the read
            if not reader.exists(device):
                continue  # virtual too, where the listing could not say so
            attrs = {"name": iface}
            for attr in ("sriov_totalvfs", "sriov_numvfs"):
                path = f"{device}/{attr}"
                before = len(reader.problems)
                value = reader.read_value(path)
                if value is None:
                    if attr == "sriov_totalvfs" and len(reader.problems) == before:
                        break  # not an SR-IOV physical function: no sriov_numvfs either
                    continue
                if not value.isdigit():
                    reader.problem(path, f"expected a number, got {value[:40]!r}")
                    continue
                attrs[attr] = value
            ifaces.append(attrs)
        return Features(instances={"device": tuple(ifaces)})

    def labels(self, features: Features, config: Config) -> dict[str, str]:
        out: dict[str, str] = {}
        for dev in features.instances.get("device", ()):
            if int(dev.get("sriov_totalvfs", "0")) > 0:
                out[nfd_key(NAME, "sriov.capable")] = "true"
            if int(dev.get("sriov_numvfs", "0")) > 0:
                out[nfd_key(NAME, "sriov.configured")] = "true"
        return out


SOURCE = NetworkSource()
