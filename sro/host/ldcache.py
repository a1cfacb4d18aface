"""The dynamic linker's cache (/etc/ld.so.cache): which sonames `dlopen("libx.so.1")` can find.

Why parse it rather than run `ldconfig -p`: the cache is what the dynamic loader itself reads, so a
soname listed here is one a plain `dlopen` by name resolves, with no tool in the image needed. The
runtime hook rebuilds a container's cache with the host's ldconfig after it injects a driver's
libraries; validation reads it to tell "not injected" from "injected but not loadable".

Format (glibc's `cache_file_new`, the only one glibc >= 2.32 writes; an old-format prefix is
skipped): the magic "glibc-ld.so.cache1.1", nlibs and the string table's length, then nlibs
24-byte entries (flags, key, value, osversion, hwcap); key and value are offsets of NUL-terminated
strings from the start of that header.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from sro.host.root import HostRoot

MAGIC = b"glibc-ld.so.cache1.1"
_HEADER = struct.Struct("<20sII")  # magic+version, nlibs, len_strings (then flags, extension, unused)
HEADER_SIZE = 48
_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion, hwcap
CACHE = Path("ld.so.cache")  # relative to the etc tree


class LdCacheError(ValueError):
    """The cache file is not one glibc wrote; the message says what is wrong with it."""


@dataclass(frozen=True)
class CacheEntry:
    soname: str  # the key dlopen matches: "libsimgpu.so.1"
    path: str  # the file it resolves to: "/lib/libsimgpu.so.1"
    flags: int  # architecture / ABI flags (e.g. 0x0303: libc6, x86-64)


def _string(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    if offset >= len(data) or end < 0:
        raise LdCacheError(f"string offset {offset} outside the file")
    return data[offset:end].decode("utf-8", errors="replace")


def parse(data: bytes) -> tuple[CacheEntry, ...]:
    """The entries of an ld.so.cache file's bytes, in the file's order (pure)."""
    start = data.find(MAGIC)
    if start < 0:
        raise LdCacheError("no glibc-ld.so.cache1.1 header (not a glibc linker cache)")
    if len(data) < start + HEADER_SIZE:
        raise LdCacheError("truncated header")
    _, nlibs, _ = _HEADER.unpack_from(data, start)
    table = start + HEADER_SIZE
    if len(data) < table + nlibs * _ENTRY.size:
        raise LdCacheError(f"truncated: {nlibs} entries announced, file too short for them")
    out = []
    for i in range(nlibs):
        flags, key, value, _, _ = _ENTRY.unpack_from(data, table + i * _ENTRY.size)
        out.append(CacheEntry(_string(data, start + key), _string(data, start + value), flags))
    return tuple(out)


def read(host: HostRoot) -> tuple[CacheEntry, ...]:
    """The entries of the linker cache of `host` (its etc tree); raises OSError or LdCacheError."""
    path = host.etc / CACHE
    try:
        return parse(path.read_bytes())
    except LdCacheError as e:
        raise LdCacheError(f"{path}: {e}") from None
