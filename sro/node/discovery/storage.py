"""Storage feature source: block devices, `storage-nonrotationaldisk` when any is non-rotational."""

from __future__ import annotations

from sro.host.reading import HostReader
from sro.node.discovery.config import Config
from sro.node.discovery.features import Attrs, Features, nfd_key

NAME = "storage"


class StorageSource:
    name = NAME

    def discover(self, reader: HostReader, config: Config) -> Features:
        base = f"{reader.host.sys}/block"
        devices: list[Attrs] = []
        for dev in reader.list_dir(base):
            path = f"{base}/{dev}/queue/rotational"  # a string: a pathlib join costs more than the read
            rotational = reader.read_value(path)
            if rotational is None:
                continue
            if rotational not in ("0", "1"):
                reader.problem(path, f"expected 0 or 1, got {rotational[:40]!r}")
                continue
            devices.append({"name": dev, "rotational": rotational})
        return Features(instances={"block": tuple(devices)})

    def labels(self, features: Features, config: Config) -> dict[str, str]:
        if any(d["rotational"] == "0" for d in features.instances.get("block", ())):
            return {nfd_key(NAME, "nonrotationaldisk"): "true"}
        return {}


SOURCE = StorageSource()
