"""Network feature source: physical interfaces and their SR-IOV state (`network-sriov.*`)."""

from __future__ import annotations

from sro.host.reading import HostReader
from sro.node.discovery.config import Config
from sro.node.discovery.features import Attrs, Features, nfd_key

NAME = "network"


class NetworkSource:
    name = NAME

    def discover(self, reader: HostReader, config: Config) -> Features:
        base = reader.host.sys / "class/net"
        ifaces: list[Attrs] = []
        for iface in reader.list_dir(base):
            device = f"{base}/{iface}/device"  # strings: a pathlib join costs more than the read
            if not reader.exists(device):
                continue  # virtual interface (lo, bridges, veths): NFD skips these
            attrs = {"name": iface}
            for attr in ("sriov_totalvfs", "sriov_numvfs"):
                path = f"{device}/{attr}"
                value = reader.read_value(path)
                if value is None:
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
