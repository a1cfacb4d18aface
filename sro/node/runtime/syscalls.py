"""libc's syscall(2), setns(2) and mount(2) for the hook, through `_ctypes` without `ctypes`.

Why: Python 3.11 has no os.setns, os.mount or openat2, so the hook calls libc. `import ctypes`
costs ~2.5 ms of every container start (it builds its whole type zoo and imports struct); what the
hook needs is three C functions returning a long and setting errno, called with ints, byte strings
(char *) and None (NULL). That is done here with the same C machinery `ctypes` itself is built on.
Structs the kernel reads (open_how, mount_attr) are passed as byte strings of native u64 fields.
"""

from __future__ import annotations

import _ctypes
import posix
import sys

_DEFAULT_MODE = 0  # RTLD_LOCAL: what ctypes.CDLL(None) uses


class _Libc:
    """What _ctypes.CFuncPtr reads off a library object: its dlopen handle."""

    _handle = _ctypes.dlopen(None, _DEFAULT_MODE)  # type: ignore[arg-type]  # NULL: the process itself


class _CLong(_ctypes._SimpleCData):  # type: ignore[type-arg]  # not subscriptable at run time
    _type_ = "l"


class CULong(_ctypes._SimpleCData):  # type: ignore[type-arg]  # not subscriptable at run time
    """unsigned long, for mount(2)'s flags (ints are passed as C int otherwise)."""

    _type_ = "L"


class _LongFunction(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _CLong


syscall = _LongFunction(("syscall", _Libc))  # type: ignore[arg-type]  # any object with _handle
setns = _LongFunction(("setns", _Libc))  # type: ignore[arg-type]  # any object with _handle
mount = _LongFunction(("mount", _Libc))  # type: ignore[arg-type]  # any object with _handle
get_errno = _ctypes.get_errno


def u64s(*values: int) -> bytes:
    """A C struct of unsigned 64-bit fields (open_how, mount_attr) as the kernel reads it."""
    return b"".join(v.to_bytes(8, sys.byteorder) for v in values)


def check(ret: int, what: str) -> int:
    """`ret`, or OSError with errno when it is negative."""
    if ret < 0:
        err = get_errno()
        raise OSError(err, f"{what}: {posix.strerror(err)}")
    return ret
