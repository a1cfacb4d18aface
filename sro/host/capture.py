"""Writing what discovery read on a real host into a fake host tree of real files.

`scripts/capture-host` runs one discovery pass with a Recording, then `write_tree` copies every
file read (its exact bytes) and every directory listed (with empty entries for names that were
listed but never opened; a `.keep` in each empty one) under `dest`, relative to the HostRoot's trees. Symlinked sysfs
directories become plain directories: readers only ever follow them.
"""

from __future__ import annotations

from pathlib import Path

from sro.host.reading import Recording
from sro.host.root import HostRoot


def _relative(host: HostRoot, path: Path) -> Path | None:
    for name, tree in host.trees().items():
        try:
            rel = path.relative_to(tree)
        except ValueError:
            continue
        target = HostRoot.at("/").trees()[name]
        return target.relative_to("/") / rel
    return None


def write_tree(recording: Recording, host: HostRoot, dest: Path) -> int:
    """Write the recorded files and directories under `dest`; returns the number of files."""
    count = 0
    for path, entries in sorted(recording.dirs.items()):
        rel = _relative(host, path)
        if rel is None:
            continue
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name, is_dir in entries:
            entry = dest / rel / name
            if is_dir:
                entry.mkdir(parents=True, exist_ok=True)
    for path, data in sorted(recording.files.items()):
        rel = _relative(host, path)
        if rel is None:
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_dir():
            continue
        target.write_bytes(data)
        count += 1
    keep_empty_dirs(dest)
    return count


def keep_empty_dirs(dest: Path) -> None:
    """Put a `.keep` file in each empty directory: git keeps no empty ones, readers skip dotfiles."""
    for d in sorted(dest.rglob("*")):
        if d.is_dir() and not any(d.iterdir()):
            (d / ".keep").write_bytes(b"")
