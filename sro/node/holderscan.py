"""Which processes on this node hold a driver: its device nodes open, or its libraries mapped.

Why: a driver can only be replaced once nothing uses it. The operator drains the node, then runs
`sro driver holders` there (the holder-scan pod, `sro/manifests/upgrade`) to learn whether anything
still holds the driver, and names what does. Like `lsof`/`fuser`, from /proc:

- an open file descriptor (`/proc/<pid>/fd/*`, stat()ed through the magic link, so O_PATH
  descriptors count too) that is a character device with one of the driver's device numbers; for a
  simulated driver the exact (major, minor) of its device and control nodes, from its devices.json
  and the nodes under the dev root; for real hardware every minor of the driver's majors: those its
  nodes under the dev root use, the character drivers of /proc/devices named like its nodes
  (`nvidia-frontend`, `nvidia-uvm`, `nvidia-caps`, ...: one kernel driver each), for NVIDIA's recipe
  the NVIDIA driver's fixed major 195 (registered by no module under the simulated NVIDIA driver),
  and the majors a simulated NVIDIA driver recorded in its devices.json (its uvm and caps majors are
  picked free ones, not in /proc/devices either). A node is shown by its path where the dev root or
  devices.json names it, else as `char <major>:<minor> (<driver>)`;
- a mapping (`/proc/<pid>/maps`) of one of the recipe's libraries: by file name against its globs
  (what a container sees under its own path, and a file an upgrade already replaced, shown
  `(deleted)`) or by the inode of the files under the driver root.

The parsing is pure (tests feed it text); the reading takes the proc root, driver root and dev root
as parameters, so tests point them at fake trees. A process that exits mid-scan is skipped; one that
cannot be inspected (permissions) is counted, because a scan that could not look is not a clean one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from sro.api.holders import Holder
from sro.api.recipes import SIMULATED_DEVICE_LIST, Recipe
from sro.node.runtime import driverfiles, namematch

_GONE = (errno.ENOENT, errno.ESRCH)
NVIDIA_VENDOR = "10de"  # PCI vendor of NVIDIA's recipe
NVIDIA_MAJOR = 195  # the NVIDIA driver's fixed character major: nvidia<minor>, nvidiactl, nvidia-modeset
_NOT_FILES = ("socket:", "pipe:", "anon_inode:")  # fd link texts that cannot be device nodes
# kubelet's pod cgroups: ".../pod<uid>/<container>" (cgroupfs) or "...-pod<uid_with_underscores>.slice"
# (systemd); a static pod's uid is a 32-digit hash without dashes.
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{12})(?![0-9a-f])"
)


@dataclass(frozen=True)
class Targets:
    """What counts as holding the driver, with the name each is shown by."""

    devices: Mapping[tuple[int, int], str] = field(default_factory=dict)  # (major, minor) -> node
    majors: Mapping[int, str] = field(default_factory=dict)  # any minor of these majors -> a node
    library_globs: tuple[str, ...] = ()
    library_files: Mapping[tuple[int, int], str] = field(default_factory=dict)  # (st_dev, st_ino) -> name

    def device(self, rdev: int) -> str | None:
        major, minor = os.major(rdev), os.minor(rdev)
        exact = self.devices.get((major, minor))
        if exact is not None:
            return exact
        driver = self.majors.get(major)
        return None if driver is None else f"char {major}:{minor} ({driver})"

    def library(self, mapping: FileMapping) -> str | None:
        name = os.path.basename(mapping.path)
        if mapping.inode and (mapping.dev, mapping.inode) in self.library_files:
            return self.library_files[mapping.dev, mapping.inode]
        if name and any(namematch.match(name, g) for g in self.library_globs):
            return name
        return None

    @property
    def found_on_node(self) -> bool:
        """Whether any device node or library file of the driver was found (globs always match)."""
        return bool(self.devices or self.majors or self.library_files)


@dataclass(frozen=True)
class FileMapping:
    """One line of /proc/<pid>/maps that maps a file."""

    dev: int  # os.makedev(major, minor) of the file's filesystem
    inode: int
    path: str  # without a trailing " (deleted)"


@dataclass(frozen=True)
class Scan:
    holders: tuple[Holder, ...]
    unreadable: tuple[int, ...]  # pids that could not be inspected


# --- pure parsing -----------------------------------------------------------------------------


def parse_maps(text: str) -> Iterator[FileMapping]:
    """The file mappings of a maps file (anonymous and special ones like [heap] are left out)."""
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        try:
            major, minor = (int(x, 16) for x in parts[3].split(":"))
            inode = int(parts[4])
        except ValueError:
            continue
        path = parts[5].removesuffix(" (deleted)")
        yield FileMapping(os.makedev(major, minor), inode, path)


def mapped_libraries(maps_text: str, targets: Targets) -> list[str]:
    """The recipe's libraries a maps file maps, each once, in order of appearance."""
    found: dict[str, None] = {}
    for m in parse_maps(maps_text):
        name = targets.library(m)
        if name is not None:
            found.setdefault(name)
    return list(found)


