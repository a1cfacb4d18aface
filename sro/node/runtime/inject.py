"""Carry out an injection plan inside one container's root filesystem (the device cgroup: `devcgroup`).

Why separate from the hook's parsing: this is the part that changes things, and it changes them only
through `safepath.Root` (paths resolved inside the rootfs, the last component never followed), the
fd-based bind mounts of `mounting`, and the host's own ldconfig run chrooted into the rootfs. It is
called after the hook has joined the container's mount namespace, so every mount it makes lives and
dies with the container; nothing is mounted in the host's namespace.
"""

from __future__ import annotations

import errno
import posix
import select
import stat
import sys
import time

from sro.node.runtime.hostldconfig import InjectError, check_host_ldconfig, real_ldconfig
from sro.node.runtime.safepath import PathError, Root

TYPE_CHECKING = False  # no typing/dataclasses/signal (enum) at run time: the hook imports this module
if TYPE_CHECKING:
    from dataclasses import dataclass

    from sro.node.runtime.inventory import FileMount, InjectionPlan
    from sro.node.runtime.safepath import Policy
else:
    from sro.node.runtime.records import dataclass

LD_CONF = "/etc/ld.so.conf.d/000-sro.conf"  # = specedits.LD_CONF (checked by a test)
__all__ = ["InjectError", "check_host_ldconfig", "real_ldconfig"]  # theirs, kept importable from here
CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
LDCONFIG_TIMEOUT_S = 20.0
SIGKILL = 9  # signal.SIGKILL on Linux; `signal` itself imports enum (~3 ms)


@dataclass(frozen=True)
class Options:
    policy: Policy = "beneath"
    use_openat2: bool | None = None  # None: use it when the kernel has it
    new_mount_api: bool = True
    ldconfig: str | None = "/sbin/ldconfig"  # the host's; None skips the linker cache
    debug: bool = False  # write `sro hook: debug:` lines to stderr (what was skipped and why)


def already_there(root: Root, m: FileMount) -> bool:
    """Is the image's symlink at `m`'s target, resolved inside the rootfs, the very file `m` mounts?

    A host directory the image binds in (a /usr with the driver's soname links) holds them; the link
    then already gives the container the driver's own file. Anything else there stays refused.
    """
    if m.kind != "file":
        return False
    try:
        st = root.lstat(m.container_path)
        if st is None or not stat.S_ISLNK(st.st_mode):
            return False
        inside, host = root.stat_inside(m.container_path), posix.stat(m.host_path)
    except OSError:  # a link out of the root, to nothing, or a loop: not the same file
        return False
    return stat.S_ISREG(inside.st_mode) and (inside.st_dev, inside.st_ino) == (host.st_dev, host.st_ino)


def _mount_all(root: Root, plan: InjectionPlan, opts: Options) -> None:
    from sro.node.runtime import mounting  # not at the top: the CDI-mode ldcache hook mounts nothing

    for m in plan.mounts:
        try:
            fd = root.mount_target(m.container_path, m.kind)
        except OSError as e:
            if e.errno == errno.EEXIST and already_there(root, m):
                if opts.debug:
                    print(
                        f"sro hook: debug: {m.container_path}: the image's symlink there is {m.host_path} "
                        "itself (resolved inside the rootfs); not mounted again",
                        file=sys.stderr,
                    )
                continue
            raise InjectError(
                f"cannot mount {m.host_path} at {m.container_path} in the rootfs: {e}"
            ) from None
        try:
            reopen = None if opts.new_mount_api else (lambda p=m.container_path: root.open_leaf(p))
            mounting.bind(m.host_path, fd, readonly=True, reopen=reopen, new_api=opts.new_mount_api)
        except OSError as e:
            raise InjectError(f"bind mount {m.host_path} -> {m.container_path}: {e}") from None
        finally:
            posix.close(fd)


def _devices(root: Root, plan: InjectionPlan) -> None:
    old = posix.umask(0)
    try:
        for d in plan.device_nodes:
            try:
                root.make_device(d.path, d.major, d.minor, d.file_mode)
            except OSError as e:
                raise InjectError(f"cannot create device node {d.path} in the rootfs: {e}") from None
    finally:
        posix.umask(old)


def update_ldcache(root: Root, folders: tuple[str, ...], ldconfig: str) -> None:
    """Write our ld.so.conf.d entry and rebuild /etc/ld.so.cache with the host's ldconfig.

    ldconfig chroots into the rootfs (`-r`) through the magic link of our root fd, so every path it
    touches, a symlinked /etc/ld.so.cache included, resolves inside the container's root. It runs with
    a fixed environment, from `/`, and is always waited for (a hook must not leave children behind).
    """
    try:
        root.write_file(LD_CONF, "".join(f + "\n" for f in folders).encode())
    except OSError as e:
        raise InjectError(f"cannot write {LD_CONF} in the rootfs: {e}") from None
    argv = [real_ldconfig(ldconfig), "-r", f"/proc/self/fd/{root.fd}", *folders]
    rc, out = spawn_and_wait(argv, CLEAN_ENV, root.fd, LDCONFIG_TIMEOUT_S)
    if rc != 0:
        raise InjectError(f"{ldconfig} -r <rootfs> failed ({rc}): {out.decode(errors='replace').strip()}")


def spawn_and_wait(argv: list[str], env: dict[str, str], keep_fd: int, timeout: float) -> tuple[int, bytes]:
    """posix_spawn `argv` with only `keep_fd` passed on, stdout+stderr into a pipe; always reaped.

    Not `subprocess`: importing it costs the hook more than running ldconfig does. The child never
    holds the hook's own stdout/stderr (runc waits for those to close), and it is killed and reaped
    on timeout, so no process outlives the hook.
    """
    r, w = posix.pipe()
    posix.set_inheritable(keep_fd, True)
    try:
        pid = posix.posix_spawn(
            argv[0],
            argv,
            env,
            file_actions=[
                (posix.POSIX_SPAWN_OPEN, 0, "/dev/null", posix.O_RDONLY, 0),
                (posix.POSIX_SPAWN_DUP2, w, 1),
                (posix.POSIX_SPAWN_DUP2, w, 2),
            ],
        )
    finally:
        posix.set_inheritable(keep_fd, False)
        posix.close(w)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                posix.kill(pid, SIGKILL)
                posix.waitpid(pid, 0)
                raise InjectError(f"{argv[0]} did not finish in {timeout:.0f} s")
            ready, _, _ = select.select([r], [], [], left)
            if ready:
                chunk = posix.read(r, 65536)
                if not chunk:
                    break
                out = (out + chunk)[-65536:]
    finally:
        posix.close(r)
    _, status = posix.waitpid(pid, 0)
    return posix.waitstatus_to_exitcode(status), out


def inject(plan: InjectionPlan, rootfs: str, opts: Options) -> None:
    """Device nodes, read-only bind mounts and the linker cache, all inside `rootfs`."""
    try:
        root = Root(rootfs, policy=opts.policy, use_openat2=opts.use_openat2)
    except OSError as e:
        raise InjectError(f"rootfs {rootfs}: {e.strerror}") from None
    with root:
        try:
            _devices(root, plan)
            _mount_all(root, plan, opts)
            if plan.ld_folders and opts.ldconfig:
                update_ldcache(root, plan.ld_folders, opts.ldconfig)
        except PathError as e:
            raise InjectError(str(e)) from None
