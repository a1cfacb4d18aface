"""The generated CDI spec read by a real CDI implementation: podman 4.3 (`--device kind=name`).

podman 4.3.1 reads CDI specs up to cdiVersion 0.5.0 from /etc/cdi and /var/run/cdi only, so the test
writes `--cdi-version 0.5.0` into /var/run/cdi under a unique name and removes it afterwards.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.root.conftest import PYTHON, Driver, make_rootfs, mount_points, podman_run

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman not installed"),
]
CDI_DIR = Path("/var/run/cdi")


def test_podman_injects_from_the_generated_spec(tmp_path: Path, driver: Driver) -> None:
    if CDI_DIR.is_dir() and any("simulated-gpu" in p.read_text() for p in CDI_DIR.iterdir() if p.is_file()):
        pytest.skip("a simulated-gpu CDI spec is already installed here; two would conflict")
    CDI_DIR.mkdir(parents=True, exist_ok=True)
    spec = CDI_DIR / f"sro-test-{uuid.uuid4().hex[:8]}.yaml"
    rootfs = make_rootfs(tmp_path / "rootfs")
    before = mount_points()
    try:
        subprocess.run(
            [
                PYTHON,
                "-m",
                "sro",
                "cdi",
                "generate",
                "--driver-root",
                str(driver.driver_root),
                "--dev-root",
                str(driver.dev_root),
                "--cdi-version",
                "0.5.0",
                "--output",
                str(spec),
            ],
            check=True,
        )
        res = podman_run(
            rootfs,
            "ls /dev | grep sro- | tr '\\n' ' '; cat /dev/sro-simgpu1 2>&1; ldconfig -p | grep -c simgpu; "
            "echo $SRO_VISIBLE_DEVICES",
            devices=["sro.dev/simulated-gpu=1"],
        )
    finally:
        spec.unlink(missing_ok=True)
    out = res.stdout + res.stderr
    assert "sro-simgpu1 sro-simgpuctl" in out and "sro-simgpu0" not in out, out
    assert "No such device or address" in out, out
    assert "\n2\nvoid" in out, out  # the ldcache hook ran; the env keeps a legacy hook from acting twice
    assert {m for m in mount_points() - before if not m.startswith("/var/lib/containers/")} == set()
