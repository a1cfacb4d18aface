"""`sro driver reset` / `sro driver reboot` (`sro.node.remediate`) over a simulated driver's state
files (written here, no device nodes needed), a fake nvidia-smi runner and a temp host root.

A reset must clear exactly the named devices' faults through the code `sro simulate fault --clear`
uses (so the device plugin and the simulated NVML see it); a simulated reboot clears every fault and
renews the boot id the health report carries; a real reset runs `nvidia-smi --gpu-reset -i <id>`
from the driver root; a real reboot only writes kured's sentinel under the host root."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.cli import cli
from sro.devices import driverstate, simconfig
from sro.devices.healthreport import SIM_BOOT_ID, boot_id
from sro.devices.model import DeviceUUID
from sro.node import remediate
from sro.node.validation.tools import ToolRun

DOC = {"driverVersion": "1.2-sim", "count": 3, "devices": [{}, {}, {"mig": [{"profile": "1g.10gb"}]}]}


@pytest.fixture
def sim(tmp_path: Path) -> Path:
    """A simulated driver's root: its device list (3 GPUs, the last with a MIG device)."""
    root = tmp_path / "root"
    inv = simconfig.parse(DOC, device_node=SIMULATED_GPU.device_node)
    driverstate.write_atomic(
        root / "devices.json", json.dumps(driverstate.inventory_to_doc(inv, 240, 255)) + "\n"
    )
    return root


def uuids(root: Path) -> list[str]:
    return [str(d.uuid) for d in driverstate.read_inventory(root).devices]


def mig_of(root: Path, index: int) -> str:
    return str(driverstate.read_inventory(root).devices[index].mig_devices[0].uuid)


LEDGER: list[Path] = []  # this test's ledger: never the node's /var/lib/sro/remediation


@pytest.fixture(autouse=True)
def ledger(tmp_path: Path) -> Path:
    LEDGER[:] = [tmp_path / "ledger"]
    return LEDGER[0]


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["driver", *args, "--ledger", str(LEDGER[0])])
    return result.exit_code, result.output


def test_reset_clears_only_the_named_devices(sim: Path) -> None:
    u = uuids(sim)
    for d in u:
        driverstate.set_fault(sim, DeviceUUID(d), 79)
    code, out = run(
        "reset", "--recipe", "simulated-gpu", "--driver-root", str(sim), "--device", u[0], "--device", "1",
        "--token", "2026-11-26T01:30:00Z",
    )  # fmt: skip
    assert code == 0, out
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0] == (
        f"reset {u[0]}: ok: SIMULATED reset #1 of {u[0]}: fault cleared (Xid 79) (token 2026-11-26T01:30:00Z)"
    )
    assert lines[1].startswith(f"reset 1: ok: SIMULATED reset #1 of {u[1]}: fault cleared (Xid 79)")
    assert set(driverstate.read_faults(sim)) == {u[2]}  # the third keeps its fault


def test_reset_of_a_healthy_device_is_ok_and_says_so(sim: Path) -> None:
    u = uuids(sim)
    code, out = run("reset", "--recipe", "simulated-gpu", "--driver-root", str(sim), "--device", u[0])
    assert code == 0 and out.strip() == f"reset {u[0]}: ok: SIMULATED reset #1 of {u[0]}: no active fault"


def test_reset_of_a_gpu_takes_its_mig_devices_and_a_mig_device_alone(sim: Path) -> None:
    u, mig = uuids(sim), mig_of(sim, 2)
    driverstate.set_fault(sim, DeviceUUID(mig), 48)
    driverstate.set_fault(sim, DeviceUUID(u[1]), 79)
    assert remediate.resolve(driverstate.read_inventory(sim), [u[2], mig]) == {u[2]: [u[2], mig], mig: [mig]}
    outcomes = remediate.reset_simulated(sim, [u[2]])
    assert outcomes[0].ok and "Xid 48" in outcomes[0].detail
    assert set(driverstate.read_faults(sim)) == {u[1]}


def test_reset_refuses_unknown_devices_before_clearing_anything(sim: Path) -> None:
    u = uuids(sim)
    driverstate.set_fault(sim, DeviceUUID(u[0]), 79)
    code, out = run(
        "reset",
        "--recipe",
        "simulated-gpu",
        "--driver-root",
        str(sim),
        "--device",
        u[0],
        "--device",
        "GPU-nope",
    )
    assert code == 2 and "GPU-nope" in out and len(out.strip().splitlines()) == 1
    assert set(driverstate.read_faults(sim)) == {u[0]}


@pytest.mark.parametrize("bad", ["", "-h", "GPU 1"])
def test_reset_refuses_what_is_not_a_device_id(sim: Path, bad: str) -> None:
    code, out = run("reset", "--recipe", "simulated-gpu", "--driver-root", str(sim), "--device", bad)
    assert code == 2 and "not a device id" in out


