"""Hostile images against the hook with real runc: every row of the bad-input table is refused.

Each case plants something in the busybox rootfs that, followed naively, would make the hook (root
on the host) write or run something outside the rootfs. The stand-in for "the host" is
`host.outside` (a directory outside the bundle that the links point at) plus a few real host names
(`/libsimgpu.so.1`, ...); both are snapshotted before and after. Where runc itself misbehaves on
an image (a /dev symlink), the run with the hook is compared with the same run without it.
Both path resolvers (openat2 and the component walk) run every path case.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from tests.root.conftest import PYTHON, Bundle, Driver, HostWatch, hook_entry, leftover_processes, tree

pytestmark = pytest.mark.root

RESOLVERS = ["openat2", "walk"]


def _run_hooked(
    bundle: Bundle, driver: Driver, resolver: str, stage: str = "prestart"
) -> subprocess.CompletedProcess[str]:
    bundle.add_hook(stage, hook_entry(driver, stage, ["--resolver", resolver]))
    return bundle.run("echo STARTED", env=["SRO_VISIBLE_DEVICES=0"])


def _assert_refused(res: subprocess.CompletedProcess[str], *words: str) -> None:
    assert res.returncode != 0 and "STARTED" not in res.stdout, res.stdout + res.stderr
    assert "sro hook:" in res.stderr, res.stderr
    for w in words:
        assert w in res.stderr, res.stderr


# -- hostile environment (CVE-2025-23266) ------------------------------------------------------------


def _preload_lib(path: Path, marker: Path) -> None:
    src = path.with_suffix(".c")
    src.write_text(
        "#include <stdio.h>\n__attribute__((constructor)) static void pwn(void) {\n"
        f'  FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("pwned", f); fclose(f); }}\n}}\n'
    )
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(path), str(src)], check=True)
    src.unlink()


def test_image_env_never_reaches_the_hook(bundle: Bundle, driver: Driver, host: HostWatch) -> None:
    marker = host.outside / "x.marker"
    _preload_lib(bundle.rootfs / "x.so", marker)
    planted = bundle.rootfs / "sro"
    planted.mkdir()
    (planted / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('pwned by sys.path')\n")
    (bundle.rootfs / "x.py").write_text(f"open({str(marker)!r}, 'w').write('pwned by PYTHONSTARTUP')\n")
    hostile_env = [
        "LD_PRELOAD=/proc/self/cwd/x.so",
        "LD_LIBRARY_PATH=/proc/self/cwd",
        "GCONV_PATH=/proc/self/cwd",
        "PYTHONPATH=/proc/self/cwd",
        "PYTHONSTARTUP=/proc/self/cwd/x.py",
        "PYTHONHOME=/proc/self/cwd",
        "SRO_VISIBLE_DEVICES=0",
    ]

    # Control 1: a createContainer hook entry without `env` loads the image's LD_PRELOAD (runc 1.1.5).
    bundle.add_hook("createContainer", {"path": "/usr/bin/true", "args": ["true"]})
    bundle.run("true", env=hostile_env)
    assert marker.exists(), "control failed: this runc does not pass the container env to hooks"
    marker.unlink()

    # Control 2: with `env` set but without -I, python puts the image's root (cwd) on sys.path.
    bundle.spec["hooks"] = {}
    bundle.add_hook(
        "createContainer",
        {"path": PYTHON, "args": [PYTHON, "-c", "import sro"], "env": ["PATH=/usr/bin:/bin"]},
    )
    bundle.run("true", env=hostile_env)
    assert marker.read_text() == "pwned by sys.path", "control failed: cwd was not on sys.path"
    marker.unlink()

    # Ours, at both stages: explicit env and -I, so none of it runs; the devices still arrive.
    for stage in ("createContainer", "prestart"):
        bundle.spec["hooks"] = {}
        bundle.add_hook(stage, hook_entry(driver, stage))
        res = bundle.run(
            "test -c /dev/sro-simgpu0 && test -s /lib/libsimgpu.so.1 && echo INJECTED", env=hostile_env
        )
        assert "INJECTED" in res.stdout, res.stderr
        assert not marker.exists(), f"{stage}: {marker.read_text()}"


# -- symlinks in the image -------------------------------------------------------------------------


@pytest.mark.parametrize("resolver", RESOLVERS)
@pytest.mark.parametrize("target", ["outside", "/", "relative-escape"])
def test_library_path_symlinked_out_is_refused(
    bundle: Bundle, driver: Driver, host: HostWatch, resolver: str, target: str
) -> None:
    """The library itself (last component) is a link out: CVE-2024-0132 / CVE-2025-23359."""
    link = bundle.rootfs / "lib" / "libsimgpu.so.1"
    dest = {
        "outside": str(host.outside / "etc" / "passwd"),
        "/": "/",
        "relative-escape": "../" * 12 + "etc/passwd",
    }
    link.symlink_to(dest[target])
    before = host.snapshot()
    _assert_refused(_run_hooked(bundle, driver, resolver), "symlink")
    assert host.snapshot() == before


@pytest.mark.parametrize("resolver", RESOLVERS)
@pytest.mark.parametrize("target", ["outside", "/", "relative-escape", "proc-magic"])
def test_intermediate_dir_symlinked_out_is_refused(
    bundle: Bundle, driver: Driver, host: HostWatch, resolver: str, target: str
) -> None:
    """`/lib` itself leads out: absolute, `/`, `../../..`, or through /proc/self/root (a magic link)."""
    (bundle.rootfs / "lib").rmdir()
    dest = {
        "outside": str(host.outside / "etc"),
        "/": "/",
        "relative-escape": "../" * 12 + str(host.outside / "etc").lstrip("/"),
        "proc-magic": "proc/self/root" + str(host.outside / "etc"),
    }
    (bundle.rootfs / "lib").symlink_to(dest[target])
    before = host.snapshot()
    _assert_refused(_run_hooked(bundle, driver, resolver), "/lib")
    assert host.snapshot() == before


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_in_root_policy_contains_instead_of_refusing(
    bundle: Bundle, driver: Driver, host: HostWatch, resolver: str
) -> None:
    """With --policy in-root the same absolute link resolves inside the rootfs (securejoin style)."""
    (bundle.rootfs / "usr" / "lib").mkdir(parents=True)
    (bundle.rootfs / "lib").rmdir()
    (bundle.rootfs / "lib").symlink_to("/usr/lib")
    before = host.snapshot()
    bundle.add_hook(
        "prestart", hook_entry(driver, "prestart", ["--resolver", resolver, "--policy", "in-root"])
    )
    res = bundle.run("test -s /usr/lib/libsimgpu.so.1 && echo CONTAINED", env=["SRO_VISIBLE_DEVICES=0"])
    assert "CONTAINED" in res.stdout, res.stderr
    assert (bundle.rootfs / "usr" / "lib" / "libsimgpu.so.1").exists()
    assert host.snapshot() == before


def test_relative_links_inside_the_rootfs_are_followed(
    bundle: Bundle, driver: Driver, host: HostWatch
) -> None:
    """A usrmerge image (`/lib -> usr/lib`) is not hostile: the library lands in /usr/lib."""
    (bundle.rootfs / "usr" / "lib").mkdir(parents=True)
    (bundle.rootfs / "lib").rmdir()
    (bundle.rootfs / "lib").symlink_to("usr/lib")
    bundle.add_hook("prestart", hook_entry(driver))
    res = bundle.run(
        "test -s /usr/lib/libsimgpu.so.1 && ldconfig -p | grep -c simgpu", env=["SRO_VISIBLE_DEVICES=0"]
    )
    assert res.stdout.strip() == "2", res.stderr


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_ld_so_cache_and_conf_d_symlinked_out(
    bundle: Bundle, driver: Driver, host: HostWatch, resolver: str
) -> None:
    """CVE-2025-23267: ldconfig's outputs are links out of the rootfs."""
    victim = host.outside / "etc" / "passwd"
    (bundle.rootfs / "etc" / "ld.so.cache").symlink_to(victim)
    before = host.snapshot()
    bundle.add_hook("prestart", hook_entry(driver, "prestart", ["--resolver", resolver]))
    res = bundle.run("ldconfig -p | grep -c simgpu", env=["SRO_VISIBLE_DEVICES=0"])
    # ldconfig runs chrooted: the cache is written inside (the link replaced), never through it
    assert res.stdout.strip() == "2", res.stderr
    assert not (bundle.rootfs / "etc" / "ld.so.cache").is_symlink()
    assert host.snapshot() == before

    shutil.rmtree(bundle.rootfs / "etc" / "ld.so.conf.d")  # made by the first run
    (bundle.rootfs / "etc" / "ld.so.conf.d").symlink_to(host.outside / "etc")
    _assert_refused(_run_hooked(bundle, driver, resolver), "ld.so.conf.d")
    assert host.snapshot() == before


