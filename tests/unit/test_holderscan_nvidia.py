"""The holder scan on NVIDIA's majors: 195 (nvidia<minor>, nvidiactl), the character drivers of
/proc/devices named nvidia* (nvidia-uvm, nvidia-caps, ...) and the majors a simulated NVIDIA driver
recorded in its devices.json. Real processes hold real char nodes (we are root: mknod) under temp
roots and the scan of the real /proc finds them; other processes of this shared machine may hold
nodes of the same majors, so only ours are asserted on."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from sro.api import holders as contract
from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.devices import simulated_nvidia
from sro.node import holderscan
from sro.node.commands import driver

HOLD = "import os, sys; fds = [os.open(p, os.O_PATH) for p in sys.argv[1:]]; print('ready', flush=True); sys.stdin.read()"
PROC_DEVICES = """Character devices:
  1 mem
195 nvidia-frontend
234 nvidia-nvswitch
508 nvidia-uvm
509 nvidia-caps
510 sro-simgpu

Block devices:
  8 sd
259 nvidia-looking-block
"""


def test_char_drivers_of_proc_devices() -> None:
    assert holderscan.char_drivers(PROC_DEVICES, "nvidia") == {
        195: "nvidia-frontend",
        234: "nvidia-nvswitch",
        508: "nvidia-uvm",
        509: "nvidia-caps",
    }  # fmt: skip  (block devices are not character devices)
    assert holderscan.char_drivers("garbage\n\n 12\n", "nvidia") == {}


def test_nvidia_majors_without_any_node(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "devices").write_text(PROC_DEVICES)
    targets = holderscan.targets_for(NVIDIA_GPU, str(tmp_path / "root"), str(tmp_path / "dev"), str(proc))
    assert targets.majors == {195: "nvidia", 234: "nvidia-nvswitch", 508: "nvidia-uvm", 509: "nvidia-caps"}
    assert targets.device(os.makedev(508, 1)) == "char 508:1 (nvidia-uvm)"
    assert targets.device(os.makedev(510, 0)) is None  # another driver
    assert holderscan.targets_for(SIMULATED_GPU, str(tmp_path), str(tmp_path), str(proc)).majors == {}


def test_recorded_nodes_of_a_simulated_nvidia_driver() -> None:
    doc = {
        "majors": {"nvidia": 195, "uvm": 508, "caps": 509, "odd": "x"},
        "nodes": [{"path": "/dev/nvidia0", "major": 195, "minor": 0}, {"path": "/dev/bad", "major": "1"}],
    }
    nodes, majors = holderscan.recorded_nodes(doc)
    assert nodes == {(195, 0): "/dev/nvidia0"}
    assert majors == {195: "nvidia", 508: "nvidia-uvm", 509: "nvidia-caps"}
    assert holderscan.recorded_nodes(["not", "a", "doc"]) == ({}, {})


# --- real processes, real nodes ------------------------------------------------------------------


def mknod(path: Path, major: int, minor: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(major, minor))
    return path


@pytest.fixture
def holding() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            assert p.stdin is not None
            p.stdin.close()
            p.wait(timeout=10)
        if p.stdout is not None:
            p.stdout.close()


def hold(procs: list[subprocess.Popen[str]], *nodes: Path) -> subprocess.Popen[str]:
    """A process holding O_PATH descriptors of `nodes` (opening a node with no driver gives ENXIO)."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, *map(str, nodes)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)  # fmt: skip
    procs.append(p)
    assert p.stdout is not None and p.stdout.readline() == "ready\n"
    return p


def ours(scan: holderscan.Scan, pid: int) -> tuple[str, ...]:
    return next((h.holds for h in scan.holders if h.pid == pid), ())


@pytest.mark.root
def test_a_process_holding_195_0_is_found(tmp_path: Path, holding: list[subprocess.Popen[str]]) -> None:
    dev, proc = tmp_path / "dev", tmp_path / "proc"
    proc.mkdir()
    (proc / "devices").write_text(PROC_DEVICES)
    gpu0 = mknod(dev / "nvidia0", 195, 0)
    stray = mknod(tmp_path / "elsewhere/gpu3", 195, 3)  # a node of the driver outside the dev root
    uvm = mknod(tmp_path / "elsewhere/uvm", 508, 1)
    other = mknod(tmp_path / "elsewhere/other", 510, 0)
    p = hold(holding, gpu0, stray, uvm, other)
    targets = holderscan.targets_for(NVIDIA_GPU, str(tmp_path / "root"), str(dev), str(proc))
    found = holderscan.scan("/proc", targets)
    assert ours(found, p.pid) == ("/dev/nvidia0", "char 195:3 (nvidia)", "char 508:1 (nvidia-uvm)")
    holder = next(h for h in found.holders if h.pid == p.pid)
    assert holder.executable.startswith("python")
    assert p.stdin is not None
    p.stdin.close()
    p.wait(timeout=10)
    assert ours(holderscan.scan("/proc", targets), p.pid) == ()


@pytest.mark.root
def test_cli_on_a_simulated_nvidia_driver(tmp_path: Path, holding: list[subprocess.Popen[str]]) -> None:
    """`sro driver holders --recipe nvidia-gpu` over the simulated NVIDIA driver's own install: its
    uvm and caps majors are picked free ones that /proc/devices does not list; devices.json does."""
    proc_devices = Path("/proc/devices").read_text()
    modules = Path("/proc/modules")
    if simulated_nvidia.refusal(modules.read_text() if modules.exists() else "", proc_devices):
        pytest.skip("a real NVIDIA driver is loaded here")
    native = tmp_path / "native"
    native.mkdir()
    (native / "libnvidia-ml.so.1").write_bytes(b"\x7fELF placeholder")  # the layout is all the scan needs
    (native / "nvidia-smi").write_text("#!/bin/sh\n")
    root, dev = tmp_path / "run/nvidia/driver", tmp_path / "dev"
    inv = simulated_nvidia.parse(
        {"personality": "nvidia", "count": 2, "devices": [{}, {"mig": [{"profile": "1g.5gb"}]}]}
    )
    simulated_nvidia.install(inv, root, dev, proc_devices, "", simulated_nvidia.find_native(native))
    doc = json.loads((root / "devices.json").read_text())
    mig_node = inv.devices[1].mig_devices[0].device_node
    caps = doc["majors"]["caps"]
    stray_cap = mknod(tmp_path / "elsewhere/cap", caps, 99)  # no node of it under the dev root
    p = hold(holding, dev / "nvidia1", dev / mig_node.removeprefix("/dev/"), dev / "nvidia-uvm", stray_cap)
    args = ["holders", "--recipe", "nvidia-gpu", "--driver-root", str(root), "--dev-root", str(dev), "--json"]
    r = CliRunner().invoke(driver, args)
    assert r.exit_code == contract.EXIT_HELD, r.output
    got = json.loads(r.stdout)
    mine = next(h for h in got["holders"] if h["pid"] == p.pid)
    assert mine["holds"] == ["/dev/nvidia1", mig_node, "/dev/nvidia-uvm", f"char {caps}:99 (nvidia-caps)"]
    assert caps not in holderscan.char_drivers(proc_devices, "nvidia")  # only devices.json said it
    simulated_nvidia.remove(root, dev)
