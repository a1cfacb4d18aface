"""Image layers built from this machine's files.

The glibc test image: a dynamically linked program (the driver's nvidia-smi) needs ld.so at the path
its ELF header names and libc.so.6 where ld.so looks, and the hook's ldconfig needs the image's
ld.so.conf; without them the pod fails with a bare "not found" from the kernel. The sro image: the
simulated NVIDIA driver's compiled library and nvidia-smi, at the path the driver reads them from."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

from sro.devices.simulated_nvidia import DEFAULT_NATIVE_DIR
from sro.local.images import _simnvml_layer, glibc_files, glibc_layer
from sro.local.layout import Layout

BUSYBOX = Path("/bin/busybox")
LISTED = [
    "/.",
    "/etc/ld.so.conf.d",
    "/etc/ld.so.conf",
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    "/lib64/ld-linux-x86-64.so.2",
    "/usr/lib/x86_64-linux-gnu/gconv/UTF-16.so",
    "/usr/share/doc/libc6/copyright",
    "/sbin/ldconfig",
    "/sbin/ldconfig.real",  # Ubuntu's: /sbin/ldconfig is a shell wrapper that execs it
    "/usr/bin/iconv",
    "diverted by: nothing",
]


def _fake_host(root: Path) -> None:
    """The LISTED paths under `root`, made as dpkg leaves them (lib64's ld.so is a symlink)."""
    for line in LISTED:
        if not line.startswith("/") or line == "/.":
            continue
        path = root / line.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if line == "/etc/ld.so.conf.d":
            path.mkdir()
        elif line == "/lib64/ld-linux-x86-64.so.2":
            path.symlink_to("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
        else:
            path.write_bytes(b"x")


def test_only_the_runtime_files_are_taken(tmp_path: Path) -> None:
    _fake_host(tmp_path)
    files, links = glibc_files(LISTED, tmp_path)
    assert files == {
        name: tmp_path / name
        for name in (
            "etc/ld.so.conf",
            "lib/x86_64-linux-gnu/libc.so.6",
            "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
            "sbin/ldconfig",
            "sbin/ldconfig.real",
        )
    }
    assert links == {"lib64/ld-linux-x86-64.so.2": "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"}


@pytest.mark.skipif(not BUSYBOX.exists(), reason="busybox-static is not installed")
def test_the_layer_of_this_machine_runs_glibc_programs(tmp_path: Path) -> None:
    layer = glibc_layer(tmp_path / "layer.tar", BUSYBOX)
    with tarfile.open(layer) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["lib/x86_64-linux-gnu/libc.so.6"].isfile()
    assert members["lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"].isfile()
    interp = members["lib64/ld-linux-x86-64.so.2"]  # the interpreter every x86-64 program names
    assert interp.issym() and interp.linkname == "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    assert members["etc/ld.so.conf"].isfile()
    ldconfig = members["sbin/ldconfig"]  # Debian's, not a busybox applet
    assert ldconfig.isfile() and ldconfig.size > 100_000
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "/bin/busybox"
    assert not any("gconv" in name or name.startswith("usr/share") for name in members)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build the simulated NVML library")
def test_the_sro_image_carries_the_simulated_nvml_build(tmp_path: Path) -> None:
    """Where `sro driver simulate --personality nvidia` looks for them on a node (nothing compiles there)."""
    layer = _simnvml_layer(Layout(cache=tmp_path), tmp_path / "simnvml.tar")
    with tarfile.open(layer) as tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}
    assert set(members) == {"opt/sro/share/simnvml/libnvidia-ml.so.1", "opt/sro/share/simnvml/nvidia-smi"}
    assert str(DEFAULT_NATIVE_DIR) == "/opt/sro/share/simnvml"
    assert members["opt/sro/share/simnvml/nvidia-smi"].mode & 0o111
    with tarfile.open(layer) as tar:
        lib = tar.extractfile("opt/sro/share/simnvml/libnvidia-ml.so.1")
        assert lib is not None and lib.read(4) == b"\x7fELF"


def test_both_image_builds_write_the_venvs_bytecode_unchecked_hash() -> None:
    """`sro local image` and the Containerfile compile the venv again after pip with the same command
    (a tar that clamps mtimes leaves pip's timestamp .pyc files stale: every pod compiled again)."""
    from sro.local.images import _COMPILE_DEPS, PROJECT_ROOT

    assert "--invalidation-mode unchecked-hash" in _COMPILE_DEPS and " -f " in _COMPILE_DEPS
    containerfile = (PROJECT_ROOT / "Containerfile").read_text()
    assert f"&& {_COMPILE_DEPS}\n" in containerfile
