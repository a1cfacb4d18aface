"""A minimal ELF64 shared object writer, so the simulated driver ships real libraries.

Why: the simulated driver must give containers driver libraries that behave like real ones to the
tools around them: `ldconfig` has to accept them (it wants an ELF shared object with a DT_SONAME in
its dynamic section) and `dlopen` has to load them (so a workload can check the library is really
there). The image has no compiler, so the few hundred bytes are laid out here by hand: one RW
PT_LOAD segment, a PT_DYNAMIC and a PT_GNU_STACK header, a SysV hash table, a dynamic symbol table
exporting read-only strings (`<prefix>_version`, ...), and section headers so `readelf` is happy.
"""

from __future__ import annotations

import platform
import struct
from collections.abc import Mapping

# e_machine values (elf.h)
MACHINES = {
    "x86_64": 62,
    "amd64": 62,
    "aarch64": 183,
    "arm64": 183,
    "ppc64le": 21,
    "s390x": 22,
    "riscv64": 243,
}

_PT_LOAD, _PT_DYNAMIC, _PT_GNU_STACK = 1, 2, 0x6474E551
_DT_NULL, _DT_HASH, _DT_STRTAB, _DT_SYMTAB, _DT_STRSZ, _DT_SYMENT, _DT_SONAME = 0, 4, 5, 6, 10, 11, 14
_SHT_PROGBITS, _SHT_STRTAB, _SHT_HASH, _SHT_DYNAMIC, _SHT_DYNSYM = 1, 3, 5, 6, 11
_SHF_WRITE, _SHF_ALLOC = 1, 2
_EHDR, _PHDR, _SHDR, _SYM, _DYN = 64, 56, 64, 24, 16


def elf_hash(name: bytes) -> int:
    """The SysV ELF hash function (System V ABI, "Hash Table")."""
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


def _align(n: int, a: int = 8) -> int:
    return (n + a - 1) // a * a


