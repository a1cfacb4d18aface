"""An image whose library path is already a symlink to the driver's own file (a host /usr bound in,
its soname links pointing into the driver's folder): with real runc, the hook skips that mount (a
debug line says so) and the container uses the library; a link to any other file, or out of the
rootfs, is refused as before (tests/root/test_hook_hostile.py has the hostile images)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.root.conftest import Bundle, Driver, HostWatch, capture_stderr, hook_entry

pytestmark = pytest.mark.root

RESOLVERS = ["openat2", "walk"]


def _bind_driver(bundle: Bundle, driver: Driver) -> None:
    """The driver root bound read-only at /drv, as python_bundle binds the host's /usr."""
    bind = {
        "destination": "/drv",
        "source": str(driver.driver_root),
        "type": "bind",
        "options": ["rbind", "ro"],
    }
    bundle.spec["mounts"].append(bind)
    (bundle.rootfs / "drv").mkdir()


def _run(bundle: Bundle, driver: Driver, resolver: str, log: Path) -> subprocess.CompletedProcess[str]:
    entry = hook_entry(driver, "prestart", ["--resolver", resolver, "--debug", "true"])
    bundle.add_hook("prestart", capture_stderr(entry, log))
    return bundle.run(
        "cat /lib/libsimgpu.so.1 | wc -c; ldconfig -p | grep -c simgpu; echo STARTED",
        env=["SRO_VISIBLE_DEVICES=0"],
    )


@pytest.mark.parametrize("resolver", RESOLVERS)
@pytest.mark.parametrize("link", ["/drv/lib/libsimgpu.so.1", "../drv/lib/libsimgpu.so.1"])
def test_link_to_the_driver_file_itself_is_skipped(
    bundle: Bundle, driver: Driver, host: HostWatch, resolver: str, link: str, tmp_path: Path
) -> None:
    _bind_driver(bundle, driver)
    (bundle.rootfs / "lib" / "libsimgpu.so.1").symlink_to(link)
    before = host.snapshot()
    res = _run(bundle, driver, resolver, tmp_path / "hook.log")
    size = (driver.driver_root / "lib" / "libsimgpu.so.1").stat().st_size
    assert res.returncode == 0 and res.stdout.split() == [str(size), "2", "STARTED"], res.stdout + res.stderr
    log = (tmp_path / "hook.log").read_text()
    assert "sro hook: debug: /lib/libsimgpu.so.1: the image's symlink there is " in log, log
    assert (bundle.rootfs / "lib" / "libsimgpu.so.1").is_symlink()  # the image's link, untouched
    assert host.snapshot() == before


@pytest.mark.parametrize("resolver", RESOLVERS)
@pytest.mark.parametrize("link", ["/drv/lib/libsimgpu-ml.so.1", "/lib/copy.so"])
def test_link_to_another_file_is_refused(
    bundle: Bundle, driver: Driver, resolver: str, link: str, tmp_path: Path
) -> None:
    """Another driver file, or a copy of the right one (same bytes, another inode)."""
    _bind_driver(bundle, driver)
    (bundle.rootfs / "lib" / "copy.so").write_bytes(
        (driver.driver_root / "lib" / "libsimgpu.so.1").read_bytes()
    )
    (bundle.rootfs / "lib" / "libsimgpu.so.1").symlink_to(link)
    res = _run(bundle, driver, resolver, tmp_path / "hook.log")
    assert res.returncode != 0 and "STARTED" not in res.stdout, res.stdout + res.stderr
    log = (tmp_path / "hook.log").read_text()  # runc's own message has the hook's stderr too, here in the log
    assert "/lib/libsimgpu.so.1 in the rootfs: [Errno 17] the image has a symlink there; refusing" in log, log
    assert "debug" not in log, log
