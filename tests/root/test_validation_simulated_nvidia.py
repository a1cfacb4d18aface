"""`sro validate driver` and the workload's NVML check on the real simulated NVIDIA driver.

The driver is installed for real (`sro driver simulate`, the NVIDIA personality, the devices of
examples/simulated-nvidia.yaml) into temp driver and dev roots, with the compiled libnvidia-ml.so.1
and nvidia-smi. Then the driver validation runs as its pod runs it (`--simulated-driver`, the driver
root and /dev seen elsewhere) and as a person would on the node (found from the NVML state file); a
missing /dev/nvidia<minor> makes it fail. The workload's NVML check loads the library by soname in
a process whose /dev holds only the granted GPU's node, as the runtime hook leaves a container.
Each client runs in its own process: NVML's state is process-wide.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sro.devices import driverstate, simulated_nvidia
from sro.local.native import NATIVE_DIR, NativeBuildError, SimNvmlBuild
from sro.node.validation import tools
from tests.simnvml import make_nodes, simnvml_build  # noqa: F401  (a fixture, asked for by name)

pytestmark = pytest.mark.root

PYTHON = str(Path(sys.prefix) / "bin" / "python")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "simulated-nvidia.yaml"


@pytest.fixture
def tree(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """The simulated NVIDIA driver installed under tmp_path/root and tmp_path/dev."""
    if os.geteuid() != 0:
        pytest.skip("device nodes need root")
    if not (NATIVE_DIR / "libnvidia-ml.c").exists():
        pytest.skip("no simulated NVML sources in this checkout")
    try:
        build: SimNvmlBuild = request.getfixturevalue("simnvml_build")
    except NativeBuildError as e:
        pytest.skip(f"the simulated NVML does not build here: {e}")
    if build.smi is None:
        pytest.skip("nvidia-smi is not built in this checkout")
    reason = simulated_nvidia.refusal("", Path("/proc/devices").read_text())
    if reason is not None:
        pytest.skip(f"this host has a real NVIDIA driver: {reason}")
    native = tmp_path / "native"
    native.mkdir()
    shutil.copy(build.library, native / "libnvidia-ml.so.1")
    shutil.copy(build.smi, native / "nvidia-smi")
    (tmp_path / "modules").write_text("snd 1 0 - Live 0x0\n")
    config = yaml.safe_load(EXAMPLE.read_text())["spec"]["driver"]["devicesConfig"]
    (tmp_path / "devices.yaml").write_text(config)
    _run(
        "-m", "sro", "driver", "simulate", "--config", str(tmp_path / "devices.yaml"),
        "--personality", "nvidia", "--driver-root", str(tmp_path / "root"), "--dev-root", str(tmp_path / "dev"),
        "--proc-modules", str(tmp_path / "modules"), "--native-dir", str(native),
    )  # fmt: skip
    return tmp_path


def _run(
    *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SRO_SIMNVML")}
    r = subprocess.run(
        [PYTHON, *args], capture_output=True, text=True, timeout=120, env={**clean, **(env or {})}
    )
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def _validate(tree: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return _run(
        "-m", "sro", "validate", "driver", "--recipe", "nvidia-gpu", *extra,
        "--driver-root", str(tree / "root"), "--dev-root", str(tree / "dev"),
        "--termination-log", str(tree / "termination-log"), check=False,
    )  # fmt: skip


def test_driver_validation_passes_on_the_simulated_driver(tree: Path) -> None:
    r = _validate(tree, "--simulated-driver")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1].startswith("driver validation passed (5 checks): recipe nvidia-gpu, SIMULATED driver")
    assert "PASS inventory: nvml backend: 4 devices, driver 550.90.07 (SIMULATED, not real hardware)" in lines
    assert any(x.startswith("PASS tool: `") and "nvidia-smi -L` lists 4 devices" in x for x in lines), lines
    assert "PASS simulated devices: NVML sees the 4 GPUs the simulated driver made" in lines
    assert (tree / "termination-log").read_text().startswith("driver validation passed (5 checks)")
    # on the node, by hand: the driver is found from its NVML state file
    assert _validate(tree).returncode == 0


def test_a_missing_device_node_fails_the_driver_validation(tree: Path) -> None:
    (tree / "dev" / "nvidia2").unlink()
    r = _validate(tree, "--simulated-driver")
    assert r.returncode == 1, r.stdout + r.stderr
    uuid = driverstate.read_inventory(tree / "root").devices[2].uuid
    assert r.stderr.splitlines()[0].startswith(f"simulated devices: NVML does not see {uuid}")


NVML_IN_A_CONTAINER = """
import ctypes, json, sys
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # where the hook's ldconfig would point the soname
from sro.node.validation import nvmlview
view = nvmlview.ask()
print(json.dumps({"error": view.error, "gpus": [[g.uuid, g.minor] for g in view.gpus], "driver": view.driver_version}))
"""


def test_nvml_in_a_container_granted_one_gpu_lists_exactly_it(tree: Path) -> None:
    granted = driverstate.read_inventory(tree / "root").devices[1]
    dev = make_nodes(tree / "container-dev", [granted.minor])  # the hook gives the container its node only
    lib = tree / "root/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
    env = {tools.SIMNVML_DEV_ROOT_ENV: str(dev)}
    r = _run("-c", NVML_IN_A_CONTAINER, str(lib), env=env)
    view = json.loads(r.stdout.splitlines()[-1])
    assert view == {"error": "", "gpus": [[granted.uuid, granted.minor]], "driver": "550.90.07"}
    smi = subprocess.run(
        [str(tree / "root/usr/bin/nvidia-smi"), "-L"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    assert [x.uuid for x in tools.parse_listing(smi.stdout)] == [granted.uuid], smi.stdout + smi.stderr
    # no node at all: NVML lists nothing, and the check says so
    empty = tree / "empty-dev"
    empty.mkdir()
    r = _run("-c", NVML_IN_A_CONTAINER, str(lib), env={tools.SIMNVML_DEV_ROOT_ENV: str(empty)})
    assert json.loads(r.stdout.splitlines()[-1])["gpus"] == []