def shared_object(soname: str, symbols: Mapping[str, str], machine: str | None = None) -> bytes:
    """An ELF64 little-endian shared object with DT_SONAME `soname` exporting each symbol as a
    NUL-terminated read-only string (its value)."""
    arch = machine or platform.machine()
    if arch not in MACHINES:
        raise ValueError(f"no ELF machine number known for architecture {arch!r}")
    names = list(symbols)
    # .dynstr: "\0" soname "\0" names...
    dynstr = bytearray(b"\0")
    soname_off = len(dynstr)
    dynstr += soname.encode() + b"\0"
    name_offs = []
    for n in names:
        name_offs.append(len(dynstr))
        dynstr += n.encode() + b"\0"
    rodata = bytearray()
    data_offs = []
    for n in names:
        data_offs.append(len(rodata))
        rodata += symbols[n].encode() + b"\0"
    nsyms = len(names) + 1
    nbucket = max(1, len(names))
    shstr = b"\0.hash\0.dynsym\0.dynstr\0.rodata\0.dynamic\0.shstrtab\0"

    off_hash = _EHDR + 3 * _PHDR
    size_hash = 4 * (2 + nbucket + nsyms)
    off_dynsym = _align(off_hash + size_hash)
    off_dynstr = off_dynsym + _SYM * nsyms
    off_rodata = _align(off_dynstr + len(dynstr))
    off_dynamic = _align(off_rodata + len(rodata))
    dyn_entries = [
        (_DT_SONAME, soname_off),
        (_DT_HASH, off_hash),
        (_DT_STRTAB, off_dynstr),
        (_DT_SYMTAB, off_dynsym),
        (_DT_STRSZ, len(dynstr)),
        (_DT_SYMENT, _SYM),
        (_DT_NULL, 0),
    ]
    off_shstr = off_dynamic + _DYN * len(dyn_entries)
    off_shdrs = _align(off_shstr + len(shstr))
    load_end = off_shstr  # everything up to the end of .dynamic is mapped

    # hash table: bucket[h % nbucket] heads a chain through chain[]
    buckets = [0] * nbucket
    chains = [0] * nsyms
    for i, n in enumerate(names, start=1):
        b = elf_hash(n.encode()) % nbucket
        chains[i] = buckets[b]
        buckets[b] = i
    hash_bytes = struct.pack(f"<{2 + nbucket + nsyms}I", nbucket, nsyms, *buckets, *chains)

    dynsym = bytearray(_SYM)  # symbol 0 is the undefined symbol
    for name_off, data_off, n in zip(name_offs, data_offs, names, strict=True):
        st_info = (1 << 4) | 1  # STB_GLOBAL, STT_OBJECT
        size = len(symbols[n]) + 1
        dynsym += struct.pack("<IBBHQQ", name_off, st_info, 0, 4, off_rodata + data_off, size)

    dynamic = b"".join(struct.pack("<qQ", tag, val) for tag, val in dyn_entries)

    def sh(
        name: str, typ: int, flags: int, off: int, size: int, link: int = 0, info: int = 0, ent: int = 0
    ) -> bytes:
        name_idx = shstr.index(b"\0" + name.encode() + b"\0") + 1
        return struct.pack("<IIQQQQIIQQ", name_idx, typ, flags, off, off, size, link, info, 8, ent)

    shdrs = bytes(_SHDR) + b"".join(
        (
            sh(".hash", _SHT_HASH, _SHF_ALLOC, off_hash, size_hash, link=2, ent=4),
            sh(".dynsym", _SHT_DYNSYM, _SHF_ALLOC, off_dynsym, len(dynsym), link=3, info=1, ent=_SYM),
            sh(".dynstr", _SHT_STRTAB, _SHF_ALLOC, off_dynstr, len(dynstr)),
            sh(".rodata", _SHT_PROGBITS, _SHF_ALLOC, off_rodata, len(rodata)),
            sh(
                ".dynamic", _SHT_DYNAMIC, _SHF_ALLOC | _SHF_WRITE, off_dynamic, len(dynamic), link=3, ent=_DYN
            ),
        )
    )
    # .shstrtab is not loaded: its addr field must be 0
    shdrs += struct.pack(
        "<IIQQQQIIQQ", shstr.index(b".shstrtab"), _SHT_STRTAB, 0, 0, off_shstr, len(shstr), 0, 0, 1, 0
    )

    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # ELFCLASS64, little endian, version 1, SysV
    ehdr = ident + struct.pack(
        "<HHIQQQIHHHHHH",
        3,  # ET_DYN
        MACHINES[arch],
        1,
        0,  # no entry point
        _EHDR,
        off_shdrs,
        0,
        _EHDR,
        _PHDR,
        3,
        _SHDR,
        7,
        6,  # index of .shstrtab
    )
    phdrs = b"".join(
        (
            struct.pack("<IIQQQQQQ", _PT_LOAD, 6, 0, 0, 0, load_end, load_end, 0x1000),  # RW
            struct.pack(
                "<IIQQQQQQ",
                _PT_DYNAMIC,
                6,
                off_dynamic,
                off_dynamic,
                off_dynamic,
                len(dynamic),
                len(dynamic),
                8,
            ),
            struct.pack("<IIQQQQQQ", _PT_GNU_STACK, 6, 0, 0, 0, 0, 0, 16),  # non-executable stack
        )
    )
    out = bytearray(off_shdrs + len(shdrs))
    for off, blob in (
        (0, ehdr),
        (_EHDR, phdrs),
        (off_hash, hash_bytes),
        (off_dynsym, dynsym),
        (off_dynstr, dynstr),
        (off_rodata, rodata),
        (off_dynamic, dynamic),
        (off_shstr, shstr),
        (off_shdrs, shdrs),
    ):
        out[off : off + len(blob)] = blob
    return bytes(out)
