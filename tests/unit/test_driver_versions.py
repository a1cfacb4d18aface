"""Versions of the simulated driver: `sro driver simulate --driver-version`, the version reaching the
files a container gets (simgpu-smi, the libraries, devices.json), and an upgrade over an installed
driver replacing its files and device nodes while a process holding the old ones keeps them."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

from sro.devices import simconfig
from sro.node.commands import driver

EXAMPLE = (resources.files("sro.devices") / "examples" / "8gpu-nvlink.yaml").read_text()


@pytest.mark.parametrize("good", ["550.0-sim", "555.42.06", "1", "v2_beta.3", "a" * 63])
def test_driver_version_accepts_label_values(good: str) -> None:
    assert simconfig.driver_version(good) == good


@pytest.mark.parametrize(
    "bad", ["", "a b", "$(reboot)", '1"; rm -rf /', "555.0-sim\n", "-1", "1.", "a" * 64, "1+sim", "ä1"]
)
def test_driver_version_refuses_the_rest(bad: str) -> None:
    with pytest.raises(simconfig.SimConfigError, match="driverVersion"):
        simconfig.driver_version(bad)
    with pytest.raises(simconfig.SimConfigError, match="driverVersion"):
        simconfig.parse({"driverVersion": bad, "count": 1})


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "devices.yaml").write_text(EXAMPLE)
    (tmp_path / "proc-devices").write_text(Path("/proc/devices").read_text())
    return tmp_path


def _simulate(tree: Path, *extra: str) -> list[str]:
    return ["simulate", "--config", str(tree / "devices.yaml"), "--driver-root", str(tree / "root"),
            "--dev-root", str(tree / "dev"), "--proc-devices", str(tree / "proc-devices"), *extra]  # fmt: skip


@pytest.mark.parametrize("bad", ["", "5 5", "$(id)", "x" * 64, "-rc1"])
def test_bad_driver_version_is_a_usage_error(tree: Path, bad: str) -> None:
    r = CliRunner().invoke(driver, _simulate(tree, "--driver-version", bad))
    assert r.exit_code == 2, r.output
    assert "Invalid value for '--driver-version'" in r.output and "Traceback" not in r.output
    assert not (tree / "root").exists() and not (tree / "dev").exists()


def test_driver_version_does_not_go_with_remove(tree: Path) -> None:
    r = CliRunner().invoke(driver, [*_simulate(tree, "--driver-version", "1.0"), "--remove"])
    assert r.exit_code == 2 and "--driver-version" in r.output


def test_bad_driver_version_in_the_config_names_the_field(tree: Path) -> None:
    (tree / "devices.yaml").write_text('driverVersion: "1.0; reboot"\ncount: 1\n')
    r = CliRunner().invoke(driver, _simulate(tree))
    assert r.exit_code == 1 and "driverVersion" in r.output and "Traceback" not in r.output


def _smi(tree: Path, *args: str) -> str:
    smi = tree / "root" / "bin" / "simgpu-smi"
    return subprocess.run(["sh", str(smi), *args], check=True, capture_output=True, text=True).stdout


@pytest.mark.root
def test_upgrade_replaces_files_and_nodes(tree: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(driver, _simulate(tree))
    assert r.exit_code == 0, r.output
    assert "simulated driver 550.0-sim: 8 SIMULATED devices" in r.output
    assert "DRIVER version     : 550.0-sim" in _smi(tree, "--version")
    root, dev = tree / "root", tree / "dev"
    old_node, old_lib, old_smi = ((dev / "sro-simgpu0").stat(), (root / "lib" / "libsimgpu.so.1").stat(),
                                  (root / "bin" / "simgpu-smi").stat())  # fmt: skip
    major = json.loads((root / "devices.json").read_text())["major"]
    # what a workload holds across the upgrade: the old node (O_PATH) and the old library (mapped)
    held = os.open(dev / "sro-simgpu0", os.O_PATH)
    try:
        r = runner.invoke(driver, _simulate(tree, "--driver-version", "555.0-sim"))
        assert r.exit_code == 0, r.output
        assert "simulated driver 555.0-sim: 8 SIMULATED devices" in r.output
        doc = json.loads((root / "devices.json").read_text())
        assert doc["driverVersion"] == "555.0-sim" and doc["major"] == major
        out = _smi(tree, "--version")
        assert out.splitlines() == [
            "simgpu-smi version : 555.0-sim (SIMULATED)",
            "DRIVER version     : 555.0-sim",
        ]
        assert _smi(tree).splitlines()[0] == "simgpu-smi: SIMULATED devices, driver 555.0-sim"
        for soname, symbol in (
            ("libsimgpu.so.1", "simgpu_version"),
            ("libsimgpu-ml.so.1", "simgpu_ml_version"),
        ):
            lib = ctypes.CDLL(str(root / "lib" / soname))
            assert (ctypes.c_char * 10).in_dll(lib, symbol).value == b"555.0-sim"
        # new inodes everywhere; same device numbers; the holder keeps the old node
        assert (dev / "sro-simgpu0").stat().st_ino != old_node.st_ino
        assert (dev / "sro-simgpu0").stat().st_rdev == old_node.st_rdev
        assert (dev / "sro-simgpuctl").stat().st_rdev == os.makedev(major, 255)
        assert (root / "lib" / "libsimgpu.so.1").stat().st_ino != old_lib.st_ino
        assert (root / "bin" / "simgpu-smi").stat().st_ino != old_smi.st_ino
        assert os.fstat(held).st_ino == old_node.st_ino
    finally:
        os.close(held)
    # the same version again changes nothing on the device nodes
    again = (dev / "sro-simgpu0").stat().st_ino
    assert runner.invoke(driver, _simulate(tree, "--driver-version", "555.0-sim")).exit_code == 0
    assert (dev / "sro-simgpu0").stat().st_ino == again
    r = runner.invoke(driver, ["simulate", "--remove", "--driver-root", str(root), "--dev-root", str(dev)])
    assert r.exit_code == 0 and not (dev / "sro-simgpu0").exists()
