"""Resolve and create paths inside a container's root filesystem without ever leaving it.

Why: the root filesystem belongs to the image, and an image is hostile input. Every CVE in NVIDIA's
toolkit history of this code (CVE-2024-0132/0133, CVE-2025-23359/23267) is a path in the image that
a root process on the host followed out of the rootfs. So every path here is resolved relative to an
fd of the root, never as a string joined to it, and every action (mkdir, mknod, bind-mount target,
file write) happens on an fd or on a single name relative to a directory fd: a symlink swapped in
between check and use cannot redirect it.

Two resolvers with the same semantics, chosen at run time:
  * openat2(2) (Linux >= 5.6, syscall 437) with RESOLVE_BENEATH (or RESOLVE_IN_ROOT) and
    RESOLVE_NO_MAGICLINKS: the kernel does the whole walk.
  * a careful fallback: one component at a time with O_PATH|O_NOFOLLOW, symlinks read and spliced in
    by hand, `..` popping a stack of directory fds, at most 40 links.

Policies: `beneath` (default, like Go's os.Root): symlinks are followed only when they stay inside:
an absolute symlink or a `..` that climbs above the root is refused (EscapeError). `in-root` (like
securejoin / RESOLVE_IN_ROOT): absolute links and `..` are clamped to the root instead. In both, the
last component of a path we create or mount on is never followed: a symlink there is refused.
"""

from __future__ import annotations

import errno
import posix
import stat

from sro.node.runtime import syscalls
from sro.node.runtime.leanpath import fsencode

TYPE_CHECKING = False  # no typing/contextlib/collections at run time: the hook imports this module
if TYPE_CHECKING:
    from typing import Literal, TypeAlias

    Policy: TypeAlias = Literal["beneath", "in-root"]

_SYS_OPENAT2 = 437  # the same number on every architecture (generic syscall table)
_RESOLVE_NO_XDEV = 0x01
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE_IN_ROOT = 0x10
_MAX_LINKS = 40


class PathError(OSError):
    """A path inside the rootfs cannot be used safely; the message names it and says why."""


class EscapeError(PathError):
    """Resolving a path would leave the rootfs (absolute symlink, `..` above the root, magic link)."""


def _openat2(dirfd: int, path: str, flags: int, resolve: int) -> int:
    how = syscalls.u64s(flags, 0, resolve)  # struct open_how {flags, mode, resolve}
    fd = syscalls.syscall(_SYS_OPENAT2, dirfd, fsencode(path), how, len(how))
    if fd < 0:
        err = syscalls.get_errno()
        raise OSError(err, posix.strerror(err), path)
    return int(fd)


def openat2_available() -> bool:
    """Whether this kernel has openat2 (ENOSYS on < 5.6, EPERM under some seccomp filters)."""
    try:
        posix.close(_openat2(-100, "/", posix.O_PATH | posix.O_CLOEXEC, 0))  # -100 = AT_FDCWD
    except OSError:
        return False
    return True


def split(path: str) -> list[str]:
    """Components of a path inside the rootfs (leading `/` means the rootfs' root)."""
    return [p for p in path.split("/") if p and p != "."]


