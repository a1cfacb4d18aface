"""A simulated device reset (`sro driver reset`) re-creates the device's nodes and counts, and the
exporter shows the count (`sro_device_resets_total`).

Why each matters: a real reset gives the device a new node (a process holding the old inode keeps
the old one), so the simulated one must too, with the numbers and mode the driver gave it — nothing
else under the dev root touched; the count lives beside the fault state so that it outlives the
device plugin, the exporter and a simulated reboot (a counter that drops to 0 reads as no resets to
`increase()`); and on real hardware, where no one counts, the series must be absent, not 0."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU
from sro.cli import cli
from sro.devices import driverstate, simconfig, simulated_driver, simulated_nvidia
from sro.devices.model import DeviceUUID
from sro.node import remediate
from sro.node.exporter import exposition
from sro.node.exporter.commands import resets_reader
from sro.node.exporter.exposition import Collected
from tests.unit.exporter_support import HOST, collector, driver_root

DOC = {"driverVersion": "1.2-sim", "count": 3, "devices": [{}, {}, {"mig": [{"profile": "1g.10gb"}]}]}


def _state_root(tmp_path: Path) -> Path:
    """A simulated driver's device list only (no nodes): what the counter and exporter need."""
    root = tmp_path / "root"
    inv = simconfig.parse(DOC, device_node=SIMULATED_GPU.device_node)
    driverstate.write_atomic(root / "devices.json", json.dumps(driverstate.inventory_to_doc(inv, 240, 255)))
    return root


def _uuids(root: Path) -> list[DeviceUUID]:
    return [d.uuid for d in driverstate.read_inventory(root).devices]


def _reset(root: Path, ledger: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli,
        [
            "driver",
            "reset",
            "--recipe",
            "simulated-gpu",
            "--driver-root",
            str(root),
            "--ledger",
            str(ledger),
            *args,
        ],
    )
    return result.exit_code, result.output


# --- the counter ------------------------------------------------------------------------------


def test_counts_add_one_per_reset_per_device_and_read_back(tmp_path: Path) -> None:
    root = _state_root(tmp_path)
    a, b, _ = _uuids(root)
    assert driverstate.read_resets(root) == {}  # no file yet: no resets
    assert driverstate.count_resets(root, [a]) == {a: 1}
    assert driverstate.count_resets(root, [a, b, a]) == {a: 2, b: 1}  # a device named twice counts once
    assert driverstate.read_resets(root) == {a: 2, b: 1}
    assert not list(root.glob(".*.tmp"))  # written atomically: no temp file left


def test_counts_survive_clearing_faults_and_a_simulated_reboot(tmp_path: Path) -> None:
    root = _state_root(tmp_path)
    a = _uuids(root)[0]
    driverstate.count_resets(root, [a])
    driverstate.set_fault(root, a, 79)
    driverstate.clear_faults(root, None)
    remediate.reboot_simulated(root)
    assert driverstate.read_resets(root) == {a: 1}


@pytest.mark.parametrize(
    "text", ['{"resets": {"GPU-x": -1}}', '{"resets": {"GPU-x": true}}', '{"resets": []}', "{"]
)
def test_a_damaged_count_file_is_an_error_naming_it(tmp_path: Path, text: str) -> None:
    root = _state_root(tmp_path)
    (root / driverstate.SIMULATED_RESETS).write_text(text)
    with pytest.raises(driverstate.DriverStateError, match=r"resets\.json"):
        driverstate.read_resets(root)


def test_each_cli_reset_counts_once_per_token_and_says_which(tmp_path: Path) -> None:
    root = _state_root(tmp_path)
    u = _uuids(root)
    ledger = tmp_path / "ledger"
    code, out = _reset(root, ledger, "--device", "2", "--token", "t1")
    assert code == 0 and f"SIMULATED reset #1 of {u[2]}" in out, out
    mig = driverstate.read_inventory(root).devices[2].mig_devices[0].uuid
    assert driverstate.read_resets(root) == {u[2]: 1, mig: 1}  # a GPU's reset resets its MIG device
    assert _reset(root, ledger, "--device", "2", "--token", "t1")[0] == 0  # the same step again
    assert driverstate.read_resets(root)[u[2]] == 1
    code, out = _reset(root, ledger, "--device", "2", "--token", "t2")
    assert code == 0 and f"SIMULATED reset #2 of {u[2]}" in out, out
    assert driverstate.read_resets(root) == {u[2]: 2, mig: 2}


# --- the node ---------------------------------------------------------------------------------


