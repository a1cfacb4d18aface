"""The node files the last discovery pass depended on, and whether any changed since.

Why: a pass comes every `core.sleepInterval` (60 s by default, 10 s as `sro install` sets it), so a
driver installed or removed, a device node made, a feature file dropped in features.d would reach
the labels only at the next pass; a SpecialResource being deleted waits that long for its device
labels to go. The pass itself says what it depends on: every path it read, listed or found missing
(`HostReader.visited`). Outside /sys and /proc those are few (here: 8 — the simulated driver's
device list, the runtime's recipes folder, /dev/nvidiactl, os-release, the features.d folder...)
and their stat changes when what they hold changes; a stat of each every second, between passes,
costs next to nothing. /sys and /proc are left out: there are hundreds of them and the kernel's
files do not change their stat when their content does; a pass still reads them every interval.

A path's signature is taken before the pass that reads it (from the previous pass's paths), so a
file that changes while a pass reads it makes another pass, not a missed change; a path new to
this pass is stat'ed right after it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from sro.host.root import HostRoot
from sro.node.discovery.config import Config
from sro.node.discovery.features import SourceResult
from sro.node.discovery.sources import scan

Signature = tuple[int, int, int, int] | None  # (inode, size, mtime ns, ctime ns); None: absent


def signature(path: str) -> Signature:
    try:
        st = os.stat(path)
    except OSError:  # gone, or unreadable now: either is a change from a stat that worked
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def watched(host: HostRoot, visited: Iterable[Path | str]) -> tuple[str, ...]:
    """The paths of a pass worth a stat between passes: all but those under the host's /sys and
    /proc (pure: no filesystem access)."""
    skip = tuple(f"{str(tree).rstrip('/')}/" for tree in (host.sys, host.proc))
    return tuple(sorted({p for p in map(str, visited) if not (p.rstrip("/") + "/").startswith(skip)}))


class InputWatch:
    """Call `before_pass()` before the pass reads anything, then `scan` (or run the pass collecting
    `visited`, then `after_pass(visited)`); `changed()` then says whether any watched path's stat
    differs from what the pass saw."""

    def __init__(self, host: HostRoot) -> None:
        self.host = host
        self.paths: tuple[str, ...] = ()
        self._seen: dict[str, Signature] = {}
        self._before: dict[str, Signature] = {}

    def before_pass(self) -> None:
        self._before = {p: signature(p) for p in self.paths}

    def after_pass(self, visited: Iterable[Path | str]) -> None:
        self.paths = watched(self.host, visited)
        self._seen = {p: self._before[p] if p in self._before else signature(p) for p in self.paths}

    def scan(self, config: Config, also: Iterable[Path | str] = ()) -> tuple[SourceResult, ...]:
        """A pass of every source (`sources.scan`) whose paths, and `also` (files the caller read
        for it: the config file), are the ones watched from now on."""
        visited: set[Path | str] = set(also)
        results = scan(self.host, config, visited=visited)
        self.after_pass(visited)
        return results

    def changed(self) -> list[str]:
        """The watched paths whose stat differs from what the last pass saw (none: [])."""
        return [p for p, sig in self._seen.items() if signature(p) != sig]
