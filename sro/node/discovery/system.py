"""System feature source: os-release (ID, VERSION_ID and its parts) and DMI identity.

The DMI product name is a raw feature only (GFD's `gpu.machine` uses it); os-release is read from
the host's /etc, falling back to /usr/lib/os-release as systemd specifies.
"""

from __future__ import annotations

import re
import shlex

from sro.host.reading import HostReader
from sro.node.discovery.config import Config
from sro.node.discovery.features import Features, nfd_key
from sro.node.discovery.remembered import Remembered

NAME = "system"
LABELLED = ("ID", "VERSION_ID", "OSTREE_VERSION")
_VERSION = re.compile(r"^(?P<major>\d+)(\.(?P<minor>\d+))?")


def parse_os_release(text: str) -> dict[str, str]:
    """KEY=value lines, values unquoted as a shell would (a fresh dict; the parse of the same text
    is remembered: shlex is most of this source's pass and os-release changes with an upgrade)."""
    return dict(_parsed_os_release("os-release", text))  # one entry: the text is the key


def _parse_os_release(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        try:
            parts = shlex.split(value)
        except ValueError:
            parts = [value.strip("\"'")]
        out[key.strip()] = parts[0] if parts else ""
    return out


_parsed_os_release: Remembered[str, dict[str, str]] = Remembered(
    lambda _, text: _parse_os_release(text)
)  # callers get copies


class SystemSource:
    name = NAME

    def discover(self, reader: HostReader, config: Config) -> Features:
        host = reader.host
        text = reader.read_text(f"{host.etc}/os-release")
        if text is None:
            text = reader.read_text(f"{host.usr_lib}/os-release")
        if text is None:
            reader.problem(host.etc / "os-release", "missing (and no /usr/lib/os-release)")
        dmi = {}
        for attr in ("sys_vendor", "product_name"):
            value = reader.read_shared(f"{host.sys}/class/dmi/id/{attr}")  # accelerators reads it too
            if value:
                dmi[attr] = value
        return Features(attributes={"osrelease": parse_os_release(text or ""), "dmiid": dmi})

    def labels(self, features: Features, config: Config) -> dict[str, str]:
        out: dict[str, str] = {}
        osr = features.attributes.get("osrelease", {})
        for key in LABELLED:
            if osr.get(key):
                out[nfd_key(NAME, f"os_release.{key}")] = osr[key]
        m = _VERSION.match(osr.get("VERSION_ID", ""))
        if m:
            out[nfd_key(NAME, "os_release.VERSION_ID.major")] = m.group("major")
            if m.group("minor"):
                out[nfd_key(NAME, "os_release.VERSION_ID.minor")] = m.group("minor")
        return out


SOURCE = SystemSource()
