"""The text format of the simulated NVML state file (pure): one record per line.

Why its own module: the writer (`sro.devices.simnvml_state`), its tests and anything that checks a
state file read and write the same lines. A line is `<kind> key=value key=value ...`; a value has
no spaces because `%`, space and every byte outside 0x21-0x7e are written as %XX (the C reader in
native/simnvml decodes the same way). The kinds and keys are fixed in the design; readers ignore
kinds and keys they do not know, so a newer writer never breaks an older library.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


class StateFormatError(ValueError):
    """A state file line is not `<kind> key=value ...`."""


def encode(value: object) -> str:
    """A value with no spaces: `%`, space and bytes outside 0x21-0x7e as %XX."""
    out = []
    for byte in str(value).encode():
        out.append(chr(byte) if 0x21 <= byte <= 0x7E and byte != 0x25 else f"%{byte:02X}")
    return "".join(out)


def decode(text: str) -> str:
    return re.sub(rb"%([0-9A-Fa-f]{2})", lambda m: bytes([int(m.group(1), 16)]), text.encode()).decode()


def line(kind: str, **values: object) -> str:
    return " ".join([kind, *(f"{k}={encode(v)}" for k, v in values.items())])


@dataclass(frozen=True)
class Record:
    kind: str
    values: Mapping[str, str]


def parse(text: str) -> list[Record]:
    """The records of a state file (values decoded); StateFormatError on a malformed line."""
    records = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        kind, *pairs = raw.split(" ")
        values = {}
        for pair in pairs:
            key, eq, value = pair.partition("=")
            if not eq or not key:
                raise StateFormatError(f"line {n}: {pair!r} is not key=value")
            values[key] = decode(value)
        records.append(Record(kind, values))
    return records


def records(text: str, kind: str) -> list[Mapping[str, str]]:
    """The values of every `kind` record of a state file (for readers and tests)."""
    return [r.values for r in parse(text) if r.kind == kind]
