"""`sro driver simulate`, `sro simulate fault` and `sro device-plugin --oneshot` on a temp tree."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from sro.devices import simconfig
from sro.devices.commands import simulate
from sro.node.commands import driver
from sro.node.deviceplugin.commands import device_plugin

EXAMPLES = resources.files("sro.devices") / "examples"


@pytest.mark.parametrize("name", ["8gpu-nvlink.yaml", "4gpu-mig.yaml"])
def test_examples_parse(name: str) -> None:
    inv = simconfig.parse(yaml.safe_load((EXAMPLES / name).read_text()))
    assert inv.simulated and inv.devices


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "proc-devices").write_text(Path("/proc/devices").read_text())
    (tmp_path / "devices.yaml").write_text((EXAMPLES / "4gpu-mig.yaml").read_text())
    return tmp_path


def _driver(tree: Path, *args: str) -> list[str]:
    return ["--driver-root", str(tree / "root"), *args]


@pytest.mark.root
def test_driver_simulate_fault_clear_remove(tree: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(
        driver,
        ["simulate", "--config", str(tree / "devices.yaml"), "--dev-root", str(tree / "dev"),
         "--proc-devices", str(tree / "proc-devices"), *_driver(tree)],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "4 SIMULATED devices" in r.output and (tree / "dev" / "sro-simgpu3").exists()
    inv = json.loads((tree / "root" / "devices.json").read_text())
    mig = inv["devices"][0]["mig"][1]["uuid"]

    r = runner.invoke(simulate, ["fault", "--device", "2", "--device", mig, "--xid", "48", *_driver(tree)])
    assert r.exit_code == 0, r.output
    faults = json.loads((tree / "root" / "faults.json").read_text())["faults"]
    assert sorted(faults) == sorted([inv["devices"][2]["uuid"], mig]) and {
        f["xid"] for f in faults.values()
    } == {48}

    r = runner.invoke(simulate, ["status", *_driver(tree)])
    assert r.exit_code == 0, r.output
    st = json.loads(r.output)
    assert [d["fault"]["xid"] if d["fault"] else None for d in st["devices"]] == [None, None, 48, None]
    assert [m["fault"] for m in st["devices"][0]["mig"]] == [False, True, False, False]

    r = runner.invoke(
        device_plugin, ["--recipe", "simulated-gpu", "--driver-root", str(tree / "root"), "--oneshot"]
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["simulated"] and out["backend"] == "simulated"
    health = {d["index"]: d["healthy"] for d in out["resources"]["sro.dev/simulated-gpu"]}
    assert health == {"0": True, "1": True, "2": False, "3": True}

    cfg = tree / "mixed.yaml"
    cfg.write_text("flags: {migStrategy: mixed}\n")
    r = runner.invoke(
        device_plugin,
        ["--recipe", "simulated-gpu", "--driver-root", str(tree / "root"), "--config", str(cfg), "--oneshot"],
    )
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)["resources"]
    assert sorted(res) == [
        "sro.dev/simulated-gpu",
        "sro.dev/simulated-gpu-mig-1g.5gb",
        "sro.dev/simulated-gpu-mig-3g.20gb",
    ]
    assert [d["healthy"] for d in res["sro.dev/simulated-gpu-mig-1g.5gb"]] == [True, False, True]

    r = runner.invoke(simulate, ["fault", "--all", "--clear", *_driver(tree)])
    assert r.exit_code == 0 and len(json.loads(r.output)["cleared"]) == 2

    r = runner.invoke(driver, ["simulate", "--remove", "--dev-root", str(tree / "dev"), *_driver(tree)])
    assert r.exit_code == 0 and not (tree / "dev" / "sro-simgpu0").exists() and not (tree / "root").exists()


def test_bad_input_is_a_clear_error(tree: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(simulate, ["fault", "--device", "0", *_driver(tree)])
    assert r.exit_code == 1 and "sro driver simulate" in r.output
    r = runner.invoke(simulate, ["fault", *_driver(tree)])
    assert r.exit_code == 2 and "--device" in r.output
    (tree / "bad.yaml").write_text("count: many\n")
    r = runner.invoke(driver, ["simulate", "--config", str(tree / "bad.yaml"), *_driver(tree)])
    assert r.exit_code == 1 and "count" in r.output
    r = runner.invoke(driver, ["simulate", *_driver(tree)])
    assert r.exit_code == 2 and "--config" in r.output
    r = runner.invoke(simulate, ["fault", "--device", "0", "--xid", "-5", *_driver(tree)])
    assert r.exit_code == 2 and "--xid" in r.output  # Xids are positive integers
    # the plugin's dry run with no driver installed: one line naming the file, no traceback
    r = runner.invoke(device_plugin, ["--recipe", "simulated-gpu", "--oneshot", *_driver(tree)])
    assert r.exit_code == 1 and "no simulated driver here" in r.output and r.exception is not None
    assert isinstance(r.exception, SystemExit) and "Traceback" not in r.output


@pytest.mark.root
def test_unknown_device_names_the_known_ones(tree: Path) -> None:
    runner = CliRunner()
    args = ["simulate", "--config", str(tree / "devices.yaml"), "--dev-root", str(tree / "dev"),
            "--proc-devices", str(tree / "proc-devices"), *_driver(tree)]  # fmt: skip
    assert runner.invoke(driver, args).exit_code == 0
    r = runner.invoke(simulate, ["fault", "--device", "GPU-nope", *_driver(tree)])
    assert r.exit_code == 1 and "no such simulated device" in r.output and "0=GPU-" in r.output


def test_plugin_waits_for_a_missing_driver_and_stops_on_sigterm(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    if os.path.exists("/proc/driver/nvidia/version"):  # a real kernel driver (not the simulated one)
        pytest.skip("an NVIDIA driver is present here")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sro",
            "device-plugin",
            "--recipe",
            "nvidia-gpu",
            "--plugin-dir",
            str(tmp_path),
            "--driver-root",  # an empty driver root: no NVML there, whatever the host has installed
            str(tmp_path / "no-driver"),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 20
    line = proc.stderr.readline() if proc.stderr else ""
    while "backend unavailable" not in line and time.monotonic() < deadline:
        line = proc.stderr.readline() if proc.stderr else ""
    assert proc.poll() is None, "the plugin must keep waiting for its driver"
    proc.send_signal(signal.SIGTERM)
    _, rest = proc.communicate(timeout=10)
    assert proc.returncode == 0, rest
    assert "nvml backend unavailable (retrying" in line


@pytest.mark.root
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_hold_marks_ready_and_removes_the_driver_on_a_stop_signal(tree: Path, signame: str) -> None:
    """`--hold` is what the driver DaemonSet's pod runs: installed and ready until it is stopped."""
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "sro", "driver", "simulate", "--config", str(tree / "devices.yaml"),
         "--dev-root", str(tree / "dev"), "--proc-devices", str(tree / "proc-devices"), *_driver(tree), "--hold"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        marker = tree / "root" / ".ready"
        deadline = time.monotonic() + 30
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), proc.stderr.read() if proc.poll() is not None and proc.stderr else "no marker"
        assert (tree / "root" / "devices.json").exists() and (tree / "dev" / "sro-simgpu3").exists()
        time.sleep(0.2)
        assert proc.poll() is None, "it holds the driver until stopped"
        proc.send_signal(getattr(signal, signame))
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "4 SIMULATED devices" in out and f"{signame}: removed" in out
    assert not (tree / "dev" / "sro-simgpu0").exists() and not (tree / "dev" / "sro-simgpuctl").exists()
    assert not (tree / "root").exists(), "the marker goes too, so the driver root is removed"


def test_hold_does_not_go_with_remove(tree: Path) -> None:
    r = CliRunner().invoke(driver, ["simulate", "--remove", "--hold", *_driver(tree)])
    assert r.exit_code == 2 and "--hold" in r.output
