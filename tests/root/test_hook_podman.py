"""The hook through podman's hooks.d (`sro hook install-hooksd`), on a busybox rootfs, no network."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.root.conftest import PYTHON, Driver, make_rootfs, mount_points, podman_run

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman not installed"),
]


def test_hooks_d_file_injects_through_podman(tmp_path: Path, driver: Driver) -> None:
    hooks_dir = tmp_path / "hooks.d"
    subprocess.run(
        [
            PYTHON,
            "-m",
            "sro",
            "hook",
            "install-hooksd",
            "--dir",
            str(hooks_dir),
            "--recipe",
            "simulated-gpu",
            "--driver-root",
            str(driver.driver_root),
            "--dev-root",
            str(driver.dev_root),
            "--python",
            PYTHON,
            "--accept-envvar-unprivileged",  # podman's default container is unprivileged
        ],
        check=True,
    )
    doc = json.loads((hooks_dir / "sro-hook.json").read_text())
    assert doc["hook"]["env"] and doc["hook"]["args"][:3] == [
        PYTHON,
        "-I",
        "-S",
    ]  # explicit env, isolated python
    rootfs = make_rootfs(tmp_path / "rootfs")
    before = mount_points()
    script = "ls /dev | grep sro- | tr '\\n' ' '; cat /dev/sro-simgpu1 2>&1; ldconfig -p | grep -c simgpu; simgpu-smi -L"
    res = podman_run(rootfs, hooks_dir=hooks_dir, env=["SRO_VISIBLE_DEVICES=1"], script=script)
    out = res.stdout + res.stderr
    assert "sro-simgpu1 sro-simgpuctl" in out and "sro-simgpu0" not in out, out
    assert "No such device or address" in out, out  # cgroup allows it: ENXIO, not EPERM
    assert "\n2\n" in out, out
    # nothing asked, nothing injected; the hook ran and returned at once
    res = podman_run(rootfs, hooks_dir=hooks_dir, env=[], script="ls /dev | grep -c sro- || true")
    assert res.stdout.strip() == "0", res.stdout + res.stderr
    # a bad request fails the start with the hook's reason
    res = podman_run(rootfs, hooks_dir=hooks_dir, env=["SRO_VISIBLE_DEVICES=9"], script="echo STARTED")
    assert "STARTED" not in res.stdout and "unknown device id '9'" in res.stderr, res.stderr
    # podman mounts its own storage on first use; nothing else may appear in the host's table
    assert {m for m in mount_points() - before if not m.startswith("/var/lib/containers/")} == set()
