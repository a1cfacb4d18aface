"""Carry out an injection plan inside one container's root filesystem (the device cgroup: `devcgroup`).

Why separate from the hook's parsing: this is the part that changes things, and it changes them only
through `safepath.Root` (paths resolved inside the rootfs, the last component never followed), the
fd-based bind mounts of `mounting`, and the host's own ldconfig run chrooted into the rootfs. It is
called after the hook has joined the container's mount namespace, so every mount it makes lives and
dies with the container; nothing is mounted in the host's namespace.
"""

from __future__ import annotations

import errno
import os
import select
import stat
import sys
import time

from sro.node.runtime.safepath import PathError, Root

TYPE_CHECKING = False  # no typing/dataclasses/signal (enum) at run time: the hook imports this module
if TYPE_CHECKING:
    from dataclasses import dataclass

    from sro.node.runtime.inventory import FileMount, InjectionPlan
    from sro.node.runtime.safepath import Policy
else:
    from sro.node.runtime.records import dataclass

LD_CONF = "/etc/ld.so.conf.d/000-sro.conf"
CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
LDCONFIG_TIMEOUT_S = 20.0
SIGKILL = 9  # signal.SIGKILL on Linux; `signal` itself imports enum (~3 ms)


class InjectError(RuntimeError):
    """Injection failed; the message names the path or device and the reason."""


@dataclass(frozen=True)
class Options:
    policy: Policy = "beneath"
    use_openat2: bool | None = None  # None: use it when the kernel has it
    new_mount_api: bool = True
    ldconfig: str | None = "/sbin/ldconfig"  # the host's; None skips the linker cache
    debug: bool = False  # write `sro hook: debug:` lines to stderr (what was skipped and why)


def real_ldconfig(path: str) -> str:
    """The binary behind a distribution's ldconfig wrapper script, else `path` itself.

    Ubuntu's /sbin/ldconfig is a shell script (it defers to a dpkg trigger when run bare inside a
    package's maintainer script, else execs /sbin/ldconfig.real): a script that names its `.real`
    sibling, which exists, stands for that sibling. Running the binary straight spares the hook a
    shell, and a copy of the wrapper is no ldconfig at all (it finds no `.real` next to it).
    """
    real = path + ".real"
    try:
        with open(path, "rb") as f:
            head = f.read(8192)
    except OSError:
        return path
    if head.startswith(b"#!") and os.path.basename(real).encode() in head and os.path.isfile(real):
        return real
    return path


def check_host_ldconfig(path: str, rootfs: str) -> str:
    """Refuse any ldconfig but a root-owned, not group/world-writable regular file of the host.

    One inside the container's rootfs is refused too (CVE-2024-0136: ldconfig taken from the image).
    A wrapper script is checked, and so is the binary it stands for (`real_ldconfig`), which is
    what runs and what this returns.
    """
    _check_one(path, rootfs)
    real = real_ldconfig(path)
    return real if real == path else _check_one(real, rootfs)


def _check_one(path: str, rootfs: str) -> str:
    if not os.path.isabs(path):
        raise InjectError(f"ldconfig {path!r}: must be an absolute host path")
    real, root = os.path.realpath(path), os.path.realpath(rootfs)
    if real == root or real.startswith(root.rstrip("/") + "/"):
        raise InjectError(f"ldconfig {path}: lies inside the container's rootfs; only the host's is run")
    try:
        st = os.stat(path)
    except OSError as e:
        raise InjectError(f"ldconfig {path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise InjectError(f"ldconfig {path}: not a root-owned, non-writable regular file; refusing to run it")
    return path


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
        inside, host = root.stat_inside(m.container_path), os.stat(m.host_path)
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
            os.close(fd)


def _devices(root: Root, plan: InjectionPlan) -> None:
    old = os.umask(0)
    try:
        for d in plan.device_nodes:
            try:
                root.make_device(d.path, d.major, d.minor, d.file_mode)
            except OSError as e:
                raise InjectError(f"cannot create device node {d.path} in the rootfs: {e}") from None
    finally:
        os.umask(old)


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
    r, w = os.pipe()
    os.set_inheritable(keep_fd, True)
    try:
        pid = os.posix_spawn(
            argv[0],
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, w, 1),
                (os.POSIX_SPAWN_DUP2, w, 2),
            ],
        )
    finally:
        os.set_inheritable(keep_fd, False)
        os.close(w)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, SIGKILL)
                os.waitpid(pid, 0)
                raise InjectError(f"{argv[0]} did not finish in {timeout:.0f} s")
            ready, _, _ = select.select([r], [], [], left)
            if ready:
                chunk = os.read(r, 65536)
                if not chunk:
                    break
                out = (out + chunk)[-65536:]
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out


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
