"""`sro validate driver|workload` for a custom recipe: the pure checks of `recipechecks` over hand-made
facts, and both validations over the example FPGA installed by the simulated driver into a temp dir
(companion nodes, driver files, `xbutil examine`), breaking one thing at a time."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sro.api.recipes import Recipe, recipe_from_file
from sro.cli import cli
from sro.devices.driverstate import read_inventory
from sro.devices.model import Device, DeviceUUID, Inventory
from sro.host import devnodes, ldcache
from sro.host.root import HostRoot
from sro.node.validation import recipechecks as rc
from sro.node.validation import recipevalidation, tools

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FPGA = recipe_from_file(EXAMPLES / "fpga" / "recipe.yaml")
LDCONFIG = shutil.which("ldconfig") or "/sbin/ldconfig"


def _stat(path: str, kind: str = "char", major: int = 120, minor: int = 0) -> devnodes.NodeStat:
    return devnodes.NodeStat(path, "/d" + path, kind, major, minor)


def _open(path: str, err: int, minor: int = 0) -> devnodes.OpenResult:
    return devnodes.OpenResult(_stat(path, "absent" if err == errno.ENOENT else "char", minor=minor), err)


def _card(i: int) -> Device:
    return Device(
        DeviceUUID(f"F-{i}"), i, i, f"/dev/xclmgmt{i}", "", "U250 (simulated)", 0, "",
        simulated=True, companion_nodes=(f"/dev/dri/renderD{128 + i}",),
    )  # fmt: skip


INV = Inventory("simulated", (_card(0), _card(1)), simulated=True)


def test_builtin_recipes_keep_their_tool() -> None:
    from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU, on_simulated_driver

    assert tools.tool_name(SIMULATED_GPU) == "simgpu-smi"
    assert tools.tool_name(on_simulated_driver(NVIDIA_GPU)) == "nvidia-smi"
    assert tools.tool_name(FPGA) is None and not tools.builtin(FPGA)


def test_driver_companions() -> None:
    good = [_stat("/dev/dri/renderD128", minor=2), _stat("/dev/dri/renderD129", minor=3)]
    r = rc.check_driver_companions(FPGA, INV, good, "/host-dev")
    assert r.status == "pass" and "2 companion nodes" in r.summary and "SIMULATED" in r.summary
    r = rc.check_driver_companions(FPGA, INV, good[:1], "/host-dev")
    assert r.status == "fail" and r.reason.startswith("/dev/dri/renderD129 of device 1 (F-1) is missing")
    same = [good[0], _stat("/dev/dri/renderD129", minor=2)]
    r = rc.check_driver_companions(FPGA, INV, same, "/host-dev")
    assert r.status == "fail" and "is c 120:2, as /dev/dri/renderD128" in r.reason
    r = rc.check_driver_companions(FPGA, INV, [good[0], _stat("/dev/dri/renderD129", "other")], "/x")
    assert r.status == "fail" and "not a character device" in r.reason
    assert rc.check_driver_companions(FPGA, None, good, "/x").status == "skip"
    from dataclasses import replace

    assert rc.check_driver_companions(replace(FPGA, companion_nodes=()), INV, (), "/x").status == "skip"


def test_files_and_commands() -> None:
    found = [rc.Found("runtime", "library", "libxrt_core.so.*", ("/r/lib/libxrt_core.so.2",))]
    assert rc.check_files(FPGA, found, "/r").status == "pass"
    found.append(rc.Found("runtime", "binary", "xbutil", ()))
    r = rc.check_files(FPGA, found, "/r")
    assert r.status == "fail" and r.reason.startswith("not under the driver root /r: binary xbutil (runtime)")
    ok = rc.Command(
        ("xbutil", "examine"), tools.ToolRun(("/r/bin/xbutil", "examine"), 0, "card 0 ok\nmore\n")
    )
    r = rc.check_commands(FPGA, [ok], "hint")
    assert (
        r.status == "pass"
        and r.summary.endswith(": card 0 ok")
        and r.details == ("xbutil examine: card 0 ok",)
    )
    bad = rc.Command(("xbutil", "examine"), tools.ToolRun(("/r/bin/xbutil",), 3, "", "no card\n"))
    r = rc.check_commands(FPGA, [ok, bad], "hint")
    assert r.status == "fail" and r.reason == "`xbutil examine` failed (exit status 3: no card); hint"
    gone = rc.Command(("xbutil", "examine"), None, "xbutil is not on PATH (/bin)")
    assert "did not run: xbutil is not on PATH" in rc.check_commands(FPGA, [gone], "h").reason
    assert rc.check_commands(FPGA, [], "h").status == "skip"


def test_workload_companions() -> None:
    mine = _open("/dev/dri/renderD129", errno.ENXIO)
    r = rc.check_workload_companions(FPGA, ["/dev/xclmgmt1"], [mine], "hint")
    assert r.status == "pass" and r.summary.startswith("/dev/dri/renderD129 usable")
    r = rc.check_workload_companions(FPGA, ["/dev/xclmgmt1"], [], "hint")
    assert (
        r.status == "fail"
        and r.reason == "the granted device's companion node /dev/dri/renderD129 is absent: hint"
    )
    refused = _open("/dev/dri/renderD129", errno.EPERM)
    assert "is EPERM" in rc.check_workload_companions(FPGA, ["/dev/xclmgmt1"], [refused], "h").reason
    other = _open("/dev/dri/renderD128", errno.ENXIO)
    r = rc.check_workload_companions(FPGA, ["/dev/xclmgmt1"], [other, mine], "hint")
    assert r.status == "fail" and r.reason.startswith("/dev/dri/renderD128 is usable but belongs to another")
    assert rc.check_workload_companions(FPGA, [], [mine], "h").status == "skip"
    assert rc.index_of(FPGA, "/dev/xclmgmt12") == 12 and rc.index_of(FPGA, "/dev/other3") is None
    assert rc.companion_listing(FPGA) == ("/dev/dri/renderD{index}",)


# -- the example FPGA on the simulated driver ----------------------------------------------------


def simulate(base: Path, recipe: Recipe = FPGA) -> tuple[Path, Path]:
    root, dev = base / "root", base / "host-dev"
    dev.mkdir()
    result = CliRunner().invoke(
        cli,
        ["driver", "simulate", "--recipe-file", str(EXAMPLES / "fpga" / "recipe.yaml"),
         "--config", str(EXAMPLES / "fpga" / "devices.yaml"), "--driver-root", str(root), "--dev-root", str(dev)],
    )  # fmt: skip
    if result.exit_code != 0 and "Operation not permitted" in result.output:
        pytest.skip("needs CAP_MKNOD")
    assert result.exit_code == 0, result.output
    return root, dev


def driver_checks(root: Path, dev: Path) -> dict[str, tuple[str, str]]:
    report = recipevalidation.validate_driver(FPGA, root, HostRoot.at("/").with_tree(dev=dev))
    return {r.check: (r.status, r.reason) for r in report.results}


@pytest.mark.root
def test_driver_validation_of_the_simulated_fpga(tmp_path: Path) -> None:
    root, dev = simulate(tmp_path)
    checks = driver_checks(root, dev)
    assert checks == {
        name: ("pass", "")
        for name in ("inventory", "device nodes", "companion nodes", "driver files", "validation commands")
    }
    (dev / "dri" / "renderD129").unlink()
    assert driver_checks(root, dev)["companion nodes"][1].startswith("/dev/dri/renderD129 of device 1")
    (root / "lib" / "libxrt_core.so.2").unlink()
    assert "library libxrt_core.so.* (runtime)" in driver_checks(root, dev)["driver files"][1]
    (root / "bin" / "xbutil").write_text("#!/bin/sh\necho 'xbutil: card 1 does not answer' >&2\nexit 4\n")
    reason = driver_checks(root, dev)["validation commands"][1]
    assert reason.startswith("`xbutil examine` failed (exit status 4: xbutil: card 1 does not answer)")


@pytest.mark.root
def test_cli_prints_the_first_line_and_says_simulated(tmp_path: Path) -> None:
    root, dev = simulate(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "sro", "validate", "driver", "--recipe-file", str(EXAMPLES / "fpga" / "recipe.yaml"),
         "--driver-root", str(root), "--dev-root", str(dev)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "PASS validation commands: 1 ran, exit 0 (SIMULATED, not real hardware): xbutil: SIMULATED"
        in done.stdout
    )
    assert done.stdout.splitlines()[-1].startswith(
        "driver validation passed (5 checks): recipe example-fpga, SIMULATED"
    )


class Container:
    """What a pod granted card `granted` sees: its two nodes in /dev, the libraries in its linker
    cache, the binaries on PATH, the device plugin's env var."""

    def __init__(self, base: Path, granted: int, extra: tuple[str, ...] = ()) -> None:
        self.root, host_dev = simulate(base)
        self.uuids = [d.uuid for d in read_inventory(self.root).devices]
        self.dev = base / "dev"
        (self.dev / "dri").mkdir(parents=True)
        for name in (f"xclmgmt{granted}", f"dri/renderD{128 + granted}", *extra):
            st = (host_dev / name).stat()
            os.mknod(self.dev / name, st.st_mode, st.st_rdev)
        self.etc = base / "etc"
        self.etc.mkdir()
        conf = self.etc / "ld.so.conf"
        conf.write_text(f"{self.root / 'lib'}\n")
        subprocess.run([LDCONFIG, "-C", str(self.etc / "ld.so.cache"), "-f", str(conf)], check=True)
        self.host = HostRoot.at("/").with_tree(dev=self.dev, etc=self.etc)

    def load(self, soname: str) -> None:
        ctypes.CDLL({e.soname: e.path for e in ldcache.read(self.host)}[soname])

    def checks(self, visible: str) -> dict[str, tuple[str, str]]:
        env = {"PATH": f"{self.root / 'bin'}:/usr/bin:/bin", FPGA.visible_devices_env: visible}
        report = recipevalidation.validate_workload(FPGA, env, self.host, self.load)
        return {r.check: (r.status, r.reason) for r in report.results}