class Root:
    """An open container root; every method takes a path inside it ("/etc/ld.so.cache")."""

    def __init__(self, root: str | int, policy: Policy = "beneath", use_openat2: bool | None = None) -> None:
        if isinstance(root, int):
            self.fd = posix.dup(root)
        else:
            self.fd = posix.open(root, posix.O_PATH | posix.O_DIRECTORY | posix.O_CLOEXEC)
        self.policy: Policy = policy
        self.use_openat2 = openat2_available() if use_openat2 is None else use_openat2

    def close(self) -> None:
        posix.close(self.fd)

    def __enter__(self) -> Root:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- resolution -------------------------------------------------------------------------------

    def open_dir(self, path: str, create: bool = False) -> int:
        """An O_PATH fd of directory `path`, following links inside the root only; mkdir -p if asked."""
        parts = split(path)
        try:
            return self._resolve(parts)
        except FileNotFoundError:
            if not create:
                raise
        # Create the missing tail one component at a time; each step is resolved from the root again,
        # so a link swapped in between steps is still confined by the resolver.
        for i in range(1, len(parts) + 1):
            try:
                posix.close(self._resolve(parts[:i]))
                continue
            except FileNotFoundError:
                pass
            parent = self._resolve(parts[: i - 1])
            try:
                if parts[i - 1] == "..":
                    raise PathError(errno.ENOENT, "cannot create '..'", path)
                try:  # noqa: SIM105 (not contextlib: 0.6 ms of the hook's start)
                    posix.mkdir(parts[i - 1], 0o755, dir_fd=parent)
                except FileExistsError:
                    pass
            finally:
                posix.close(parent)
        return self._resolve(parts)

    def _resolve(self, parts: list[str]) -> int:
        path = "/".join(parts) or "."
        try:
            if self.use_openat2:
                return self._resolve_openat2(path)
            return self._resolve_walk(parts)
        except EscapeError:
            raise
        except OSError as e:
            if e.errno == errno.ENOTDIR:
                raise PathError(e.errno, "a component is not a directory", "/" + path) from None
            if e.errno == errno.ELOOP:
                raise EscapeError(e.errno, "too many or magic symlinks", "/" + path) from None
            raise

    def _resolve_openat2(self, path: str) -> int:
        base = _RESOLVE_BENEATH if self.policy == "beneath" else _RESOLVE_IN_ROOT
        flags = posix.O_PATH | posix.O_DIRECTORY | posix.O_CLOEXEC
        for _ in range(16):  # EAGAIN: the kernel saw a concurrent rename during `..`; retry
            try:
                return _openat2(self.fd, path, flags, base | _RESOLVE_NO_MAGICLINKS)
            except OSError as e:
                if e.errno == errno.EXDEV:
                    raise EscapeError(e.errno, "resolving it leaves the rootfs", "/" + path) from None
                if e.errno != errno.EAGAIN:
                    raise OSError(e.errno, e.strerror, "/" + path) from None
        raise PathError(errno.EAGAIN, "kept racing with renames", "/" + path)

    def _resolve_walk(self, parts: list[str]) -> int:
        beneath = self.policy == "beneath"
        fd = self._walk(parts, "/" + "/".join(parts), dotdot_escapes=beneath, absolute_escapes=beneath)
        if not stat.S_ISDIR(posix.fstat(fd).st_mode):
            posix.close(fd)
            raise OSError(errno.ENOTDIR, "not a directory", parts[-1])
        return fd

    def _walk(self, parts: list[str], shown: str, *, dotdot_escapes: bool, absolute_escapes: bool) -> int:
        """An O_PATH fd of what `parts` names, one component at a time with O_NOFOLLOW: a link's text
        is read and spliced in, so the kernel never follows a link (magic ones included) and nothing
        outside the root is reached. A `..` above the root is refused (`dotdot_escapes`) or stays at the
        root; an absolute link is refused (`absolute_escapes`) or starts again from the root, as the
        container will see it. Every component but the last must be a directory."""
        stack = [posix.dup(self.fd)]
        todo = parts[::-1]  # a stack: the next component is at the end
        links = 0
        try:
            while todo:
                comp = todo.pop()
                if comp in ("", "."):
                    continue
                if comp == "..":
                    if len(stack) > 1:
                        posix.close(stack.pop())
                    elif dotdot_escapes:
                        raise EscapeError(errno.EXDEV, "'..' climbs above the rootfs", shown)
                    continue
                fd = posix.open(comp, posix.O_PATH | posix.O_NOFOLLOW | posix.O_CLOEXEC, dir_fd=stack[-1])
                st = posix.fstat(fd)
                if stat.S_ISLNK(st.st_mode):
                    posix.close(fd)
                    links += 1
                    if links > _MAX_LINKS:
                        raise EscapeError(errno.ELOOP, "too many symlinks", shown)
                    target = posix.readlink(comp, dir_fd=stack[-1])
                    if target.startswith("/"):
                        if absolute_escapes:
                            raise EscapeError(
                                errno.EXDEV, f"absolute symlink -> {target} leaves the rootfs", "/" + comp
                            )
                        while len(stack) > 1:
                            posix.close(stack.pop())
                    todo.extend(reversed(target.split("/")))
                    continue
                if not todo:
                    return fd  # the last component, whatever it is
                if not stat.S_ISDIR(st.st_mode):
                    posix.close(fd)
                    raise OSError(errno.ENOTDIR, "not a directory", comp)
                stack.append(fd)
            return stack.pop()
        finally:
            for fd in stack:
                posix.close(fd)

    def stat_inside(self, path: str) -> posix.stat_result:
        """stat of what `path` names, every symlink (the last one too) followed inside the root only:
        an absolute link starts again from the rootfs' root (as the container will see it), a `..`
        above the root is refused (EscapeError) and so never anything outside. For comparing an
        image's link with a host file only."""
        try:
            fd = self._walk(split(path), path, dotdot_escapes=True, absolute_escapes=False)
        except EscapeError:
            raise
        except OSError as e:
            if e.errno == errno.ENOTDIR:
                raise PathError(e.errno, "a component is not a directory", path) from None
            raise
        try:
            return posix.fstat(fd)
        finally:
            posix.close(fd)

    # -- leaf operations (the last component is never followed) ----------------------------------

    def _parent(self, path: str, create: bool) -> tuple[int, str]:
        parts = split(path)
        if not parts or parts[-1] == "..":
            raise PathError(errno.EINVAL, "not a usable file name", path)
        return self.open_dir("/".join(parts[:-1]), create=create), parts[-1]

    def lstat(self, path: str) -> posix.stat_result | None:
        """lstat of `path` (its directory resolved safely); None if it does not exist."""
        parent, name = self._parent(path, create=False)
        try:
            return posix.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            posix.close(parent)

    def open_leaf(self, path: str) -> int:
        """An O_PATH fd of `path` itself (a symlink there is opened, not followed)."""
        parent, name = self._parent(path, create=False)
        try:
            return posix.open(name, posix.O_PATH | posix.O_NOFOLLOW | posix.O_CLOEXEC, dir_fd=parent)
        finally:
            posix.close(parent)

    def mount_target(self, path: str, kind: Literal["file", "dir"]) -> int:
        """An O_PATH fd to bind-mount on: the image's own file/dir, or a new empty one.

        Refuses a symlink or a different kind of file there (a directory where a library goes, a FIFO,
        a device): the image must not decide what the mount lands on.
        """
        parent, name = self._parent(path, create=True)
        try:
            try:
                if kind == "dir":
                    posix.mkdir(name, 0o755, dir_fd=parent)
                else:
                    posix.close(
                        posix.open(
                            name,
                            posix.O_WRONLY
                            | posix.O_CREAT
                            | posix.O_EXCL
                            | posix.O_NOFOLLOW
                            | posix.O_CLOEXEC,
                            0o644,
                            dir_fd=parent,
                        )
                    )
            except FileExistsError:
                pass
            fd = posix.open(name, posix.O_PATH | posix.O_NOFOLLOW | posix.O_CLOEXEC, dir_fd=parent)
            mode = posix.fstat(fd).st_mode
            want = stat.S_ISDIR(mode) if kind == "dir" else stat.S_ISREG(mode)
            if not want:
                posix.close(fd)
                what = (
                    "a symlink" if stat.S_ISLNK(mode) else f"not a {'directory' if kind == 'dir' else 'file'}"
                )
                raise PathError(errno.EEXIST, f"the image has {what} there; refusing to mount on it", path)
            return fd
        finally:
            posix.close(parent)

    def make_device(self, path: str, major: int, minor: int, mode: int) -> None:
        """mknod a character device; an existing node is kept only if it is the very same device."""
        parent, name = self._parent(path, create=True)
        try:
            try:
                posix.mknod(name, stat.S_IFCHR | mode, posix.makedev(major, minor), dir_fd=parent)
                return
            except FileExistsError:
                pass
            st = posix.stat(name, dir_fd=parent, follow_symlinks=False)
            if not stat.S_ISCHR(st.st_mode) or st.st_rdev != posix.makedev(major, minor):
                raise PathError(errno.EEXIST, f"something else is already there (mode {st.st_mode:o})", path)
        finally:
            posix.close(parent)

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Atomically replace `path` with `data`: a temp file by O_EXCL, then renameat in one dir fd."""
        parent, name = self._parent(path, create=True)
        tmp = f".{name}.sro-{posix.getpid()}"
        try:
            fd = posix.open(
                tmp,
                posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_NOFOLLOW | posix.O_CLOEXEC,
                mode,
                dir_fd=parent,
            )
            try:
                posix.write(fd, data)
            finally:
                posix.close(fd)
            st = (
                posix.stat(name, dir_fd=parent, follow_symlinks=False) if self._exists(parent, name) else None
            )
            if st is not None and stat.S_ISDIR(st.st_mode):
                posix.unlink(tmp, dir_fd=parent)
                raise PathError(errno.EISDIR, "the image has a directory there", path)
            posix.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
        finally:
            posix.close(parent)

    @staticmethod
    def _exists(parent: int, name: str) -> bool:
        try:
            posix.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True
