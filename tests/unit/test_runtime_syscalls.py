"""The ctypes-free libc calls agree with ctypes: struct layout, return values, errno."""

from __future__ import annotations

import ctypes
import errno
import os

import pytest

from sro.node.runtime import syscalls


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def test_u64_structs_have_the_ctypes_layout() -> None:
    assert syscalls.u64s(0x200000, 0, 0x18) == bytes(_OpenHow(0x200000, 0, 0x18))
    assert syscalls.u64s(2**64 - 1) == bytes(ctypes.c_uint64(2**64 - 1))


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="getpid is syscall 39 on x86_64")
def test_syscall_returns_ints_and_sets_errno() -> None:
    assert syscalls.syscall(39) == os.getpid()
    ret = syscalls.syscall(437, -100, b"/nonexistent-sro", syscalls.u64s(0, 0, 0), 24)  # openat2
    assert ret == -1 and syscalls.get_errno() == errno.ENOENT
    with pytest.raises(OSError, match="openat2: No such file") as e:
        syscalls.check(ret, "openat2")
    assert e.value.errno == errno.ENOENT


def test_setns_and_mount_report_errors() -> None:
    assert syscalls.setns(-1, 0) == -1 and syscalls.get_errno() == errno.EBADF
    ret = syscalls.mount(None, b"/nonexistent-sro", None, syscalls.CULong(0), None)
    assert ret == -1 and syscalls.get_errno() in (errno.ENOENT, errno.EPERM)