def executable_name(exe_target: str, comm: str = "") -> str:
    """The name of a process's executable from its /proc/<pid>/exe link (`[comm]` where there is none:
    a kernel thread, or a link the scan may not read). Never the command line: the name goes into
    status and events, and arguments can hold secrets."""
    name = os.path.basename(exe_target.removesuffix(" (deleted)")).replace("\n", " ").strip()
    return name or f"[{comm.strip()}]"


def pod_uid(cgroup_text: str) -> str:
    """The Kubernetes pod uid in a /proc/<pid>/cgroup, or "" for a process outside any pod."""
    m = _POD_UID.search(cgroup_text)
    if m is None:
        return ""
    return m.group(1).replace("_", "-")


def char_drivers(proc_devices: str, prefix: str) -> dict[int, str]:
    """major -> name of the character drivers in a /proc/devices text whose name starts with `prefix`."""
    out: dict[int, str] = {}
    for line in proc_devices.splitlines():
        if line.strip().lower().startswith("block devices"):
            break
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].startswith(prefix):
            out.setdefault(int(parts[0]), parts[1])
    return out


def recorded_nodes(doc: object) -> tuple[dict[tuple[int, int], str], dict[int, str]]:
    """The nodes and majors a simulated NVIDIA driver lists in its devices.json: `nodes` (path, major,
    minor) and `majors` (kind -> major: nvidia, uvm, caps), as (major, minor) -> path and major -> name."""
    if not isinstance(doc, dict):
        return {}, {}
    nodes: dict[tuple[int, int], str] = {}
    for n in doc.get("nodes") or []:
        if isinstance(n, dict) and isinstance(n.get("major"), int) and isinstance(n.get("minor"), int):
            nodes[n["major"], n["minor"]] = str(n.get("path") or f"char {n['major']}:{n['minor']}")
    majors: dict[int, str] = {}
    recorded = doc.get("majors")
    for kind, major in recorded.items() if isinstance(recorded, dict) else ():
        if isinstance(major, int):
            majors.setdefault(major, "nvidia" if kind == "nvidia" else f"nvidia-{kind}")
    return nodes, majors


def simulated_devices(doc: object) -> dict[tuple[int, int], str]:
    """(major, minor) -> node of a simulated driver's devices.json document (partial ones too)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("major"), int):
        return {}
    major = doc["major"]
    out: dict[tuple[int, int], str] = {}
    entries = [(d, "deviceNode") for d in doc.get("devices") or []]
    entries += [(c, "path") for c in doc.get("controlNodes") or []]
    for entry, key in entries:
        if isinstance(entry, dict) and isinstance(entry.get("minor"), int):
            out[major, entry["minor"]] = str(entry.get(key) or f"char {major}:{entry['minor']}")
    return out


# --- reading the node -------------------------------------------------------------------------


def driver_majors(recipe: Recipe, proc_devices: str) -> dict[int, str]:
    """major -> driver of a hardware recipe's kernel drivers: /proc/devices' character drivers named
    like its nodes, and NVIDIA's fixed major for NVIDIA's recipe."""
    majors = {NVIDIA_MAJOR: "nvidia"} if recipe.pci_vendor == NVIDIA_VENDOR else {}
    prefix = _node_prefix(recipe)
    if prefix:
        for major, name in char_drivers(proc_devices, prefix).items():
            majors.setdefault(major, name)
    return majors


def _node_prefix(recipe: Recipe) -> str:
    return os.path.basename(recipe.device_node).split("{", 1)[0]


def targets_for(recipe: Recipe, driver_root: str, dev_root: str, proc_root: str = "/proc") -> Targets:
    """What holding `recipe`'s driver means on this node (its files under the roots; `proc_root` for
    /proc/devices: the host's, as the scan's)."""
    devices: dict[tuple[int, int], str] = {}
    majors: dict[int, str] = {}
    doc: object = None
    with (
        contextlib.suppress(OSError, ValueError),
        open(os.path.join(driver_root, SIMULATED_DEVICE_LIST)) as f,
    ):
        doc = json.load(f)
    if recipe.simulated:
        devices.update(simulated_devices(doc))
    else:
        nodes_recorded, majors_recorded = recorded_nodes(doc)
        devices.update(nodes_recorded)
        majors.update(
            driver_majors(recipe, _read(os.path.join(proc_root, "devices")).decode(errors="replace"))
        )
        for major, name in majors_recorded.items():
            majors.setdefault(major, name)
    nodes = [*driverfiles.find_devices(recipe, dev_root), *driverfiles.find_control_nodes(recipe, dev_root)]
    for node in nodes:
        devices.setdefault((node.major, node.minor), node.path)
        if not recipe.simulated:
            majors.setdefault(node.major, node.path)
    if not recipe.simulated:
        for path, rdev in _family_nodes(recipe, dev_root):
            devices.setdefault((os.major(rdev), os.minor(rdev)), path)
            majors.setdefault(os.major(rdev), path)
    globs = tuple(g for group in recipe.libraries.values() for g in group)
    files: dict[tuple[int, int], str] = {}
    for lib in driverfiles.find_libraries(driver_root, globs, set()):
        with contextlib.suppress(OSError):
            st = os.stat(lib.host_path)
            files[st.st_dev, st.st_ino] = os.path.basename(lib.container_path)
    return Targets(devices, majors, globs, files)


def _family_nodes(recipe: Recipe, dev_root: str) -> Iterator[tuple[str, int]]:
    """Char nodes named like the recipe's (`/dev/nvidia*`, and inside `/dev/nvidia-caps/`)."""
    prefix = _node_prefix(recipe)
    if not prefix:
        return
    container_dir = os.path.dirname(recipe.device_node)
    host_dir = driverfiles.dev_path(dev_root, container_dir)
    for name in _listdir(host_dir):
        if not name.startswith(prefix):
            continue
        path = os.path.join(host_dir, name)
        yield from _char(path, f"{container_dir}/{name}")
        if os.path.isdir(path) and not os.path.islink(path):
            for sub in _listdir(path):
                yield from _char(os.path.join(path, sub), f"{container_dir}/{name}/{sub}")


