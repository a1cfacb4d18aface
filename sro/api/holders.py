"""What holds a driver on a node: the holder scan's exit codes and its one-line JSON summary.

Why here: `sro driver holders` (the node side, `sro.node.holderscan`) writes the summary as the
holder-scan pod's termination message and the operator reads it back to say which processes keep a
driver upgrade waiting; the two never import each other, so the format is a contract in `api/`.

The summary is compact JSON on one line, at most `MAX_MESSAGE` bytes (the kubelet's limit on a
termination message), ASCII only:

    {"holders": [{"pid": 4242, "exe": "python3.11", "holds": "/dev/sro-simgpu0, libsimgpu.so.1",
                  "podUID": "0c6e..."}], "more": 2, "unreadable": [1]}

`exe` is the name of the process's executable, never its command line: the summary goes into the
SpecialResource's status and events, which many can read, and arguments can hold secrets (tokens,
passwords on a command line). `podUID` is there when the process runs in a Kubernetes pod (from its cgroup); `more` counts holders
left out to stay under the limit; `unreadable` lists (at most `MAX_UNREADABLE`) pids of processes
that could not be inspected, so "nothing found" is not proven. Each is left out when empty.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Exit codes of `sro driver holders`: the operator reads them as the scan pod's exit code.
EXIT_FREE = 0  # nothing holds the driver's devices or libraries
EXIT_ERROR = 1  # the scan could not run (no /proc, unknown driver files): the message says why
EXIT_HELD = 3  # at least one process holds them
EXIT_INCONCLUSIVE = 4  # none found, but some processes could not be inspected (permissions)

TERMINATION_LOG = "/dev/termination-log"  # where the scan pod writes the summary (its message path)
MAX_MESSAGE = 4096
MAX_EXECUTABLE = 100  # characters of an executable's name kept in the summary
MAX_UNREADABLE = 20  # pids of processes that could not be inspected, kept in the summary
HOLDS_SEPARATOR = ", "


@dataclass(frozen=True)
class Holder:
    """One process that holds a driver: its device nodes (`/dev/...`) and library file names."""

    pid: int
    executable: str  # the name of its executable (`python3.11`), no path, no arguments
    holds: tuple[str, ...]
    pod_uid: str = ""


@dataclass(frozen=True)
class Summary:
    holders: tuple[Holder, ...]
    more: int = 0  # holders left out of the message
    unreadable: tuple[int, ...] = ()  # pids of processes that could not be inspected

    @property
    def exit_code(self) -> int:
        if self.holders or self.more:
            return EXIT_HELD
        return EXIT_INCONCLUSIVE if self.unreadable else EXIT_FREE


def _short(name: str) -> str:
    return name if len(name) <= MAX_EXECUTABLE else name[: MAX_EXECUTABLE - 3] + "..."


def _entry(h: Holder) -> dict[str, Any]:
    out: dict[str, Any] = {"pid": h.pid, "exe": _short(h.executable), "holds": HOLDS_SEPARATOR.join(h.holds)}
    if h.pod_uid:
        out["podUID"] = h.pod_uid
    return out


def _dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=True)


def to_message(holders: Sequence[Holder], unreadable: Sequence[int] = (), limit: int = MAX_MESSAGE) -> str:
    """The one-line summary, whole holders only, `more` counting the rest, at most `limit` bytes."""
    entries = [_entry(h) for h in holders]
    tail: dict[str, Any] = {"unreadable": list(unreadable[:MAX_UNREADABLE])} if unreadable else {}
    for keep in range(len(entries), -1, -1):
        doc: dict[str, Any] = {"holders": entries[:keep]}
        if keep < len(entries):
            doc["more"] = len(entries) - keep
        text = _dumps(doc | tail)
        if len(text) <= limit:
            return text
    raise ValueError(f"a holder summary does not fit in {limit} bytes")  # only for a tiny limit


def from_message(text: str) -> Summary:
    """Parse a termination message written by `to_message`; ValueError when it is not one."""
    try:
        doc = json.loads(text)
        holders = tuple(
            Holder(
                pid=int(e["pid"]),
                executable=_short(str(e.get("exe", ""))),  # a "command" (older scans) is dropped
                holds=tuple(x for x in str(e.get("holds", "")).split(HOLDS_SEPARATOR) if x),
                pod_uid=str(e.get("podUID", "")),
            )
            for e in doc["holders"]
        )
        unreadable = tuple(int(p) for p in doc.get("unreadable", ()))
        return Summary(holders, int(doc.get("more", 0)), unreadable)
    except Exception as e:  # another pod's output: any failure (RecursionError too) is garbage
        raise ValueError(f"not a holder summary: {text[:80]!r}") from e