@pytest.mark.root
def test_reset_makes_the_devices_node_again_and_only_its(tmp_path: Path) -> None:
    inv = simconfig.parse({"driverVersion": "1.2-sim", "count": 3}, device_node=SIMULATED_GPU.device_node)
    dev, root = tmp_path / "dev", tmp_path / "driver"
    done = simulated_driver.install(inv, root, dev, Path("/proc/devices").read_text())
    nodes = {p.name: p for p in done.device_nodes}
    target = dev / os.path.basename(inv.devices[1].device_node)
    before = {name: p.lstat() for name, p in nodes.items()}
    os.chmod(target, 0o600)  # a node someone changed: the reset gives it back as the driver made it
    held = tmp_path / "held"
    os.link(target, held)  # as a process holding the old node would, it keeps its inode in use
    code, out = _reset(root, tmp_path / "ledger", "--device", "1", "--dev-root", str(dev))
    assert code == 0, out
    assert f"(node made again: {inv.devices[1].device_node})" in out
    after = target.lstat()
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before[target.name].st_rdev
    assert after.st_ino != held.lstat().st_ino  # a new node, not the old one kept
    assert held.lstat().st_ino == before[target.name].st_ino
    assert stat.S_IMODE(after.st_mode) == 0o666
    for name, p in nodes.items():
        if name != target.name:
            assert p.lstat().st_ino == before[name].st_ino, name  # the other devices' and control nodes
    assert driverstate.read_resets(root) == {inv.devices[1].uuid: 1}


@pytest.mark.root
def test_reset_of_the_simulated_nvidia_driver_makes_nvidia_n_again(tmp_path: Path) -> None:
    proc_devices = Path("/proc/devices").read_text()
    if simulated_nvidia.refusal("", proc_devices) is not None:
        pytest.skip("this host has a real NVIDIA driver")
    (tmp_path / "lib").write_bytes(b"\x7fELF placeholder")  # the nodes are what counts here
    (tmp_path / "smi").write_text("#!/bin/sh\n")
    inv = simulated_nvidia.parse({"personality": "nvidia", "count": 2})
    dev, root = tmp_path / "dev", tmp_path / "driver"
    native = simulated_nvidia.NativeBuild(tmp_path / "lib", tmp_path / "smi")
    simulated_nvidia.install(inv, root, dev, proc_devices, "snd 1 0 - Live 0x0\n", native)
    ctl, gpu1 = dev / "nvidiactl", dev / "nvidia1"
    ctl_ino = ctl.lstat().st_ino
    os.link(gpu1, tmp_path / "held")
    result = CliRunner().invoke(
        cli,
        ["driver", "reset", "--recipe", "nvidia-gpu", "--driver-root", str(root), "--dev-root", str(dev),
         "--device", "1", "--ledger", str(tmp_path / "ledger")],
    )  # fmt: skip
    assert result.exit_code == 0 and "(node made again: /dev/nvidia1)" in result.output, result.output
    st = gpu1.lstat()
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(195, 1) and stat.S_IMODE(st.st_mode) == 0o666
    assert st.st_ino != (tmp_path / "held").lstat().st_ino
    assert ctl.lstat().st_ino == ctl_ino  # the control node is the driver's, not the device's
    assert driverstate.read_resets(root) == {inv.devices[1].uuid: 1}


