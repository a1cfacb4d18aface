"""`sro driver holders` against the real /proc: a simulated driver installed into temp dirs, one
process holding an O_PATH descriptor of a device node (opening one gives ENXIO), one mapping a
library, one of another user holding the control node; all found, then none once they exit. Then an
upgrade over them: the old node and the replaced (deleted) library still count. Other processes of
this shared machine may hold a simulated driver of the same major too: only ours are asserted on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from sro.api import holders as contract
from sro.api.recipes import SIMULATED_GPU
from sro.devices import simconfig, simulated_driver
from sro.node import holderscan as holders
from sro.node.commands import driver

pytestmark = pytest.mark.root

HOLD_NODE = (
    "import os, sys; fd = os.open(sys.argv[1], os.O_PATH); print('ready', flush=True); sys.stdin.read()"
)
MAP_LIB = (
    "import mmap, sys; f = open(sys.argv[1], 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ); "
    "f.close(); print('ready', flush=True); sys.stdin.read()"
)


@pytest.fixture
def installed(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    inv = simconfig.parse({"count": 2, "driverVersion": "550.0-sim"}, device_node=SIMULATED_GPU.device_node)
    root, dev = tmp_path / "driver", tmp_path / "dev"
    simulated_driver.install(inv, root, dev, Path("/proc/devices").read_text())
    yield root, dev
    simulated_driver.remove(root, dev)


def _start(code: str, arg: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-c", code, str(arg)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline() == "ready\n"
    return p


def _start_as_nobody(node: Path) -> subprocess.Popen[str]:
    """A process of user 65534 holding an O_PATH descriptor it inherited (it could not reach the
    node through the temp dir itself) and running the system's python3 (not the one under /root)."""
    fd = os.open(node, os.O_PATH)
    try:
        p = subprocess.Popen(
            ["/usr/bin/python3", "-c", "import sys; print('ready', flush=True); sys.stdin.read()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            user=65534,
            group=65534,
            extra_groups=[],
            pass_fds=(fd,),
        )
    finally:
        os.close(fd)
    assert p.stdout is not None and p.stdout.readline() == "ready\n"
    return p


def _stop(*procs: subprocess.Popen[str]) -> None:
    for p in procs:
        if p.stdin is not None:
            p.stdin.close()
        p.wait(timeout=10)
        if p.stdout is not None:
            p.stdout.close()


def _found(root: Path, dev: Path) -> dict[int, tuple[str, ...]]:
    targets = holders.targets_for(SIMULATED_GPU, str(root), str(dev))
    return {h.pid: h.holds for h in holders.scan("/proc", targets, skip={os.getpid()}).holders}


def test_holders_are_found_and_gone_after_they_exit(installed: tuple[Path, Path], tmp_path: Path) -> None:
    root, dev = installed
    with pytest.raises(OSError):
        os.open(dev / "sro-simgpu1", os.O_RDONLY)  # ENXIO: no process can really open it
    node = _start(HOLD_NODE, dev / "sro-simgpu1")
    lib = _start(MAP_LIB, root / "lib" / "libsimgpu-ml.so.1")
    other = _start_as_nobody(dev / "sro-simgpuctl")
    try:
        found = _found(root, dev)
        assert found[node.pid] == ("/dev/sro-simgpu1",)
        assert found[lib.pid] == ("libsimgpu-ml.so.1",)
        assert found[other.pid] == ("/dev/sro-simgpuctl",)

        log = tmp_path / "termination-log"
        args = ["holders", "--recipe", "simulated-gpu", "--driver-root", str(root), "--dev-root", str(dev)]
        r = CliRunner().invoke(driver, [*args, "--termination-log", str(log)])
        assert r.exit_code == contract.EXIT_HELD, r.output
        summary = contract.from_message(log.read_text())
        assert {h.pid for h in summary.holders} >= {node.pid, lib.pid, other.pid}
        # the executable's name, never the command line (arguments can hold secrets)
        exe = os.path.basename(os.path.realpath(f"/proc/{node.pid}/exe"))
        assert {h.executable for h in summary.holders if h.pid == node.pid} == {exe}
        assert HOLD_NODE not in r.output and HOLD_NODE not in log.read_text()

        # an upgrade while they hold: new nodes and files, the old ones still held
        inv = simconfig.parse(
            {"count": 2, "driverVersion": "555.0-sim"}, device_node=SIMULATED_GPU.device_node
        )
        simulated_driver.install(inv, root, dev, Path("/proc/devices").read_text())
        found = _found(root, dev)
        assert found[node.pid] == ("/dev/sro-simgpu1",) and found[lib.pid] == ("libsimgpu-ml.so.1",)
        maps = Path(f"/proc/{lib.pid}/maps").read_text()
        assert "libsimgpu-ml.so.1 (deleted)" in maps
    finally:
        _stop(node, lib, other)
    ours = {node.pid, lib.pid, other.pid}
    assert ours.isdisjoint(_found(root, dev))
    r = CliRunner().invoke(driver, [*args, "--json"])
    assert r.exit_code in (contract.EXIT_FREE, contract.EXIT_HELD, contract.EXIT_INCONCLUSIVE), r.output
    assert ours.isdisjoint(h["pid"] for h in json.loads(r.stdout)["holders"])
