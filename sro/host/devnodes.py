"""Device nodes under a /dev tree: which are there, and what opening one says.

Why opening, not only stat(): a node can be present yet unusable. The device cgroup decides at
open(): EPERM means the container was not granted the device; a granted node of the simulated
driver (a major no kernel driver owns) gives ENXIO; a granted real GPU opens. So the errno of one
open() tells "granted" from "refused" on real and simulated hardware alike. Nodes are named as
containers see them (`/dev/x`); the HostRoot's dev tree stands for /dev (the host's /dev mounted
elsewhere in a pod, or a temp dir in tests).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from sro.host.root import HostRoot


@dataclass(frozen=True)
class NodeStat:
    """What stat() says about one device node; `kind` is "char", "absent" or "other"."""

    path: str  # as containers name it: /dev/sro-simgpu0
    host_path: str  # where it was looked at
    kind: str
    major: int = -1
    minor: int = -1
    detail: str = ""  # for "other": what it is instead (a regular file, a block device, an error)


@dataclass(frozen=True)
class OpenResult:
    """stat() plus the outcome of open(O_RDWR); `errno` 0 means it opened."""

    node: NodeStat
    errno: int = 0

    @property
    def error_name(self) -> str:
        return "opened" if self.errno == 0 else errno.errorcode.get(self.errno, str(self.errno))


def host_path(host: HostRoot, node: str) -> Path:
    """Where `/dev/x` lies in the host's dev tree."""
    if node != "/dev" and not node.startswith("/dev/"):
        raise ValueError(f"device node {node!r} is not under /dev")
    return host.dev / node[len("/dev/") :]


def stat_node(host: HostRoot, node: str) -> NodeStat:
    path = host_path(host, node)
    try:
        st = path.stat()
    except FileNotFoundError:
        return NodeStat(node, str(path), "absent")
    except OSError as e:
        return NodeStat(node, str(path), "other", detail=e.strerror or str(e))
    if not stat.S_ISCHR(st.st_mode):
        what = "a block device" if stat.S_ISBLK(st.st_mode) else "not a device node"
        return NodeStat(node, str(path), "other", detail=what)
    return NodeStat(node, str(path), "char", os.major(st.st_rdev), os.minor(st.st_rdev))


def open_node(host: HostRoot, node: str) -> OpenResult:
    """stat() the node and, when it is a character device, open and close it again."""
    st = stat_node(host, node)
    if st.kind != "char":
        return OpenResult(st, errno.ENOENT if st.kind == "absent" else errno.ENODEV)
    return OpenResult(st, _open_errno(st.host_path))


def _open_errno(path: str) -> int:
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        return e.errno or errno.EIO
    os.close(fd)
    return 0


def matching_nodes(host: HostRoot, pattern: str) -> tuple[str, ...]:
    """Nodes `/dev/<prefix><N><suffix>` present for a pattern with one `{index}` or `{minor}`."""
    directory, name = os.path.split(pattern)
    parts = name.replace("{minor}", "{index}").split("{index}")
    if len(parts) != 2:
        raise ValueError(f"device node pattern {pattern!r} must hold exactly one {{index}} or {{minor}}")
    prefix, suffix = parts
    try:
        names = os.listdir(host_path(host, directory) if directory != "/dev" else host.dev)
    except (FileNotFoundError, NotADirectoryError):
        return ()
    found = []
    for n in names:
        digits = n[len(prefix) : len(n) - len(suffix) if suffix else None]
        if n.startswith(prefix) and n.endswith(suffix) and digits.isascii() and digits.isdigit():
            found.append((int(digits), f"{directory}/{n}"))
    return tuple(p for _, p in sorted(found))


def probe_device(host: HostRoot, major: int, minor: int) -> int | None:
    """Create a node c major:minor in the dev tree, open it, remove it: the errno the device
    cgroup gives for a device nobody listed (0: it opened). None when the node cannot be made
    (no CAP_MKNOD, a read-only /dev): nothing can be concluded then."""
    path = host.dev / f".sro-validate-{os.getpid()}-{major}-{minor}"
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(major, minor))
    except OSError:
        return None
    try:
        return _open_errno(str(path))
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
