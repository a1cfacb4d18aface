"""In-rootfs path resolution: both resolvers (openat2, component walk), both policies, races."""

from __future__ import annotations

import ctypes
import os
import stat
import threading
from pathlib import Path

import pytest

from sro.node.runtime.safepath import EscapeError, PathError, Root, openat2_available

RESOLVERS = [
    pytest.param(True, id="openat2", marks=pytest.mark.skipif(not openat2_available(), reason="no openat2")),
    pytest.param(False, id="walk"),
]


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    r = tmp_path / "rootfs"
    (r / "usr" / "lib").mkdir(parents=True)
    (r / "etc").mkdir()
    (tmp_path / "outside").mkdir()
    return r


def _outside(rootfs: Path) -> list[str]:
    return sorted(os.listdir(rootfs.parent / "outside"))


@pytest.mark.parametrize("openat2", RESOLVERS)
def test_relative_links_inside_are_followed(rootfs: Path, openat2: bool) -> None:
    (rootfs / "lib").symlink_to("usr/lib")
    (rootfs / "usr" / "lib64").symlink_to("../usr/./lib")
    with Root(str(rootfs), use_openat2=openat2) as root:
        fd = root.mount_target("/lib/libx.so.1", "file")
        os.close(fd)
        os.close(root.mount_target("/usr/lib64/a/b/libdir", "dir"))
    assert (rootfs / "usr" / "lib" / "libx.so.1").is_file()
    assert (rootfs / "usr" / "lib" / "a" / "b" / "libdir").is_dir()


@pytest.mark.parametrize("openat2", RESOLVERS)
@pytest.mark.parametrize(
    "link",
    ["ABS_OUTSIDE", "/", "/usr/lib", "../../outside", "../../../../../../outside", "usr/../../outside"],
)
def test_beneath_refuses_every_way_out(rootfs: Path, openat2: bool, link: str) -> None:
    target = str(rootfs.parent / "outside") if link == "ABS_OUTSIDE" else link
    (rootfs / "lib").symlink_to(target)
    with Root(str(rootfs), use_openat2=openat2) as root, pytest.raises(EscapeError):
        root.mount_target("/lib/libx.so.1", "file")
    assert _outside(rootfs) == []


@pytest.mark.parametrize("openat2", RESOLVERS)
def test_in_root_clamps_instead(rootfs: Path, openat2: bool) -> None:
    (rootfs / "lib").symlink_to("/usr/lib")  # absolute: means <rootfs>/usr/lib here
    (rootfs / "up").symlink_to("../../../../..")
    (rootfs / "out").symlink_to(str(rootfs.parent / "outside"))  # <rootfs>/<that path>: missing
    with Root(str(rootfs), policy="in-root", use_openat2=openat2) as root:
        os.close(root.mount_target("/lib/libx.so.1", "file"))
        os.close(root.mount_target("/up/etc/y", "file"))
        with pytest.raises(FileNotFoundError):  # never mkdir -p through a dangling link
            root.mount_target("/out/z", "file")
    assert _outside(rootfs) == []
    assert (rootfs / "usr" / "lib" / "libx.so.1").is_file()
    assert (rootfs / "etc" / "y").is_file()


@pytest.mark.parametrize("openat2", RESOLVERS)
def test_last_component_is_never_followed(rootfs: Path, openat2: bool) -> None:
    (rootfs / "etc" / "cache").symlink_to("../usr/lib/real")  # even a link that stays inside
    (rootfs / "etc" / "d").mkdir()
    os.mkfifo(rootfs / "etc" / "fifo")
    with Root(str(rootfs), use_openat2=openat2) as root:
        for path, kind, words in [
            ("/etc/cache", "file", "a symlink"),
            ("/etc/d", "file", "not a file"),
            ("/etc/fifo", "file", "not a file"),
            ("/etc/fifo", "dir", "not a directory"),
        ]:
            with pytest.raises(PathError, match=words):
                root.mount_target(path, kind)  # type: ignore[arg-type]
        with pytest.raises(PathError, match="not a usable file name"):
            root.mount_target("/etc/..", "file")
    assert not (rootfs / "usr" / "lib" / "real").exists()


