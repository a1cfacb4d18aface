"""The few Linux syscalls the hook needs that Python 3.11 lacks: setns and fd-based bind mounts.

Why fds: a bind mount made on a path string re-resolves that string, and the image may have swapped
a symlink in since we checked it. With the new mount API (Linux >= 5.12) the mount is cloned from the
host file (open_tree), made read-only/nosuid/nodev while still detached (mount_setattr), and attached
to the exact inode we resolved safely (move_mount with the target as an O_PATH fd). On older kernels
the fallback is mount(2) on the `/proc/self/fd/N` magic link of that same fd, then a remount.
"""

from __future__ import annotations

import posix

from sro.node.runtime import syscalls
from sro.node.runtime.leanpath import fsencode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

CLONE_NEWNS = 0x00020000
_SYS_OPEN_TREE = 428
_SYS_MOVE_MOUNT = 429
_SYS_MOUNT_SETATTR = 442
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_AT_SYMLINK_NOFOLLOW = 0x100
_OPEN_TREE_CLONE = 1
_MOVE_MOUNT_F_EMPTY_PATH = 0x04
_MOVE_MOUNT_T_EMPTY_PATH = 0x40
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR_NOSUID = 0x2
_MOUNT_ATTR_NODEV = 0x4
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_REMOUNT = 32
_MS_BIND = 4096


def _check(ret: int, what: str) -> int:
    return syscalls.check(ret, what)


def setns(fd: int, nstype: int = CLONE_NEWNS) -> None:
    """Join the namespace behind `fd` (the process must be single-threaded for a mount namespace)."""
    _check(syscalls.setns(fd, nstype), "setns")


def _bind_new_api(source: str, target_fd: int, readonly: bool) -> None:
    tree = _check(
        syscalls.syscall(_SYS_OPEN_TREE, _AT_FDCWD, fsencode(source), _OPEN_TREE_CLONE | posix.O_CLOEXEC),
        f"open_tree {source}",
    )
    try:
        # struct mount_attr {attr_set, attr_clr, propagation, userns_fd}
        attr = syscalls.u64s(
            _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV | (_MOUNT_ATTR_RDONLY if readonly else 0), 0, 0, 0
        )
        _check(
            syscalls.syscall(_SYS_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH, attr, len(attr)),
            "mount_setattr",
        )
        _check(
            syscalls.syscall(
                _SYS_MOVE_MOUNT,
                tree,
                b"",
                target_fd,
                b"",
                _MOVE_MOUNT_F_EMPTY_PATH | _MOVE_MOUNT_T_EMPTY_PATH,
            ),
            "move_mount",
        )
    finally:
        posix.close(tree)


def _mount(source: str | None, target: str, flags: int) -> None:
    src = fsencode(source) if source is not None else None
    _check(syscalls.mount(src, fsencode(target), None, syscalls.CULong(flags), None), f"mount {target}")


def bind(
    source: str,
    target_fd: int,
    readonly: bool = True,
    reopen: Callable[[], int] | None = None,
    new_api: bool = True,
) -> None:
    """Bind-mount host `source` onto the inode behind `target_fd` (read-only, nosuid, nodev).

    `reopen` (fallback only) is a callable returning a fresh O_PATH fd of the target after the mount.
    """
    if new_api:
        _bind_new_api(source, target_fd, readonly)
        return
    _mount(source, f"/proc/self/fd/{target_fd}", _MS_BIND)
    # The fd still names the covered inode; `reopen` (the same name looked up again from its parent
    # directory fd, which crosses into the new mount) names the mount we just made.
    if reopen is not None:
        fd = reopen()
        try:
            flags = _MS_BIND | _MS_REMOUNT | _MS_NOSUID | _MS_NODEV | (_MS_RDONLY if readonly else 0)
            _mount(None, f"/proc/self/fd/{fd}", flags)
        finally:
            posix.close(fd)
