"""`sro simulate load`: set, show and clear the load a simulated device's readings follow."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sro.devices import driverstate
from sro.devices.commands import simulate
from tests.unit.exporter_support import driver_root


def test_set_show_and_clear(tmp_path: Path) -> None:
    root = driver_root(tmp_path, "4gpu-mig.yaml")
    inv = driverstate.read_inventory(root)
    args = ["--driver-root", str(root)]
    runner = CliRunner()
    r = runner.invoke(simulate, ["load", "--device", "2", "--util", "80", "--memory", "30000", *args])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == {
        "load": {"util": 80.0, "memoryMiB": 30000, "devices": [inv.devices[2].uuid]}
    }
    mig = inv.devices[0].mig_devices[3].uuid
    r = runner.invoke(simulate, ["load", "--device", mig, "--util", "50", *args])
    assert r.exit_code == 0, r.output
    loads = driverstate.read_loads(root)
    assert (
        loads[inv.devices[2].uuid].memory_mib == 30000
        and loads[mig].util == 50
        and loads[mig].memory_mib is None
    )
    st = json.loads(runner.invoke(simulate, ["status", *args]).output)
    assert [d["load"] for d in st["devices"]][2] == {"util": 80.0, "memoryMiB": 30000}
    r = runner.invoke(simulate, ["load", "--device", "2", "--clear", *args])
    assert r.exit_code == 0 and json.loads(r.output) == {"cleared": [inv.devices[2].uuid]}
    r = runner.invoke(simulate, ["load", "--all", "--clear", *args])
    assert json.loads(r.output) == {"cleared": [mig]} and driverstate.read_loads(root) == {}


def test_refusals_name_the_problem(tmp_path: Path) -> None:
    root = driver_root(tmp_path, "4gpu-mig.yaml")
    args = ["--driver-root", str(root)]
    runner = CliRunner()
    cases = [
        (["load", "--util", "10"], "--device"),
        (["load", "--device", "0"], "--util and/or --memory"),
        (["load", "--device", "0", "--util", "101"], "0<=x<=100"),
        (["load", "--device", "0", "--clear", "--util", "3"], "--clear takes no"),
        (["load", "--device", "9", "--util", "3"], "no such simulated device"),
        (["load", "--device", "0", "--memory", "50000"], "more than the framebuffer"),
    ]
    for argv, message in cases:
        r = runner.invoke(simulate, [*argv, *args])
        assert r.exit_code != 0 and message in r.output, (argv, r.output)
    assert driverstate.read_loads(root) == {}
    r = runner.invoke(
        simulate, ["load", "--device", "0", "--util", "3", "--driver-root", str(tmp_path / "none")]
    )
    assert r.exit_code == 1 and "sro driver simulate" in r.output
