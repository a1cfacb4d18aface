"""Memory feature source: NUMA, non-volatile memory (NVDIMM, DAX) and swap, as NFD labels them."""

from __future__ import annotations

from sro.host.reading import HostReader
from sro.node.discovery.config import Config
from sro.node.discovery.features import Attrs, Features, nfd_key

NAME = "memory"


class MemorySource:
    name = NAME

    def discover(self, reader: HostReader, config: Config) -> Features:
        host = reader.host
        nodes = [
            n
            for n in reader.list_dir(f"{host.sys}/devices/system/node")
            if n.startswith("node") and n[4:].isdigit()
        ]
        nv: list[Attrs] = []
        nd = f"{host.sys}/bus/nd/devices"
        for dev in reader.list_dir(nd):
            devtype = reader.read_value(f"{nd}/{dev}/devtype")
            nv.append({"name": dev, "devtype": devtype or ""})
        swaps = reader.read_text(f"{host.proc}/swaps", required=True)
        attributes: dict[str, Attrs] = {
            "numa": {"is_numa": str(len(nodes) > 1).lower(), "node_count": str(len(nodes))}
        }
        if swaps is not None:
            entries = [line for line in swaps.splitlines()[1:] if line.strip()]
            attributes["swap"] = {"enabled": str(bool(entries)).lower()}
        return Features(attributes=attributes, instances={"nv": tuple(nv)})

    def labels(self, features: Features, config: Config) -> dict[str, str]:
        out: dict[str, str] = {}
        if features.attributes.get("numa", {}).get("is_numa") == "true":
            out[nfd_key(NAME, "numa")] = "true"
        nv = features.instances.get("nv", ())
        if nv:
            out[nfd_key(NAME, "nv.present")] = "true"
        if any(d.get("devtype") == "nd_dax" for d in nv):
            out[nfd_key(NAME, "nv.dax")] = "true"
        if features.attributes.get("swap", {}).get("enabled") == "true":
            out[nfd_key(NAME, "swap.enabled")] = "true"
        return out


SOURCE = MemorySource()