@pytest.mark.parametrize("openat2", RESOLVERS)
def test_write_file_replaces_a_link_never_writes_through_it(rootfs: Path, openat2: bool) -> None:
    victim = rootfs.parent / "outside" / "passwd"
    victim.write_text("root")
    (rootfs / "etc" / "ld.so.cache").symlink_to(victim)
    with Root(str(rootfs), use_openat2=openat2) as root:
        root.write_file("/etc/ld.so.cache", b"cache")
        (rootfs / "etc" / "dir").mkdir()
        with pytest.raises(PathError, match="directory"):
            root.write_file("/etc/dir", b"x")
    assert victim.read_text() == "root"
    assert (rootfs / "etc" / "ld.so.cache").read_bytes() == b"cache"
    assert sorted(os.listdir(rootfs / "etc")) == ["dir", "ld.so.cache"]  # no temp file left


@pytest.mark.parametrize("openat2", RESOLVERS)
def test_not_a_directory_and_loops(rootfs: Path, openat2: bool) -> None:
    (rootfs / "etc" / "file").write_text("x")
    (rootfs / "loop").symlink_to("loop")
    with Root(str(rootfs), use_openat2=openat2) as root:
        with pytest.raises(PathError, match="not a directory"):
            root.mount_target("/etc/file/x", "file")
        with pytest.raises(EscapeError):
            root.mount_target("/loop/x", "file")


@pytest.mark.parametrize("openat2", RESOLVERS)
def test_fd_pinned_parent_defeats_a_swap(rootfs: Path, openat2: bool) -> None:
    """Check-then-use on fds: after the parent is resolved, swapping the path cannot redirect the write."""
    (rootfs / "lib").mkdir()
    with Root(str(rootfs), use_openat2=openat2) as root:
        parent = root.open_dir("/lib")
        os.rename(rootfs / "lib", rootfs / "lib.moved")
        (rootfs / "lib").symlink_to(str(rootfs.parent / "outside"))
        os.close(os.open("libx.so.1", os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW, 0o644, dir_fd=parent))
        os.close(parent)
    assert (rootfs / "lib.moved" / "libx.so.1").exists() and _outside(rootfs) == []


@pytest.mark.parametrize("openat2", RESOLVERS)
def test_racing_symlink_swap(rootfs: Path, openat2: bool) -> None:
    """A thread exchanges /lib (a dir) with a link out, atomically, while we create files: never outside."""
    lib, evil = rootfs / "lib", rootfs / "lib.evil"
    lib.mkdir()
    evil.symlink_to(str(rootfs.parent / "outside"))
    libc = ctypes.CDLL(None, use_errno=True)
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            libc.syscall(316, -100, bytes(lib), -100, bytes(evil), 2)  # renameat2 RENAME_EXCHANGE

    t = threading.Thread(target=swap, daemon=True)
    t.start()
    made = refused = 0
    try:
        with Root(str(rootfs), use_openat2=openat2) as root:
            for i in range(20000):  # 1500 tries, more while the swapper has won every one (busy machine)
                if i >= 1500 and made:
                    break
                try:
                    os.close(root.mount_target(f"/lib/f{i}", "file"))
                    made += 1
                except OSError:
                    refused += 1
    finally:
        stop.set()
        t.join()
    assert _outside(rootfs) == []
    assert made > 0


@pytest.mark.root
@pytest.mark.parametrize("openat2", RESOLVERS)
def test_make_device(rootfs: Path, openat2: bool) -> None:
    (rootfs / "dev").mkdir()
    with Root(str(rootfs), use_openat2=openat2) as root:
        old = os.umask(0)
        try:
            root.make_device("/dev/sro-simgpu0", 120, 0, 0o666)
            root.make_device("/dev/sro-simgpu0", 120, 0, 0o666)  # the same device again: fine
        finally:
            os.umask(old)
        st = os.lstat(rootfs / "dev" / "sro-simgpu0")
        assert (
            stat.S_ISCHR(st.st_mode)
            and st.st_rdev == os.makedev(120, 0)
            and stat.S_IMODE(st.st_mode) == 0o666
        )
        with pytest.raises(PathError, match="something else is already there"):
            root.make_device("/dev/sro-simgpu0", 120, 1, 0o666)
        (rootfs / "dev" / "planted").symlink_to("/dev/null")
        with pytest.raises(PathError, match="something else"):
            root.make_device("/dev/planted", 1, 3, 0o666)