def test_reset_needs_a_recipe_and_a_device(sim: Path) -> None:
    code, out = run("reset", "--driver-root", str(sim), "--device", "0")
    assert code == 2 and "--recipe" in out
    code, out = run("reset", "--recipe", "simulated-gpu", "--driver-root", str(sim))
    assert code == 2 and "--device" in out


def test_reset_of_a_devnodes_recipe_is_refused(tmp_path: Path) -> None:
    recipe = tmp_path / "card.yaml"
    recipe.write_text(
        "name: example-card\nbackend: devnodes\nresource: example.com/card\npciVendor: '10ee'\n"
        "visibleDevicesEnv: CARD_VISIBLE_DEVICES\ndeviceNode: /dev/card{index}\n"
    )
    code, out = run("reset", "--recipe-file", str(recipe), "--device", "0", "--token", "t")
    assert code == 2
    assert out.strip() == "Error: reset not supported for recipe example-card (backend devnodes)"


def test_reset_with_no_simulated_driver_says_where(tmp_path: Path) -> None:
    code, out = run("reset", "--recipe", "simulated-gpu", "--driver-root", str(tmp_path), "--device", "0")
    assert code == 1 and str(tmp_path) in out and len(out.strip().splitlines()) == 1


def test_simulated_reboot_clears_every_fault_and_renews_the_boot(sim: Path) -> None:
    u = uuids(sim)
    for d in (u[0], mig_of(sim, 2)):
        driverstate.set_fault(sim, DeviceUUID(d), 79)
    before = boot_id(sim, proc_boot_id=sim / "none")
    code, out = run("reboot", "--recipe", "simulated-gpu", "--driver-root", str(sim), "--token", "T1")
    assert code == 0, out
    assert driverstate.read_faults(sim) == {}
    first = (sim / SIM_BOOT_ID).read_text().strip()
    assert first and first != before and boot_id(sim) == first
    assert (
        out.strip()
        == f"reboot simulated-gpu: SIMULATED reboot: 2 fault(s) cleared, boot id {first} (token T1)"
    )
    run("reboot", "--recipe", "simulated-gpu", "--driver-root", str(sim))
    assert boot_id(sim) not in ("", first)  # every reboot is a new boot


def test_simulated_nvidia_driver_is_found_by_its_device_list(sim: Path, tmp_path: Path) -> None:
    """nvidia-gpu on sro's simulated driver (`spec.driver.mode: simulated`): its root holds
    devices.json, so nvidia-gpu's reset clears the fault there and runs no nvidia-smi."""
    assert remediate.driver_kind(NVIDIA_GPU, sim) == "simulated"
    assert remediate.driver_kind(NVIDIA_GPU, tmp_path / "real") == "nvml"
    assert remediate.driver_kind(SIMULATED_GPU, tmp_path / "real") == "simulated"
    u = uuids(sim)
    driverstate.set_fault(sim, DeviceUUID(u[0]), 79)
    code, out = run("reset", "--recipe", "nvidia-gpu", "--driver-root", str(sim), "--device", u[0])
    assert code == 0 and "SIMULATED" in out and driverstate.read_faults(sim) == {}


def _real_root(tmp_path: Path) -> Path:
    root = tmp_path / "run" / "nvidia" / "driver"
    smi = root / "usr" / "bin" / "nvidia-smi"
    smi.parent.mkdir(parents=True)
    smi.write_text("#!/bin/sh\nexit 0\n")
    smi.chmod(0o755)
    return root


def test_real_reset_runs_nvidia_smi_chrooted_into_the_driver_root(tmp_path: Path) -> None:
    root = _real_root(tmp_path)
    calls: list[list[str]] = []

    def runner(argv: list[str]) -> ToolRun:
        calls.append(argv)
        if argv[-1] == "GPU-b":
            return ToolRun(tuple(argv), 255, stderr="Unable to reset this GPU because it's being used\n")
        return ToolRun(tuple(argv), 0)

    outcomes = remediate.reset_nvml(root, ["GPU-a", "GPU-b"], runner)
    assert calls == [
        ["chroot", str(root), "/usr/bin/nvidia-smi", "--gpu-reset", "-i", "GPU-a"],
        ["chroot", str(root), "/usr/bin/nvidia-smi", "--gpu-reset", "-i", "GPU-b"],
    ]
    assert outcomes[0] == remediate.Outcome("GPU-a", True, "reset by nvidia-smi --gpu-reset")
    assert (
        not outcomes[1].ok and "being used" in outcomes[1].detail and "exit status 255" in outcomes[1].detail
    )


