"""`sro validate driver`: the pure verdicts over hand-made facts, and the whole check over the
simulated driver installed into a temp dir (real device nodes, devices.json, simgpu-smi)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.cli import cli
from sro.devices import simconfig, simulated_driver
from sro.devices.model import Device, DeviceUUID, Inventory
from sro.host.devnodes import NodeStat
from sro.host.root import HostRoot
from sro.node.validation import driver, tools
from sro.node.validation.report import Report

U = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(3)]


def _inventory(n: int = 2) -> Inventory:
    devices = tuple(
        Device(
            uuid=DeviceUUID(U[i]),
            index=i,
            minor=i,
            device_node=f"/dev/sro-simgpu{i}",
            pci_bus_id=f"0000:0{i}:00.0",
            product="Sim",
            memory_mib=1024,
            compute_capability="9.0",
            simulated=True,
        )
        for i in range(n)
    )
    return Inventory("simulated", devices, "1.0-sim", ("/dev/sro-simgpuctl",), simulated=True)


def _listing(*uuids: str) -> str:
    return "".join(f"GPU {i}: Sim (UUID: {u}) [simulated]\n" for i, u in enumerate(uuids))


def _nodes(n: int = 2) -> tuple[NodeStat, ...]:
    devs = tuple(NodeStat(f"/dev/sro-simgpu{i}", f"/d/sro-simgpu{i}", "char", 120, i) for i in range(n))
    return (*devs, NodeStat("/dev/sro-simgpuctl", "/d/sro-simgpuctl", "char", 120, 255))


def _facts(**changes: object) -> driver.DriverFacts:
    base: dict[str, object] = dict(
        recipe=SIMULATED_GPU,
        driver_root="/driver-root",
        dev_root="/host-dev",
        inventory=_inventory(),
        tool=tools.ToolRun(("/driver-root/bin/simgpu-smi", "-L"), 0, _listing(U[0], U[1])),
        nodes=_nodes(),
    )
    base.update(changes)
    return driver.DriverFacts(**base)  # type: ignore[arg-type]


def _by_check(facts: driver.DriverFacts) -> dict[str, tuple[str, str]]:
    return {r.check: (r.status, r.reason) for r in driver.evaluate(facts)}


def test_all_good() -> None:
    results = driver.evaluate(_facts())
    assert [r.status for r in results] == ["pass"] * 4
    report = Report("driver", "h", results)
    assert report.exit_code == 0 and report.stderr_lines() == []
    assert report.stdout_lines()[-1].startswith("driver validation passed (4 checks)")
    assert "SIMULATED" in report.stdout_lines()[1]


def test_missing_node() -> None:
    nodes = (*_nodes()[:1], NodeStat("/dev/sro-simgpu1", "/host-dev/sro-simgpu1", "absent"), _nodes()[2])
    status, reason = _by_check(_facts(nodes=nodes))["device nodes"]
    assert status == "fail"
    assert reason.startswith(
        f"/dev/sro-simgpu1 of device 1 ({U[1]}) is missing (looked at /host-dev/sro-simgpu1)"
    )
    assert "--dev-root" in reason and "sro driver simulate" in reason


def test_node_not_a_char_device_or_wrong_minor() -> None:
    nodes = list(_nodes())
    nodes[0] = NodeStat("/dev/sro-simgpu0", "/d/sro-simgpu0", "other", detail="not a device node")
    nodes[1] = NodeStat("/dev/sro-simgpu1", "/d/sro-simgpu1", "char", 120, 7)
    res = next(r for r in driver.evaluate(_facts(nodes=tuple(nodes))) if r.check == "device nodes")
    assert res.status == "fail" and "not a character device (not a device node" in res.reason
    assert any("has minor 7, the driver says 1" in d for d in res.details)


def test_control_node_missing() -> None:
    nodes = (*_nodes()[:2], NodeStat("/dev/sro-simgpuctl", "/d/sro-simgpuctl", "absent"))
    status, reason = _by_check(_facts(nodes=nodes))["device nodes"]
    assert status == "fail" and reason.startswith("/dev/sro-simgpuctl of control node is missing")


def test_count_mismatch() -> None:
    tool = tools.ToolRun(("smi", "-L"), 0, _listing(U[0]))
    status, reason = _by_check(_facts(tool=tool))["tool vs inventory"]
    assert status == "fail"
    assert reason.startswith(
        f"simgpu-smi lists 1 devices, the simulated backend 2; not listed by simgpu-smi: {U[1]}"
    )


def test_wrong_uuid() -> None:
    tool = tools.ToolRun(("smi", "-L"), 0, _listing(U[0], U[2]))
    status, reason = _by_check(_facts(tool=tool))["tool vs inventory"]
    assert status == "fail" and f"not listed by simgpu-smi: {U[1]}" in reason
    assert f"unknown to the backend: {U[2]}" in reason and "lists 2" not in reason


def test_tool_missing() -> None:
    checks = _by_check(_facts(tool=None, tool_searched="/driver-root/bin/simgpu-smi, ..."))
    assert checks["tool"][0] == "fail"
    assert checks["tool"][1].startswith("simgpu-smi not found (looked at /driver-root/bin/simgpu-smi")
    assert checks["tool vs inventory"][0] == "skip"


def test_tool_fails_and_lists_nothing() -> None:
    failed = tools.ToolRun(("smi", "-L"), 3, "", "cannot read devices\n")
    status, reason = _by_check(_facts(tool=failed))["tool"]
    assert status == "fail" and "`smi -L` failed (exit status 3: cannot read devices)" in reason
    status, reason = _by_check(_facts(tool=tools.ToolRun(("smi", "-L"), 0, "nothing\n")))["tool"]
    assert status == "fail" and "lists no devices" in reason
    unstartable = tools.ToolRun(("smi", "-L"), None, error="smi: cannot execute (Permission denied)")
    assert "cannot execute" in _by_check(_facts(tool=unstartable))["tool"][1]


def test_inventory_unreadable_or_empty() -> None:
    facts = _facts(inventory=None, inventory_error="/r/devices.json: no simulated driver here", nodes=())
    checks = _by_check(facts)
    assert checks["inventory"][0] == "fail" and "no simulated driver here" in checks["inventory"][1]
    assert checks["device nodes"][0] == "skip" and checks["tool vs inventory"][0] == "skip"
    report = Report("driver", "h", driver.evaluate(facts))
    assert report.stderr_lines()[0].startswith("inventory: the simulated backend cannot list the devices")
    empty = Inventory("nvml", ())
    checks = _by_check(_facts(recipe=NVIDIA_GPU, inventory=empty, tool=None, tool_searched="x"))
    assert "reports no devices" in checks["inventory"][1] and "lsmod" in checks["inventory"][1]


def test_listing_parser_reads_both_tools() -> None:
    nvidia = (
        "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5fd1b5a4-7a2c-1e9e-2d43-3c0e4f1a1111)\n"
        "  MIG 1g.5gb     Device  0: (UUID: MIG-aaaa)\n"
        "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-5fd1b5a4-7a2c-1e9e-2d43-3c0e4f1a2222)\n"
    )
    listed = tools.parse_listing(nvidia)
    assert [(x.index, x.uuid[-4:]) for x in listed] == [(0, "1111"), (1, "2222")]
    assert listed[0].product == "NVIDIA A100-SXM4-40GB"
    assert tools.parse_listing(_listing(U[0]))[0].uuid == U[0]


def test_tool_argv_chroots_into_a_mounted_real_driver_root(tmp_path: Path) -> None:
    smi = tmp_path / "usr" / "bin" / "nvidia-smi"
    assert driver.tool_argv(NVIDIA_GPU, tmp_path, smi) == [
        "chroot",
        str(tmp_path),
        "/usr/bin/nvidia-smi",
        "-L",
    ]
    assert driver.tool_argv(NVIDIA_GPU, Path("/"), Path("/usr/bin/nvidia-smi")) == [
        "/usr/bin/nvidia-smi",
        "-L",
    ]
    assert driver.tool_argv(SIMULATED_GPU, tmp_path, smi) == [str(smi), "-L"]


# -- the whole check over an installed simulated driver -------------------------------------------


@pytest.fixture
def installed(tmp_path: Path) -> simulated_driver.Installed:
    inv = simconfig.parse({"count": 3}, device_node=SIMULATED_GPU.device_node)
    return simulated_driver.install(
        inv, tmp_path / "root", tmp_path / "dev", Path("/proc/devices").read_text()
    )


def _validate(tmp_path: Path) -> dict[str, tuple[str, str]]:
    report = driver.validate(
        SIMULATED_GPU, tmp_path / "root", HostRoot.at("/").with_tree(dev=tmp_path / "dev")
    )
    return {r.check: (r.status, r.reason) for r in report.results}


@pytest.mark.root
def test_installed_driver_passes(installed: simulated_driver.Installed, tmp_path: Path) -> None:
    assert {s for s, _ in _validate(tmp_path).values()} == {"pass"}


@pytest.mark.root
def test_installed_driver_with_a_node_removed(installed: simulated_driver.Installed, tmp_path: Path) -> None:
    (tmp_path / "dev" / "sro-simgpu2").unlink()
    checks = _validate(tmp_path)
    assert checks["device nodes"][0] == "fail" and "/dev/sro-simgpu2 of device 2" in checks["device nodes"][1]
    assert checks["tool vs inventory"][0] == "pass"


@pytest.mark.root
def test_installed_driver_with_a_stale_device_list(
    installed: simulated_driver.Installed, tmp_path: Path
) -> None:
    """The device list and the tool disagree: one device gone from the list, another's UUID changed."""
    path = tmp_path / "root" / "devices.json"
    doc = json.loads(path.read_text())
    doc["devices"] = doc["devices"][:2]
    doc["devices"][1]["uuid"] = "GPU-ffffffff-0000-0000-0000-000000000000"
    path.write_text(json.dumps(doc))
    status, reason = _validate(tmp_path)["tool vs inventory"]
    assert status == "fail" and "simgpu-smi lists 3 devices, the simulated backend 2" in reason
    assert "unknown to the backend" in reason and "GPU-ffffffff" in reason


