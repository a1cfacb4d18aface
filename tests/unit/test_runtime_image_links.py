"""An image's symlink where the hook would mount a driver file: the same file resolved inside the
rootfs is already there (skipped), anything else is refused as before; and the host's ldconfig
behind a distribution's wrapper script. No mount happens in these cases, so no root is needed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sro.node.runtime import inject
from sro.node.runtime.inventory import FileMount, InjectionPlan
from sro.node.runtime.safepath import EscapeError, Root


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """A rootfs whose /usr/local/drv holds the driver's library (as a bound host /usr would), and
    the same library as the host path the hook mounts."""
    rootfs = tmp_path / "rootfs"
    lib = rootfs / "usr" / "local" / "drv" / "libdrv.so.1.2"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF driver")
    (rootfs / "usr" / "lib").mkdir()
    (rootfs / "lib").symlink_to("usr/lib")
    return rootfs, lib


def _inject(rootfs: Path, host: Path, debug: bool = True) -> None:
    plan = InjectionPlan(mounts=(FileMount(str(host), "/lib/libdrv.so.1"),))
    inject.inject(plan, str(rootfs), inject.Options(ldconfig=None, debug=debug, use_openat2=False))


@pytest.mark.parametrize(
    "link", ["/usr/local/drv/libdrv.so.1.2", "../local/drv/libdrv.so.1.2", "/lib/../../usr/x"]
)
def test_same_file_through_the_images_link_is_skipped(
    tree: tuple[Path, Path], link: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rootfs, lib = tree
    if link == "/lib/../../usr/x":  # a chain: absolute, the /lib link, `..` from where it led, another link
        (rootfs / "usr" / "x").symlink_to("local/drv/libdrv.so.1.2")
    (rootfs / "usr" / "lib" / "libdrv.so.1").symlink_to(link)
    _inject(rootfs, lib)
    err = capsys.readouterr().err
    assert (
        err.startswith("sro hook: debug: /lib/libdrv.so.1: the image's symlink there is ") and str(lib) in err
    )
    assert (rootfs / "usr" / "lib" / "libdrv.so.1").is_symlink()  # left as it was
    _inject(rootfs, lib, debug=False)
    assert capsys.readouterr().err == ""


def test_another_file_is_refused(tree: tuple[Path, Path], tmp_path: Path) -> None:
    rootfs, lib = tree
    copy = rootfs / "usr" / "local" / "drv" / "copy.so"
    copy.write_bytes(lib.read_bytes())  # same bytes, another inode
    (rootfs / "usr" / "lib" / "libdrv.so.1").symlink_to("/usr/local/drv/copy.so")
    with pytest.raises(inject.InjectError, match="the image has a symlink there; refusing to mount on it"):
        _inject(rootfs, lib)


@pytest.mark.parametrize(
    "how", ["host-absolute", "dotdot-escape", "to-a-dir", "dangling", "loop", "proc-magic"]
)
def test_links_out_of_the_root_are_refused(tree: tuple[Path, Path], how: str) -> None:
    """The host's own path of the library, absolute: re-rooted, it names nothing in the rootfs."""
    rootfs, lib = tree
    target = {
        "host-absolute": str(lib),
        "dotdot-escape": "../" * 12 + str(lib).lstrip("/"),
        "to-a-dir": "/usr/local/drv",
        "dangling": "/nothing",
        "loop": "libdrv.so.1",
        "proc-magic": "/proc/self/root" + str(lib),
    }[how]
    if how == "proc-magic":
        (rootfs / "proc").symlink_to("/proc")  # even a link to the host's /proc is re-rooted
    (rootfs / "usr" / "lib" / "libdrv.so.1").symlink_to(target)
    with pytest.raises(inject.InjectError, match="symlink there; refusing"):
        _inject(rootfs, lib)


def test_stat_inside_never_leaves_the_root(tree: tuple[Path, Path]) -> None:
    rootfs, lib = tree
    (rootfs / "up").symlink_to("../..")
    with Root(str(rootfs), use_openat2=False) as root:
        assert root.stat_inside("/lib/../local/drv/libdrv.so.1.2").st_ino == os.stat(lib).st_ino
        with pytest.raises(EscapeError):
            root.stat_inside("/up/x")
        (rootfs / "abs").symlink_to("/")
        assert root.stat_inside("/abs/abs/usr").st_ino == os.stat(rootfs / "usr").st_ino


def test_a_directory_mount_is_never_skipped(tree: tuple[Path, Path]) -> None:
    rootfs, lib = tree
    (rootfs / "share").symlink_to("/usr/local/drv")
    with Root(str(rootfs), use_openat2=False) as root:
        assert not inject.already_there(root, FileMount(str(lib.parent), "/share", "dir"))


# -- the host's ldconfig behind a wrapper script (Ubuntu's /sbin/ldconfig) ---------------------------

WRAPPER = '#!/bin/sh\nif test $# = 0; then exit 0; fi\nexec /sbin/ldconfig.real "$@"\n'


def _ldconfig(tmp_path: Path, script: str | None, real: bool = True) -> Path:
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    path = sbin / "ldconfig"
    path.write_text(script) if script is not None else path.write_bytes(b"\x7fELF...")
    if real:
        (sbin / "ldconfig.real").write_bytes(b"\x7fELF...")
    for p in sbin.iterdir():
        p.chmod(0o755)
    return path


def test_real_ldconfig_sees_through_the_wrapper(tmp_path: Path) -> None:
    path = _ldconfig(tmp_path, WRAPPER.replace("/sbin/", f"{tmp_path}/sbin/"))
    assert inject.real_ldconfig(str(path)) == f"{path}.real"


@pytest.mark.parametrize(
    ("script", "real"),
    [(None, True), (WRAPPER, False), ('#!/bin/sh\nexec /usr/bin/other "$@"\n', True)],
    ids=["a binary", "a wrapper without its binary", "a script naming another program"],
)
def test_real_ldconfig_is_the_path_itself_otherwise(tmp_path: Path, script: str | None, real: bool) -> None:
    path = _ldconfig(tmp_path, script, real)
    assert inject.real_ldconfig(str(path)) == str(path)
    assert inject.real_ldconfig(str(tmp_path / "missing")) == str(tmp_path / "missing")


@pytest.mark.skipif(os.geteuid() != 0, reason="the check wants root-owned files")
def test_check_host_ldconfig_checks_and_returns_the_binary(tmp_path: Path) -> None:
    path = _ldconfig(tmp_path, WRAPPER)
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    assert inject.check_host_ldconfig(str(path), str(rootfs)) == f"{path}.real"
    (tmp_path / "sbin" / "ldconfig.real").chmod(0o777)  # the binary is checked too
    with pytest.raises(inject.InjectError, match=r"ldconfig\.real: not a root-owned, non-writable"):
        inject.check_host_ldconfig(str(path), str(rootfs))