@pytest.mark.root
def test_a_device_class_reset_takes_its_companion_node_and_the_exporter_counts_it(tmp_path: Path) -> None:
    """The example FPGA (a device class: /dev/xclmgmtN with companion /dev/dri/renderD(128+N)), end to
    end through the CLI: `sro driver simulate`, `sro driver reset --dev-root`, `sro exporter --once`."""
    examples = Path(__file__).resolve().parents[2] / "examples" / "fpga"
    recipe = str(examples / "recipe.yaml")
    root, dev = tmp_path / "root", tmp_path / "dev"
    made = CliRunner().invoke(
        cli,
        ["driver", "simulate", "--recipe-file", recipe, "--config", str(examples / "devices.yaml"),
         "--driver-root", str(root), "--dev-root", str(dev)],
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    before = {p: p.lstat() for p in dev.rglob("*") if p.is_char_device()}
    card = driverstate.read_inventory(root).devices[1]
    mine = {dev / "xclmgmt1", dev / "dri" / "renderD129"}
    assert {card.device_node, *card.companion_nodes} == {"/dev/xclmgmt1", "/dev/dri/renderD129"}
    for p in mine:
        os.link(p, tmp_path / p.name)  # keep the old inodes in use
    result = CliRunner().invoke(
        cli,
        ["driver", "reset", "--recipe-file", recipe, "--driver-root", str(root), "--dev-root", str(dev),
         "--device", "1", "--ledger", str(tmp_path / "ledger")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for p, st in before.items():
        now = p.lstat()
        assert now.st_rdev == st.st_rdev and stat.S_IMODE(now.st_mode) == stat.S_IMODE(st.st_mode), p
        assert (now.st_ino != (tmp_path / p.name).lstat().st_ino) if p in mine else now.st_ino == st.st_ino, p

    args = ["exporter", "--once", "--recipe-file", recipe, "--driver-root", str(root)]
    text = CliRunner().invoke(cli, [*args, "--pod-resources-socket", str(tmp_path / "none.sock")]).stdout
    counts = {
        line.split('UUID="', 1)[1].split('"', 1)[0]: line.rsplit(" ", 1)[1]
        for line in text.splitlines()
        if line.startswith("sro_device_resets_total{")
    }
    assert counts == {
        str(d.uuid): "1" if d.uuid == card.uuid else "0" for d in driverstate.read_inventory(root).devices
    }


def test_without_a_dev_root_no_node_is_touched(tmp_path: Path) -> None:
    root = _state_root(tmp_path)
    code, out = _reset(root, tmp_path / "ledger", "--device", "0")
    assert code == 0 and "made again" not in out, out


def test_nodes_of_a_device_come_from_the_installed_personality(tmp_path: Path) -> None:
    root = _state_root(tmp_path)
    inv = driverstate.read_inventory(root)
    # simgpu: the numbering install used (node_plan), under the recorded major
    got = remediate.node_numbers(root, inv, [inv.devices[1].uuid])
    assert got == [(inv.devices[1].device_node, 240, inv.devices[1].minor)]
    # the NVIDIA personality: the nodes its device list records, a MIG device's cap node included
    doc = json.loads((root / "devices.json").read_text())
    mig = inv.devices[2].mig_devices[0]
    doc["devices"][2]["mig"][0]["deviceNode"] = "/dev/nvidia-caps/nvidia-cap21"
    doc["personality"] = "nvidia"
    doc["nodes"] = [
        {"path": inv.devices[2].device_node, "major": 195, "minor": 2},
        {"path": "/dev/nvidia-caps/nvidia-cap21", "major": 123, "minor": 21},
        {"path": "/dev/nvidiactl", "major": 195, "minor": 255},
    ]
    driverstate.write_atomic(root / "devices.json", json.dumps(doc))
    inv = driverstate.read_inventory(root)
    assert remediate.node_numbers(root, inv, [inv.devices[2].uuid, mig.uuid]) == [
        (inv.devices[2].device_node, 195, 2),
        ("/dev/nvidia-caps/nvidia-cap21", 123, 21),
    ]


# --- the exporter -----------------------------------------------------------------------------


def test_exposition_has_a_count_per_device_with_the_health_labels(tmp_path: Path) -> None:
    inv = driverstate.read_inventory(_state_root(tmp_path))
    a = inv.devices[0].uuid
    text = exposition.render(Collected(HOST, simulated=True, inventory=inv, resets={a: 3}))
    healthy = [line for line in text.splitlines() if line.startswith("sro_device_healthy{")]
    resets = [line for line in text.splitlines() if line.startswith("sro_device_resets_total{")]
    assert "# TYPE sro_device_resets_total counter" in text
    assert len(resets) == len(healthy) == 4  # 3 GPUs and a MIG device
    assert [r.rsplit(" ", 1)[0].replace("sro_device_resets_total", "") for r in resets] == [
        h.rsplit(" ", 1)[0].replace("sro_device_healthy", "") for h in healthy
    ]
    assert resets[0].endswith(" 3") and f'UUID="{a}"' in resets[0]
    assert all(r.endswith(" 0") for r in resets[1:])


def test_no_count_no_series(tmp_path: Path) -> None:
    inv = driverstate.read_inventory(_state_root(tmp_path))
    text = exposition.render(Collected(HOST, inventory=inv))  # real hardware: resets None
    assert "sro_device_resets_total" not in text


def test_reader_finds_a_simulated_driver_and_none_on_real_hardware(tmp_path: Path) -> None:
    root = _state_root(tmp_path)
    a = _uuids(root)[0]
    driverstate.count_resets(root, [a])
    assert resets_reader(SIMULATED_GPU, root)() == {a: 1}
    assert resets_reader(NVIDIA_GPU, root)() == {a: 1}  # the simulated NVIDIA driver behind nvidia-gpu
    assert resets_reader(NVIDIA_GPU, tmp_path / "real-driver")() is None


def test_collector_reads_the_counts_each_collection_and_a_bad_file_downs_the_source(tmp_path: Path) -> None:
    root = driver_root(tmp_path)
    c = collector(root)
    c.read_resets = resets_reader(SIMULATED_GPU, root)
    try:
        a = _uuids(root)[0]
        assert f'sro_device_resets_total{{gpu="0",UUID="{a}"' in c.collect().text.decode()
        driverstate.count_resets(root, [a])
        driverstate.count_resets(root, [a])
        text = c.collect().text.decode()
        assert any(
            line.startswith(f'sro_device_resets_total{{gpu="0",UUID="{a}"') and line.endswith(" 2")
            for line in text.splitlines()
        ), text
        (root / driverstate.SIMULATED_RESETS).write_text("{")
        text = c.collect().text.decode()
        assert "sro_device_resets_total" not in text
        assert 'sro_exporter_source_up{Hostname="node-1",source="devices"} 0' in text
        assert "resets.json" in (c.problem("devices") or "")
    finally:
        c.close()
