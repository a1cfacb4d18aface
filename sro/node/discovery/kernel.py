"""Kernel feature source: version, selected config options, SELinux, loaded and enabled modules.

Version components follow NFD (`6.1.0-18-amd64` -> full, major 6, minor 1, revision 0). The kernel
config is looked up where NFD looks (the configured `kconfigFile`, /proc/config.gz, /boot,
/lib/modules, ostree), first found wins; only `sources.kernel.configOpts` become labels.
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType

from sro.host.reading import HostReader
from sro.node.discovery.config import Config
from sro.node.discovery.features import Attrs, Features, nfd_key
from sro.node.discovery.remembered import Remembered

NAME = "kernel"
_VERSION = re.compile(r"^(?P<major>\d+)(\.(?P<minor>\d+))?(\.(?P<revision>\d+))?(-.*)?$")
_NOT_LABEL_CHARS = re.compile(r"[^-A-Za-z0-9_.]")


def parse_version(release: str) -> dict[str, str]:
    out = {"full": _NOT_LABEL_CHARS.sub("_", release).strip("-_.")}
    m = _VERSION.match(release)
    if m:
        out.update({k: v for k, v in m.groupdict().items() if v})
    return out


def parse_kconfig(text: str) -> dict[str, str]:
    """`CONFIG_X=v` -> {"X": v} with string values unquoted (raw: `y` built in, `m` a module, as NFD's
    rules see them); `# ... is not set` lines skipped. The labeling step turns y and m into "true"."""
    if not text.isascii() or any(b in text for b in _OTHER_BREAKS):
        return _parse_kconfig_lines(text)
    # ASCII split only at newlines: go from one `CONFIG_` line to the next instead of looking at
    # every line (a distribution kernel's config has ~4,000-10,000 lines, under half of them
    # options; parsing it was most of a first pass, which every `sro discover` is) — 2x faster.
    out: dict[str, str] = {}
    for chunk in ("\n" + text).split("\nCONFIG_")[1:]:
        key, sep, value = chunk.partition("\n")[0].partition("=")
        if sep:
            out[key] = value.strip('"')
    return out


# Besides "\n", what str.splitlines splits ASCII text at: such a text takes the line-by-line rule.
_OTHER_BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e")


def _parse_kconfig_lines(text: str) -> dict[str, str]:
    """parse_kconfig's rule, line by line."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("CONFIG_"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        out[key.removeprefix("CONFIG_")] = value.strip('"')
    return out


def _kconfig_of(path: str, content: tuple[bool, bytes]) -> Mapping[str, str]:
    """parse_kconfig of the bytes (gzip-compressed when the flag says so), read-only: the parse
    is remembered and shared. Raises what gzip raises on bad input."""
    gz, data = content
    return MappingProxyType(parse_kconfig((gzip.decompress(data) if gz else data).decode("utf-8", "replace")))


def _builtin_of(path: str, text: str) -> frozenset[str]:
    """Module names in modules.builtin's text."""
    names = (Path(line.strip()).name.removesuffix(".ko") for line in text.splitlines())
    return frozenset(name for name in names if name)


def _modules_of(path: str, text: str) -> frozenset[str]:
    """The loaded modules' names in /proc/modules' text (the first word of each line)."""
    return frozenset(line.split()[0] for line in text.splitlines() if line.strip())


# Decompressing and parsing /proc/config.gz was most of a pass on a real node; both files change
# only with the kernel (sro.node.discovery.remembered says why compared, not hashed).
_parsed_kconfig = Remembered(_kconfig_of)
_parsed_builtin = Remembered(_builtin_of)
_parsed_modules = Remembered(_modules_of)  # changes only when a module is loaded or its use count moves


class KernelSource:
    name = NAME

    def discover(self, reader: HostReader, config: Config) -> Features:
        host = reader.host
        release = reader.read_value(f"{host.proc}/sys/kernel/osrelease", required=True) or ""
        attributes: dict[str, Attrs] = {}
        if release:
            attributes["version"] = parse_version(release)
        attributes["config"] = self._kconfig(reader, release, config)
        enforce = reader.read_value(f"{host.sys}/fs/selinux/enforce")
        attributes["selinux"] = {"enabled": "true" if enforce == "1" else "false"}
        modules_path = f"{host.proc}/modules"
        loaded = _parsed_modules(modules_path, reader.read_text(modules_path) or "")
        builtin: frozenset[str] = frozenset()
        if release:
            builtin_path = f"{host.lib_modules}/{release}/modules.builtin"
            builtin = _parsed_builtin(builtin_path, reader.read_text(builtin_path) or "")
        return Features(
            flags={"loadedmodule": loaded, "enabledmodule": loaded | builtin},
            attributes=attributes,
        )

    @staticmethod
    def _kconfig(reader: HostReader, release: str, config: Config) -> Mapping[str, str]:
        host = reader.host

        def candidates() -> Iterator[str]:  # joined only as far as the search goes
            if config.kconfig_file:
                yield config.kconfig_file
                return
            yield f"{host.proc}/config.gz"
            if release:
                yield f"{host.boot}/config-{release}"
                yield f"{host.lib_modules}/{release}/config"
                yield f"{host.usr_lib}/ostree-boot/config-{release}"
                yield f"{host.usr_lib}/kernel/config-{release}"

        for path in candidates():
            data = reader.read_bytes(path, required=bool(config.kconfig_file))
            if data is None:
                continue
            try:
                return _parsed_kconfig(path, (os.path.splitext(path)[1] == ".gz", data))
            except (OSError, EOFError, zlib.error) as e:
                reader.problem(path, f"not a valid gzip file ({e})")
                continue
        return {}

    def labels(self, features: Features, config: Config) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, value in features.attributes.get("version", {}).items():
            out[nfd_key(NAME, f"version.{key}")] = value
        kconfig = features.attributes.get("config", {})
        for opt in config.kernel_config_opts:
            if opt in kconfig:
                out[nfd_key(NAME, f"config.{opt}")] = "true" if kconfig[opt] in ("y", "m") else kconfig[opt]
        if features.attributes.get("selinux", {}).get("enabled") == "true":
            out[nfd_key(NAME, "selinux.enabled")] = "true"
        return out


SOURCE = KernelSource()
