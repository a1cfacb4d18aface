"""Which ldconfig the host lets a hook run: the host's own, never one from the container's rootfs.

Why its own module: the hook checks it before running ldconfig (inject), and the runc wrapper checks
it before naming it as mode cdi's createContainer hook (specedits.ldconfig_entry), without
importing the injection code (safepath, ctypes: milliseconds of every container start).
CVE-2024-0136: an ldconfig taken from the image or from a writable place runs as root on the host.
"""

from __future__ import annotations

import posix
import stat

from sro.node.runtime.leanpath import basename, isabs, isfile, realpath


class InjectError(RuntimeError):
    """Injection failed; the message names the path or device and the reason."""


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
    if head.startswith(b"#!") and basename(real).encode() in head and isfile(real):
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
    if not isabs(path):
        raise InjectError(f"ldconfig {path!r}: must be an absolute host path")
    real, root = realpath(path), realpath(rootfs)
    if real == root or real.startswith(root.rstrip("/") + "/"):
        raise InjectError(f"ldconfig {path}: lies inside the container's rootfs; only the host's is run")
    try:
        st = posix.stat(path)
    except OSError as e:
        raise InjectError(f"ldconfig {path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise InjectError(f"ldconfig {path}: not a root-owned, non-writable regular file; refusing to run it")
    return path
