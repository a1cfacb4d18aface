"""Reading the node's files without ever raising: every failure becomes a Problem naming the path.

Why: sysfs and procfs are full of odd entries (files that vanish mid-scan, attributes that fail
with EIO or EACCES, garbage where hex should be). A discovery pass must report such a file and go
on with every other feature, and the publisher must know that a read failed so that it does not
remove a label only because it could not look. A HostReader collects the problems of one pass.

It can also record what it read (a shared `Recording`): `scripts/capture-host` uses that to copy exactly
the files discovery reads into a fake host tree, and the benchmark uses it as its baseline (reading
the same files with nothing else done). The daemon instead collects only the paths a pass looked at
(`visited`, no bytes, no stat per entry): what `sro.node.discovery.inputs` watches between passes.

The readers of one pass share a `PassCache`: a file two sources both read (the DMI product name) is
read once per pass, and `entries` lets a source read one directory listing instead of looking up a
file in each of many directories where the listing says it cannot be.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from sro.api.problems import Problem as Problem  # re-exported: the readers' findings
from sro.host.root import HostRoot

# Enough for /proc/cpuinfo of a large machine; anything bigger is not a feature file.
DEFAULT_LIMIT = 8 * 1024 * 1024
VALUE_LIMIT = 64 * 1024  # a one-value attribute (read_value): a sysfs attribute is at most a page


class Recording:
    """Every file (its bytes) and directory (its entries) that readers sharing it looked at, and
    every path they looked up and found absent (what the benchmark's full floor looks up too)."""

    def __init__(self) -> None:
        self.files: dict[Path, bytes] = {}
        self.dirs: dict[Path, list[tuple[str, bool]]] = {}
        self.absent: set[Path] = set()


class PassCache:
    """What one pass already read through `read_shared`: the value, or None for a missing file.
    Shared by the readers of one pass only: a later pass must see the node as it is then."""

    def __init__(self) -> None:
        self.values: dict[str, str | None] = {}


class HostReader:
    """Reads files of one HostRoot for one pass; collects problems (and, if asked, what it read)."""

    def __init__(
        self,
        host: HostRoot,
        *,
        recording: Recording | None = None,
        cache: PassCache | None = None,
        visited: set[Path | str] | None = None,
    ) -> None:
        self.host = host
        self.recording = recording
        self.visited = visited  # every path read, listed or looked up (found or not), if given
        self.cache = PassCache() if cache is None else cache
        self.problems: list[Problem] = []  # failed reads: the pass is incomplete
        self.warnings: list[Problem] = []  # bad content that was read fine (e.g. a bad line)

    def problem(self, path: Path | str, message: str) -> None:
        self.problems.append(Problem(str(path), message))

    def warn(self, path: Path | str, message: str) -> None:
        self.warnings.append(Problem(str(path), message))

    def read_bytes(
        self, path: Path | str, *, required: bool = False, limit: int = DEFAULT_LIMIT
    ) -> bytes | None:
        """The file's bytes, or None. A missing file is a problem only when `required`.

        `path` may be a str: a source reading hundreds of sysfs attributes joins them as strings,
        because a pathlib join costs more than the read itself. The file is read with raw
        os.read calls on the descriptor (no buffered file object around it: that doubled the
        cost of reading a sysfs attribute).
        """
        if self.visited is not None:
            self.visited.add(path)
        try:
            # O_NONBLOCK: a FIFO dropped where a feature file belongs must not hang the daemon;
            # only regular files are read (sysfs and procfs attributes are regular files).
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            if required:
                self.problem(path, "missing")
            if self.recording is not None:
                self.recording.absent.add(Path(path))
            return None
        except OSError as e:
            self._unreadable(path, e)
            return None
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                if stat.S_ISDIR(mode):
                    self.problem(path, "is a directory, expected a file")
                else:
                    self.problem(path, "not a regular file, ignored")
                return None
            data = _read_at_most(fd, limit + 1)
        except OSError as e:
            # ENODEV/ENXIO: the device behind a sysfs attribute went away; still a failed read.
            self._unreadable(path, e)
            return None
        finally:
            os.close(fd)
        if len(data) > limit:
            self.problem(path, f"larger than {limit} bytes, ignored")
            return None
        if self.recording is not None:
            self.recording.files[Path(path)] = data
        return data

    def _unreadable(self, path: Path | str, e: OSError) -> None:
        self.problem(path, f"unreadable ({errno.errorcode.get(e.errno or 0, e.errno)}: {e.strerror})")

    def read_text(
        self, path: Path | str, *, required: bool = False, limit: int = DEFAULT_LIMIT
    ) -> str | None:
        """The file's text (UTF-8), or None with a problem for undecodable content."""
        data = self.read_bytes(path, required=required, limit=limit)
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            self.problem(path, f"not UTF-8 text ({e.reason} at byte {e.start})")
            return None

    def read_value(self, path: Path | str, *, required: bool = False) -> str | None:
        """A one-value attribute file (sysfs style), stripped; None when missing or unreadable.

        read_text's work inlined: a pass reads one of these per attribute, hundreds on a GPU node."""
        data = self.read_bytes(path, required=required, limit=VALUE_LIMIT)
        if data is None:
            return None
        try:
            return data.decode("utf-8").strip()
        except UnicodeDecodeError as e:
            self.problem(path, f"not UTF-8 text ({e.reason} at byte {e.start})")
            return None

    def read_shared(self, path: Path | str) -> str | None:
        """`read_value` of a file other sources of the pass read too: read once per pass.

        Only a value read fine or a missing file is shared; a failed read is read (and reported)
        again by the next source, so each source still sees its own problem.
        """
        key = str(path)
        values = self.cache.values
        if key in values:
            return values[key]
        before = len(self.problems)
        value = self.read_value(key)
        if value is not None or len(self.problems) == before:
            values[key] = value
        return value

    def list_dir(self, path: Path | str, *, required: bool = False) -> list[str]:
        """Sorted entry names, [] when missing (a problem only when `required`) or unreadable.

        Names starting with "." are skipped: sysfs and procfs have none, NFD ignores hidden
        feature files, and fake trees keep empty directories in git with a `.keep` file.
        """
        names = self.entries(path)
        if names is None:
            if required:
                self.problem(path, "missing directory")
            return []
        return names

    def entries(self, path: Path | str) -> list[str] | None:
        """`list_dir`, but None (and no problem) when the directory is missing: for a listing that
        says whether an optional file can exist at all, where a missing directory says nothing."""
        if self.visited is not None:
            self.visited.add(path)
        try:
            with os.scandir(path) as it:
                if self.recording is None:
                    # the names only: whether an entry is a directory costs a stat per symlinked
                    # sysfs entry (all of /sys/bus/*/devices, /sys/class/*), and only a capture
                    # needs it
                    return sorted(e.name for e in it if not e.name.startswith("."))
                entries = sorted((e.name, _is_dir(e)) for e in it if not e.name.startswith("."))
        except FileNotFoundError:
            if self.recording is not None:
                self.recording.absent.add(Path(path))
            return None
        except NotADirectoryError:
            self.problem(path, "not a directory")
            return []
        except OSError as e:
            self.problem(path, f"cannot list ({e.strerror})")
            return []
        self.recording.dirs[Path(path)] = entries
        return [name for name, _ in entries]

    def is_char_device(self, path: Path | str) -> bool:
        """True for a real device node (a fake tree's regular file stand-in is not one)."""
        if self.visited is not None:
            self.visited.add(path)
        try:
            return stat.S_ISCHR(os.stat(path).st_mode)
        except FileNotFoundError:
            if self.recording is not None:
                self.recording.absent.add(Path(path))
            return False
        except OSError:
            return False

    def exists(self, path: Path | str) -> bool:
        if self.visited is not None:
            self.visited.add(path)
        ok = os.path.exists(path)
        if self.recording is not None:
            if not ok:
                self.recording.absent.add(Path(path))
            elif os.path.isdir(path):
                self.recording.dirs.setdefault(Path(path), [])
        return ok


_CHUNK = 64 * 1024  # one read takes a whole sysfs attribute (at most a page) or most procfs files


def _read_at_most(fd: int, size: int) -> bytes:
    """Up to `size` bytes from `fd`, reading until end of file (what `f.read(size)` does)."""
    data = os.read(fd, _CHUNK if size > _CHUNK else size)
    if not data or len(data) >= size:
        return data  # empty, or all that was asked for
    chunks = [data]  # a short read: read on until end of file (a second read, empty, for most)
    got = len(data)
    while got < size:
        chunk = os.read(fd, min(_CHUNK, size - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False