def test_image_ldconfig_is_never_run(bundle: Bundle, driver: Driver, host: HostWatch) -> None:
    """CVE-2024-0136/0137: the image's /sbin/ldconfig is not run, nor one named inside the rootfs."""
    marker = host.outside / "x.marker"
    fake = bundle.rootfs / "sbin" / "ldconfig"
    fake.unlink()
    fake.write_text(f"#!/bin/sh\necho pwned > {marker}\n")
    fake.chmod(0o755)
    bundle.add_hook("prestart", hook_entry(driver))
    res = bundle.run("echo STARTED", env=["SRO_VISIBLE_DEVICES=0"])
    assert "STARTED" in res.stdout, res.stderr
    assert b"libsimgpu.so.1" in (bundle.rootfs / "etc" / "ld.so.cache").read_bytes()  # host ldconfig did it
    assert not marker.exists()

    bundle.spec["hooks"] = {}
    bundle.add_hook("prestart", hook_entry(driver, "prestart", ["--ldconfig", str(fake)]))
    _assert_refused(
        bundle.run("echo STARTED", env=["SRO_VISIBLE_DEVICES=0"]), "inside the container's rootfs"
    )
    assert not marker.exists()


@pytest.mark.parametrize("resolver", RESOLVERS)
@pytest.mark.parametrize("planted", ["symlink", "file", "fifo", "dir"])
def test_files_planted_where_the_hook_creates_nodes(
    bundle: Bundle, driver: Driver, host: HostWatch, resolver: str, planted: str
) -> None:
    """CVE-2024-0133: the image's own /dev (no tmpfs) already has something at the node's path."""
    bundle.spec["mounts"] = [m for m in bundle.spec["mounts"] if m["destination"] != "/dev"]
    node = bundle.rootfs / "dev" / "sro-simgpu0"
    if planted == "symlink":
        node.symlink_to(host.outside / "etc" / "passwd")
    elif planted == "file":
        node.write_text("planted")
    elif planted == "fifo":
        os.mkfifo(node)
    else:
        node.mkdir()
    before = host.snapshot()
    _assert_refused(_run_hooked(bundle, driver, resolver), "/dev/sro-simgpu0")
    assert host.snapshot() == before