def _char(path: str, shown: str) -> Iterator[tuple[str, int]]:
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if stat.S_ISCHR(st.st_mode):
            yield shown, st.st_rdev


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


class _Unreadable(Exception):
    """This process exists but cannot be inspected."""


def _gone(e: OSError) -> bool:
    return e.errno in _GONE


def held_devices(proc_root: str, pid: int, targets: Targets) -> list[str]:
    """The driver's device nodes `pid` has descriptors of (O_PATH ones included)."""
    fd_dir = os.path.join(proc_root, str(pid), "fd")
    try:
        fds = os.listdir(fd_dir)
    except OSError as e:
        if _gone(e):
            return []
        raise _Unreadable from e
    found: dict[str, None] = {}
    for fd in fds:
        link = os.path.join(fd_dir, fd)
        try:
            if os.readlink(link).startswith(_NOT_FILES):
                continue
            st = os.stat(link)  # through the magic link: the open file itself, not a path lookup
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EPERM):
                raise _Unreadable from e
            continue  # closed since listdir, or a file that cannot be stat()ed: not a device
        if stat.S_ISCHR(st.st_mode):
            name = targets.device(st.st_rdev)
            if name is not None:
                found.setdefault(name)
    return list(found)


def held_libraries(proc_root: str, pid: int, targets: Targets) -> list[str]:
    """The recipe's libraries `pid` maps."""
    try:
        with open(os.path.join(proc_root, str(pid), "maps"), encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        if _gone(e):
            return []
        raise _Unreadable from e
    return mapped_libraries(text, targets)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def executable_of(proc_root: str, pid: int) -> str:
    """The executable's name of `pid` (its exe link, readable with ptrace; comm, readable for every
    process, where not)."""
    base = os.path.join(proc_root, str(pid))
    try:
        target = os.readlink(f"{base}/exe")
    except OSError:
        target = ""
    return executable_name(target, _read(f"{base}/comm").decode(errors="replace"))


def pids(proc_root: str) -> list[int]:
    """The processes under `proc_root`; OSError when it cannot be listed (no /proc there)."""
    return sorted(int(n) for n in os.listdir(proc_root) if n.isdigit())


def scan(proc_root: str, targets: Targets, skip: Iterable[int] = ()) -> Scan:
    """Every process under `proc_root` (but `skip`) holding one of `targets`."""
    skipped = set(skip)
    holders: list[Holder] = []
    unreadable: list[int] = []
    for pid in pids(proc_root):
        if pid in skipped:
            continue
        try:
            holds = held_devices(proc_root, pid, targets) if targets.devices or targets.majors else []
            holds += held_libraries(proc_root, pid, targets)
        except _Unreadable:
            if os.path.isdir(os.path.join(proc_root, str(pid))):
                unreadable.append(pid)
            continue
        if not holds:
            continue
        uid = pod_uid(_read(os.path.join(proc_root, str(pid), "cgroup")).decode(errors="replace"))
        holders.append(Holder(pid, executable_of(proc_root, pid), tuple(holds), uid))
    return Scan(tuple(holders), tuple(unreadable))
