"""Carry out an injection plan inside one container's root filesystem, and open its device cgroup.

Why separate from the hook's parsing: this is the part that changes things, and it changes them only
through `safepath.Root` (paths resolved inside the rootfs, the last component never followed), the
fd-based bind mounts of `mounting`, and the host's own ldconfig run chrooted into the rootfs. It is
called after the hook has joined the container's mount namespace, so every mount it makes lives and
dies with the container; nothing is mounted in the host's namespace.
"""

from __future__ import annotations

import os
import select
import stat
import time

from sro.node.runtime import mounting
from sro.node.runtime.safepath import PathError, Root

TYPE_CHECKING = False  # no typing/dataclasses/signal (enum) at run time: the hook imports this module
if TYPE_CHECKING:
    from dataclasses import dataclass

    from sro.node.runtime.inventory import InjectionPlan
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


def check_host_ldconfig(path: str, rootfs: str) -> str:
    """Refuse any ldconfig but a root-owned, not group/world-writable regular file of the host.

    One inside the container's rootfs is refused too (CVE-2024-0136: ldconfig taken from the image).
    """
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


def _mount_all(root: Root, plan: InjectionPlan, opts: Options) -> None:
    for m in plan.mounts:
        try:
            fd = root.mount_target(m.container_path, m.kind)
        except OSError as e:
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
    argv = [ldconfig, "-r", f"/proc/self/fd/{root.fd}", *folders]
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


# -- device cgroup (v1) ------------------------------------------------------------------------------


def devices_cgroup_dir(pid: int | str, proc: str = "/proc") -> str | None:
    """The devices-controller directory of a process (v1), or None on a cgroup v2-only host."""
    rel = None
    with open(f"{proc}/{pid}/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if "devices" in controllers.split(","):
                rel = path
    if rel is None or rel == "/":
        return None  # cgroup v2 only, or a cgroup namespace hides the path: never touch the root
    if ".." in rel.split("/"):
        raise InjectError(f"{proc}/{pid}/cgroup: refusing a devices cgroup path with '..': {rel!r}")
    with open(f"{proc}/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if rfields and rfields[0] == "cgroup" and "devices" in rfields[-1].split(","):
                root, mountpoint = fields[3], fields[4]
                if rel == root or rel.startswith(root.rstrip("/") + "/"):
                    return mountpoint + "/" + rel[len(root) :].lstrip("/")
    raise InjectError(f"the devices cgroup {rel} of pid {pid} is not mounted in this namespace")


def allow_devices(cgroup_dir: str, rules: tuple[str, ...]) -> None:
    """Append allow rules ("c 240:0 rwm") to a v1 devices cgroup."""
    path = os.path.join(cgroup_dir, "devices.allow")
    for rule in rules:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            raise InjectError(f"{path}: {e.strerror}") from None
        try:
            os.write(fd, rule.encode())
        except OSError as e:
            raise InjectError(f"{path}: writing {rule!r}: {e.strerror}") from None
        finally:
            os.close(fd)