@pytest.mark.parametrize("planted", ["dir", "fifo"])
def test_wrong_kind_at_a_library_mount_point(bundle: Bundle, driver: Driver, planted: str) -> None:
    target = bundle.rootfs / "lib" / "libsimgpu.so.1"
    target.mkdir() if planted == "dir" else os.mkfifo(target)
    _assert_refused(_run_hooked(bundle, driver, "openat2"), "refusing to mount on it")


def test_dev_symlinked_out_hook_adds_nothing_to_what_runc_does(
    bundle: Bundle, driver: Driver, host: HostWatch
) -> None:
    """runc 1.1.5 itself follows an image's /dev link (GHSA-xjvp-4fhw-gc47); the hook must add nothing."""
    bundle.spec["mounts"] = [m for m in bundle.spec["mounts"] if m["destination"] != "/dev"]
    devdir = host.outside / "devdir"
    devdir.mkdir()
    (bundle.rootfs / "dev").rmdir()
    (bundle.rootfs / "dev").symlink_to(devdir)
    before = tree(devdir)
    bundle.run("true", env=["SRO_VISIBLE_DEVICES=0"])
    by_runc = set(tree(devdir)) - set(before)
    for p in list(devdir.iterdir()):
        p.unlink()
    res = _run_hooked(bundle, driver, "openat2")
    _assert_refused(res, "/dev")
    with_hook = set(tree(devdir)) - set(before)
    assert with_hook <= by_runc, f"the hook added {with_hook - by_runc}"
    assert not any("sro-" in p for p in with_hook)


def test_symlink_swapped_during_injection(bundle: Bundle, driver: Driver, host: HostWatch) -> None:
    """A thread keeps exchanging /lib with a link out while containers start: nothing lands outside."""
    lib, evil = bundle.rootfs / "lib", bundle.rootfs / "lib.evil"
    evil.symlink_to(host.outside / "etc")
    libc = ctypes.CDLL(None, use_errno=True)
    stop = threading.Event()
    swaps = {"done": 0, "failed": 0, "errno": 0}

    def swap() -> None:
        while not stop.is_set():  # renameat2(RENAME_EXCHANGE): /lib is a dir, then a link, ...
            if libc.syscall(316, -100, bytes(lib), -100, bytes(evil), 2) == 0:
                swaps["done"] += 1
            else:
                swaps["failed"] += 1
                swaps["errno"] = ctypes.get_errno()

    before = host.snapshot()
    t = threading.Thread(target=swap, daemon=True)
    t.start()
    outcomes = set()
    try:
        bundle.add_hook("prestart", hook_entry(driver, "prestart", ["--resolver", "walk"]))
        for _ in range(12):
            res = bundle.run("echo STARTED", env=["SRO_VISIBLE_DEVICES=0"])
            outcomes.add("started" if "STARTED" in res.stdout else "refused")
    finally:
        stop.set()
        t.join()
    print("race outcomes:", outcomes, "swaps:", swaps)
    # the race ran: /lib really was exchanged with the link while the containers started
    assert swaps["done"] > 0, f"renameat2(RENAME_EXCHANGE) never succeeded: {swaps}"
    assert host.snapshot() == before, outcomes
    assert leftover_processes(str(bundle.path)) == []