def test_real_reset_in_place_on_the_root_and_exit_1_when_one_fails(tmp_path: Path) -> None:
    smi = Path("/usr/bin/nvidia-smi")
    assert remediate.reset_argv(Path("/"), smi, "GPU-a") == [str(smi), "--gpu-reset", "-i", "GPU-a"]
    root = _real_root(tmp_path)
    (root / "usr/bin/nvidia-smi").write_text("#!/bin/sh\necho 'GPU reset failed' >&2\nexit 3\n")
    # the real runner, through the CLI: chroot into a root without a shell fails, so a run that
    # cannot start is a failure too (exit 1, one line per device)
    code, out = run(
        "reset", "--recipe", "nvidia-gpu", "--driver-root", str(root), "--device", "GPU-a", "--token", "T"
    )
    assert code == 1 and out.startswith("reset GPU-a: FAILED: chroot ") and out.strip().endswith("(token T)")


def test_real_reset_without_nvidia_smi(tmp_path: Path) -> None:
    code, out = run("reset", "--recipe", "nvidia-gpu", "--driver-root", str(tmp_path), "--device", "GPU-a")
    assert code == 1 and "nvidia-smi not found" in out


def test_real_reboot_writes_the_sentinel_under_the_host_root(tmp_path: Path) -> None:
    host = tmp_path / "host"
    (host / "var" / "run").mkdir(parents=True)
    code, out = run("reboot", "--recipe", "nvidia-gpu", "--driver-root", str(tmp_path), "--host-root", str(host),
                    "--token", "T9")  # fmt: skip
    assert code == 0, out
    sentinel = host / "var" / "run" / "reboot-required"
    assert "sro remediation T9" in sentinel.read_text()
    assert out.strip() == (
        f"reboot nvidia-gpu: asked for: wrote {sentinel} (kured, or the reboot daemon watching it, "
        "reboots the node) (token T9)"
    )


def test_real_reboot_without_the_hosts_var_run(tmp_path: Path) -> None:
    code, out = run(
        "reboot", "--recipe", "nvidia-gpu", "--driver-root", str(tmp_path), "--host-root", str(tmp_path)
    )
    assert code == 1 and "var/run" in out and len(out.strip().splitlines()) == 1
    assert not (tmp_path / "var").exists()


def test_reboot_needs_a_recipe(tmp_path: Path) -> None:
    code, out = run("reboot", "--driver-root", str(tmp_path), "--host-root", str(tmp_path))
    assert code == 2 and "--recipe" in out


def test_a_token_is_acted_on_once(sim: Path, ledger: Path) -> None:
    """The operator asks again with the same token after a restart: the node does not act twice."""
    u = uuids(sim)
    driverstate.set_fault(sim, DeviceUUID(u[0]), 79)
    args = ("--recipe", "simulated-gpu", "--driver-root", str(sim), "--token", "T1")
    assert run("reset", *args, "--device", u[0])[0] == 0
    driverstate.set_fault(sim, DeviceUUID(u[0]), 48)  # a new fault after the reset
    code, out = run("reset", *args, "--device", u[0])
    assert code == 0 and out.strip() == f"reset {u[0]}: already done for this token (token T1)"
    assert set(driverstate.read_faults(sim)) == {u[0]}  # not cleared by the repeated request
    assert run("reset", *args[:-1], "T2", "--device", u[0])[0] == 0  # a new step acts again
    assert driverstate.read_faults(sim) == {}

    assert run("reboot", *args)[0] == 0
    first = boot_id(sim)
    code, out = run("reboot", *args)
    assert code == 0 and "already done for this token" in out and boot_id(sim) == first
    assert sorted(p.name.split("-")[0] for p in ledger.iterdir()) == ["reboot", "reset", "reset"]


def test_a_failed_reset_is_not_recorded(tmp_path: Path, ledger: Path) -> None:
    root = _real_root(tmp_path)
    code, _ = run(
        "reset", "--recipe", "nvidia-gpu", "--driver-root", str(root), "--device", "GPU-a", "--token", "T"
    )
    assert code == 1 and not ledger.exists()  # the same token may try again


def test_no_token_no_ledger(sim: Path, ledger: Path) -> None:
    assert run("reset", "--recipe", "simulated-gpu", "--driver-root", str(sim), "--device", "0")[0] == 0
    assert run("reboot", "--recipe", "simulated-gpu", "--driver-root", str(sim))[0] == 0
    assert not ledger.exists()


def test_ledger_drops_old_entries_and_reports_a_bad_one(tmp_path: Path) -> None:
    ledger = tmp_path / "l"
    remediate.remember(ledger, "old", "reset", ["a"], "reset a: ok", 1000.0)
    (old,) = ledger.iterdir()
    os.utime(old, (1000.0, 1000.0))
    assert remediate.done_before(ledger, "old", "reset") == ("a",)
    assert remediate.done_before(ledger, "old", "reboot") is None
    remediate.remember(ledger, "new", "reboot", [], "rebooted", 1000.0 + remediate.LEDGER_KEEP_S + 1)
    assert (
        remediate.done_before(ledger, "old", "reset") is None
        and remediate.done_before(ledger, "new", "reboot") == ()
    )
    next(ledger.iterdir()).write_text("{not json")
    with pytest.raises(click.ClickException, match="cannot read"):
        remediate.done_before(ledger, "new", "reboot")
