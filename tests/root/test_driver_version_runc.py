"""The simulated driver's version as a workload sees it: a container that gets the device through the
hook runs `simgpu-smi --version` (and finds the version in the injected library); after an upgrade
(`sro driver simulate --driver-version` over the installed driver) the next container sees the new one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.root.conftest import PYTHON, Bundle, Driver, hook_entry

pytestmark = pytest.mark.root

CHECK = "simgpu-smi --version; simgpu-smi | head -n 1; grep -c {v} /lib/libsimgpu.so.1"


def _install(base: Path, version: str) -> Driver:
    config = base / "devices.yaml"
    config.write_text('driverVersion: "550.0-sim"\ncount: 2\n')
    subprocess.run(
        [PYTHON, "-m", "sro", "driver", "simulate", "--config", str(config), "--driver-version", version,
         "--driver-root", str(base / "driver"), "--dev-root", str(base / "dev")],
        check=True, capture_output=True,
    )  # fmt: skip
    major = int((base / "driver" / "devices.json").read_text().split('"major": ')[1].split(",")[0])
    return Driver(base / "driver", base / "dev", major)


def test_the_container_sees_the_installed_version(bundle: Bundle, tmp_path: Path) -> None:
    base = tmp_path / "sim"
    base.mkdir()
    try:
        for version in ("550.0-sim", "555.0-sim"):
            driver = _install(base, version)
            bundle.spec.pop("hooks", None)
            bundle.add_hook("prestart", hook_entry(driver))
            res = bundle.run(CHECK.format(v=version), env=["SRO_VISIBLE_DEVICES=0"])
            assert res.returncode == 0, res.stdout + res.stderr
            assert res.stdout.splitlines() == [
                f"simgpu-smi version : {version} (SIMULATED)",
                f"DRIVER version     : {version}",
                f"simgpu-smi: SIMULATED devices, driver {version}",
                "1",
            ], res.stdout + res.stderr
    finally:
        subprocess.run(
            [PYTHON, "-m", "sro", "driver", "simulate", "--remove",
             "--driver-root", str(base / "driver"), "--dev-root", str(base / "dev")],
            check=False, capture_output=True,
        )  # fmt: skip