@pytest.mark.root
def test_installed_driver_tool_missing_or_failing(
    installed: simulated_driver.Installed, tmp_path: Path
) -> None:
    smi = tmp_path / "root" / "bin" / "simgpu-smi"
    smi.unlink()
    status, reason = _validate(tmp_path)["tool"]
    assert status == "fail" and f"looked at {smi}" in reason
    smi.write_text("#!/bin/sh\necho 'simgpu-smi: driver state unreadable' >&2\nexit 4\n")
    os.chmod(smi, 0o755)
    status, reason = _validate(tmp_path)["tool"]
    assert status == "fail" and "exit status 4: simgpu-smi: driver state unreadable" in reason


def test_no_driver_installed_cli(tmp_path: Path) -> None:
    """The command: exit 1, the reason first on stderr, the verdict last on stdout, the termination log."""
    log = tmp_path / "termination-log"
    args = ["validate", "driver", "--recipe", "simulated-gpu", "--driver-root", str(tmp_path / "none")]
    result = CliRunner().invoke(cli, [*args, "--dev-root", str(tmp_path), "--termination-log", str(log)])
    assert result.exit_code == 1, result.output
    first = result.stderr.splitlines()[0]
    assert first.startswith("inventory: the simulated backend cannot list the devices (")
    assert "sro driver simulate" in first
    assert result.stdout.splitlines()[-1].startswith("driver validation FAILED (2 of 2 checks): ")
    assert log.read_text().startswith("driver validation FAILED")


@pytest.mark.root
def test_installed_driver_cli(installed: simulated_driver.Installed, tmp_path: Path) -> None:
    args = ["validate", "driver", "--recipe", "simulated-gpu", "--driver-root", str(tmp_path / "root")]
    result = CliRunner().invoke(cli, [*args, "--dev-root", str(tmp_path / "dev")])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert result.stdout.splitlines()[-1].startswith("driver validation passed (4 checks)")


@pytest.mark.gpu
def test_nvidia_driver_on_a_gpu_machine() -> None:
    """On a machine with an NVIDIA GPU and driver: NVML and nvidia-smi agree, /dev/nvidiaN exist."""
    res = subprocess.run(
        [sys.executable, "-m", "sro", "validate", "driver", "--recipe", "nvidia-gpu"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "PASS inventory: nvml backend:" in res.stdout
    assert "PASS tool vs inventory: same" in res.stdout
    assert res.stdout.splitlines()[-1].startswith("driver validation passed (4 checks)")