needs_ldconfig = pytest.mark.skipif(not os.path.exists(LDCONFIG), reason="needs ldconfig")


@pytest.mark.root
@needs_ldconfig
def test_workload_validation_sees_exactly_one_card(tmp_path: Path) -> None:
    c = Container(tmp_path, granted=1)
    checks = c.checks(c.uuids[1])
    for name in ("visible devices", "device nodes", "companion nodes", "libraries", "validation commands"):
        assert checks[name][0] == "pass", (name, checks[name])
    assert checks["device cgroup"][0] in ("pass", "fail")  # this process's own cgroup decides
    assert set(checks) == {
        "visible devices", "device nodes", "companion nodes", "device cgroup", "libraries", "validation commands",
    }  # fmt: skip


@pytest.mark.root
@needs_ldconfig
def test_workload_validation_refuses_another_cards_companion(tmp_path: Path) -> None:
    c = Container(tmp_path, granted=1, extra=("dri/renderD128",))
    checks = c.checks(c.uuids[1])
    assert checks["companion nodes"][0] == "fail"
    assert checks["companion nodes"][1].startswith(
        "/dev/dri/renderD128 is usable but belongs to another device"
    )
    assert checks["visible devices"][0] == "pass" and checks["device nodes"][0] == "pass"


def test_workload_validation_asks_for_a_pool_the_node_has_devices_of() -> None:
    from sro.operator.states import validation_resource

    announced = ("example.com/vf-pool-a", "example.com/vf-pool-b", "example.com/smartnic-vf")
    only_b = {"example.com/vf-pool-a": "0", "example.com/vf-pool-b": "4", "cpu": "8"}
    assert validation_resource(announced, only_b) == "example.com/vf-pool-b"
    assert validation_resource(announced, {"example.com/smartnic-vf": "2"}) == "example.com/smartnic-vf"
    assert validation_resource(announced, {}) == "example.com/vf-pool-a"  # nothing announced yet
