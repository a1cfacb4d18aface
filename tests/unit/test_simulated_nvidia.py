"""The simulated driver's NVIDIA personality, its pure parts: the config's NVIDIA defaults, the
refusal where a real NVIDIA driver is loaded, the native build's lookup, and the CLI's flags up to
the point where it would make device nodes (the install itself: tests/root/test_simulated_nvidia_driver.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from sro.api.recipes import NVIDIA_GPU
from sro.devices import simconfig, simulated_nvidia
from sro.devices.simulated_driver import SimulatedDriverError
from sro.node.commands import driver

PROC_DEVICES = "Character devices:\n  1 mem\n  4 tty\n120 x\n\nBlock devices:\n  7 loop\n"
NVIDIA_PROC_DEVICES = "Character devices:\n  1 mem\n195 nvidia-frontend\n\nBlock devices:\n"
NVIDIA_MODULES = "nvidia_uvm 1531904 0 - Live 0x0\nnvidia 56807424 1 nvidia_uvm, Live 0x0\n"


def test_defaults_are_an_nvidia_a100_driver() -> None:
    inv = simulated_nvidia.parse(
        {"count": 2, "devices": [{"mig": [{"profile": "1g.5gb"}, {"profile": "2g.10gb"}]}]}
    )
    assert inv.driver_version == "550.90.07" and inv.simulated
    assert [d.product for d in inv.devices] == ["NVIDIA A100-SXM4-40GB (simulated)"] * 2
    assert [(d.memory_mib, d.compute_capability) for d in inv.devices] == [(40960, "8.0")] * 2
    assert [(d.device_node, d.minor) for d in inv.devices] == [("/dev/nvidia0", 0), ("/dev/nvidia1", 1)]
    assert all(d.uuid.startswith("GPU-") and len(d.uuid) == 40 for d in inv.devices)
    migs = inv.devices[0].mig_devices
    assert all(m.uuid.startswith("MIG-") for m in migs)
    # gi 1 and 2, ci 0 of GPU 0: NVIDIA's mig-minors 3 + gi*9 + 1 + ci
    assert [m.device_node for m in migs] == ["/dev/nvidia-caps/nvidia-cap13", "/dev/nvidia-caps/nvidia-cap22"]
    assert inv.control_nodes == NVIDIA_GPU.control_nodes
    assert set(NVIDIA_GPU.control_nodes) == set(simulated_nvidia.CONTROL_NODES)


def test_products_bring_their_memory_and_explicit_values_win() -> None:
    inv = simulated_nvidia.parse(
        {
            "personality": "nvidia",
            "driverVersion": "535.183.01",
            "defaults": {"product": "NVIDIA H100 80GB HBM3"},
            "count": 3,
            "devices": [{}, {"product": "Tesla T4"}, {"product": "NVIDIA L4", "memoryMiB": 1000}],
        }
    )
    assert inv.driver_version == "535.183.01"
    assert [(d.product, d.memory_mib, d.compute_capability) for d in inv.devices] == [
        ("NVIDIA H100 80GB HBM3 (simulated)", 81920, "9.0"),
        ("Tesla T4 (simulated)", 15360, "7.5"),
        ("NVIDIA L4 (simulated)", 1000, "8.9"),
    ]
    # a product of its own: not suffixed twice, simconfig's default memory
    (own,) = simulated_nvidia.parse({"count": 1, "defaults": {"product": "Acme X (simulated)"}}).devices
    assert (own.product, own.memory_mib) == ("Acme X (simulated)", simconfig.DEFAULTS["memoryMiB"])


def test_config_problems_name_the_field() -> None:
    with pytest.raises(simconfig.SimConfigError, match="personality"):
        simconfig.parse({"personality": "amd"})
    assert (
        simconfig.personality({"personality": "nvidia"}) == "nvidia"
        and simconfig.personality(None) == "simgpu"
    )
    with pytest.raises(
        simconfig.SimConfigError, match=r"devices\[0\]: 20 NVLinks; an NVIDIA GPU has at most 18"
    ):
        simulated_nvidia.parse({"count": 2, "nvlinks": [{"between": [0, 1], "links": 20}]})
    with pytest.raises(simconfig.SimConfigError, match=r"devices\[0\]\.mig\[0\]: MIG gi 15"):
        simulated_nvidia.parse({"count": 1, "devices": [{"mig": [{"profile": "1g.5gb", "gi": 15}]}]})
    with pytest.raises(simconfig.SimConfigError, match="top level"):
        simulated_nvidia.parse(["a list"])


def test_refusal_names_what_it_found() -> None:
    assert simulated_nvidia.refusal("", PROC_DEVICES) is None
    assert simulated_nvidia.refusal("nvidiafb 1 0 - Live\nsnd 2 0 - Live\n", PROC_DEVICES) is None
    assert "nvidia module" in str(simulated_nvidia.refusal(NVIDIA_MODULES, PROC_DEVICES))
    assert "major 195" in str(simulated_nvidia.refusal("", NVIDIA_PROC_DEVICES))
    found = simulated_nvidia.refusal("", "Character devices:\n237 nvidia-uvm\n\nBlock devices:\n")
    assert found is not None and "nvidia-uvm, major 237" in found
    assert simulated_nvidia.refusal("", "Character devices:\n1 mem\n\nBlock devices:\n195 blk\n") is None
    with pytest.raises(SimulatedDriverError) as e:
        simulated_nvidia.check_host(NVIDIA_MODULES, PROC_DEVICES)
    assert "\n" not in str(e.value) and str(e.value).startswith("not installing the simulated NVIDIA driver")


def test_missing_native_build_says_where_and_how(tmp_path: Path) -> None:
    with pytest.raises(SimulatedDriverError) as e:
        simulated_nvidia.find_native(tmp_path)
    msg = str(e.value)
    assert str(tmp_path) in msg and "libnvidia-ml.so.1 or nvidia-smi" in msg and "\n" not in msg
    assert (
        "sro local image" in msg
        and f"python -m sro.local.native {tmp_path}" in msg
        and "SRO_SIMNVML_DIR" in msg
    )
    (tmp_path / "libnvidia-ml.so.1").write_text("x")
    (tmp_path / "nvidia-smi").write_text("x")
    assert simulated_nvidia.find_native(tmp_path).library == tmp_path / "libnvidia-ml.so.1"


def test_version_file_says_simulated() -> None:
    text = simulated_nvidia.version_text("550.90.07")
    assert (
        text.startswith("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  ") and "SIMULATED" in text
    )


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "proc-devices").write_text(PROC_DEVICES)
    (tmp_path / "nvidia-devices").write_text(NVIDIA_PROC_DEVICES)
    (tmp_path / "modules").write_text(NVIDIA_MODULES)
    (tmp_path / "devices.yaml").write_text(yaml.safe_dump({"count": 2}))
    (tmp_path / "nvidia.yaml").write_text(yaml.safe_dump({"count": 2, "personality": "nvidia"}))
    return tmp_path


def _simulate(files: Path, *args: str) -> tuple[int, str]:
    base = ["simulate", "--dev-root", str(files / "dev"), "--driver-root", str(files / "root")]
    r = CliRunner().invoke(driver, [*base, *args])
    return r.exit_code, r.output


def test_cli_refuses_where_a_real_driver_is(files: Path) -> None:
    for extra in (
        ["--proc-modules", str(files / "modules"), "--proc-devices", str(files / "proc-devices")],
        ["--proc-modules", str(files / "nothing"), "--proc-devices", str(files / "nvidia-devices")],
    ):
        for personality in (
            ["--personality", "nvidia", "--config", str(files / "devices.yaml")],
            ["--config", str(files / "nvidia.yaml")],
        ):
            code, out = _simulate(files, *personality, *extra, "--native-dir", str(files))
            assert code == 1 and "not installing the simulated NVIDIA driver" in out, out
            assert len(out.strip().splitlines()) == 1
    assert not (files / "dev").exists() and not (files / "root").exists()


def test_cli_needs_the_native_build(files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SRO_SIMNVML_DIR", str(files / "no-build"))
    code, out = _simulate(
        files, "--config", str(files / "nvidia.yaml"), "--proc-devices", str(files / "proc-devices")
    )
    assert (
        code == 1
        and f"{files}/no-build: no libnvidia-ml.so.1 or nvidia-smi" in out
        and "sro local image" in out
    )
    assert not (files / "dev").exists()


def test_cli_flags(files: Path) -> None:
    code, out = _simulate(files, "--personality", "amd", "--config", str(files / "devices.yaml"))
    assert code == 2 and "'amd' is not one of 'simgpu', 'nvidia'" in out
    code, out = _simulate(files, "--config", str(files / "nvidia.yaml"), "--major", "121")
    assert code == 2 and "--major is for the simgpu personality" in out
    # the flag wins over the config: simgpu on an nvidia config needs no native build (it then makes
    # nodes, which needs root: stop at the refused major to stay unprivileged)
    code, out = _simulate(
        files, "--config", str(files / "nvidia.yaml"), "--personality", "simgpu", "--major", "120",
        "--proc-devices", str(files / "proc-devices"),
    )  # fmt: skip
    assert code == 1 and "--major 120: a kernel driver already owns it" in out
    (files / "bad.yaml").write_text("personality: [x]\n")
    code, out = _simulate(files, "--config", str(files / "bad.yaml"))
    assert code == 1 and f"{files}/bad.yaml: personality: expected one of" in out
    code, out = _simulate(files, "--remove", "--personality", "nvidia")
    assert code == 0 and "removed 0 simulated driver files" in out
