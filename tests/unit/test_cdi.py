"""CDI spec generation against golden files (SRO_UPDATE_GOLDEN=1 rewrites them; review the diff)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from sro.api.recipes import NVIDIA_GPU, SIMULATED_GPU, Recipe
from sro.node.runtime import cdi
from sro.node.runtime.inventory import DeviceNode, DriverInventory, FileMount
from sro.node.runtime.specedits import HookCommand
from tests.golden_files import update_goldens

GOLDEN = Path(__file__).parent.parent / "golden" / "cdi"
HOOK = HookCommand("/opt/sro/venv/bin/python", ("--recipe", "x"), root="/opt/sro/site-packages")

SIM_INV = DriverInventory(
    recipe="simulated-gpu",
    devices=tuple(
        DeviceNode(f"/dev/sro-simgpu{i}", f"/dev/sro-simgpu{i}", 120, i, 0o666, str(i)) for i in range(2)
    ),
    control_nodes=(DeviceNode("/dev/sro-simgpuctl", "/dev/sro-simgpuctl", 120, 255, 0o666),),
    libraries={
        "compute": (
            FileMount("/var/lib/sro/driver/simulated-gpu/lib/libsimgpu.so.1", "/lib/libsimgpu.so.1"),
        ),
        "utility": (
            FileMount("/var/lib/sro/driver/simulated-gpu/lib/libsimgpu-ml.so.1", "/lib/libsimgpu-ml.so.1"),
        ),
    },
    binaries={"utility": (FileMount("/var/lib/sro/driver/simulated-gpu/bin/simgpu-smi", "/bin/simgpu-smi"),)},
)
LIBDIR = "/usr/lib/x86_64-linux-gnu"
NV_INV = DriverInventory(
    recipe="nvidia-gpu",
    devices=tuple(DeviceNode(f"/dev/nvidia{i}", f"/dev/nvidia{i}", 195, i, 0o666, str(i)) for i in range(2)),
    control_nodes=(
        DeviceNode("/dev/nvidiactl", "/dev/nvidiactl", 195, 255, 0o666),
        DeviceNode("/dev/nvidia-uvm", "/dev/nvidia-uvm", 510, 0, 0o666),
    ),
    libraries={
        "compute": (FileMount(f"{LIBDIR}/libcuda.so.550.54.14", f"{LIBDIR}/libcuda.so.550.54.14"),),
        "utility": (FileMount(f"{LIBDIR}/libnvidia-ml.so.550.54.14", f"{LIBDIR}/libnvidia-ml.so.550.54.14"),),
    },
    binaries={"utility": (FileMount("/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"),)},
    directories={"graphics": (FileMount("/etc/vulkan/icd.d", "/etc/vulkan/icd.d", "dir"),)},
    firmware=(
        FileMount(
            "/lib/firmware/nvidia/550.54.14/gsp_ga10x.bin", "/lib/firmware/nvidia/550.54.14/gsp_ga10x.bin"
        ),
    ),
)


def _check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if update_goldens():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with SRO_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text()


@pytest.mark.parametrize(
    ("recipe", "inv", "fmt"),
    [(SIMULATED_GPU, SIM_INV, "yaml"), (SIMULATED_GPU, SIM_INV, "json"), (NVIDIA_GPU, NV_INV, "yaml")],
)
def test_golden(recipe: Recipe, inv: DriverInventory, fmt: str) -> None:
    text = cdi.dumps(cdi.generate(recipe, inv, HOOK), fmt)
    _check_golden(cdi.spec_file_name(recipe, fmt), text)


def test_structure() -> None:
    spec = cdi.generate(SIMULATED_GPU, SIM_INV, HOOK)
    assert spec["cdiVersion"] == "0.6.0" and spec["kind"] == "sro.dev/simulated-gpu"
    assert [d["name"] for d in spec["devices"]] == ["0", "1", "all"]
    assert len(spec["devices"][-1]["containerEdits"]["deviceNodes"]) == 2
    edits = spec["containerEdits"]
    assert edits["env"] == ["SRO_VISIBLE_DEVICES=void"]
    (h,) = edits["hooks"]
    assert h["hookName"] == "createContainer" and h["env"] and h["args"][0] == h["path"]
    assert yaml.safe_load(cdi.dumps(spec, "yaml")) == json.loads(cdi.dumps(spec, "json")) == spec


def test_errors_and_names() -> None:
    empty = DriverInventory(recipe="simulated-gpu", devices=(), control_nodes=())
    with pytest.raises(cdi.CDIError, match="no simulated-gpu devices found"):
        cdi.generate(SIMULATED_GPU, empty, None)
    with pytest.raises(cdi.CDIError, match="unknown format"):
        cdi.dumps({}, "toml")
    assert cdi.spec_file_name(NVIDIA_GPU, "yaml") == "nvidia.com-gpu.yaml"
    assert "hooks" not in cdi.generate(SIMULATED_GPU, SIM_INV, None)["containerEdits"]
    old = cdi.generate(SIMULATED_GPU, SIM_INV, None, "0.5.0")
    assert old["cdiVersion"] == "0.5.0" and "annotations" not in old
    with pytest.raises(cdi.CDIError, match="not supported"):
        cdi.generate(SIMULATED_GPU, SIM_INV, None, "0.9.0")


@pytest.mark.root
def test_cli_generate_from_a_real_driver_tree(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sro.cli import cli

    dev = tmp_path / "dev"
    dev.mkdir()
    os.mknod(dev / "sro-simgpu0", 0o666 | 0o020000, os.makedev(120, 0))
    (tmp_path / "drv" / "lib").mkdir(parents=True)
    (tmp_path / "drv" / "lib" / "libsimgpu.so.1").write_text("elf")
    out = tmp_path / "out"
    out.mkdir()
    res = CliRunner().invoke(
        cli,
        [
            "cdi",
            "generate",
            "--driver-root",
            str(tmp_path / "drv"),
            "--dev-root",
            str(dev),
            "--output",
            str(out),
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    spec = json.loads((out / "sro.dev-simulated-gpu.json").read_text())
    assert spec["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"] == str(dev / "sro-simgpu0")
    res = CliRunner().invoke(cli, ["cdi", "generate", "--dev-root", str(tmp_path / "none")])
    assert res.exit_code == 1 and "no simulated-gpu devices found" in res.output
