"""The simulated NVIDIA driver installed for one test, and NVML clients run on it or on real GPUs.

Why one helper: every test that puts a real NVML client (pynvml through the `nvml` backend, the
device plugin, the exporter, nvidia-smi, the OCI hook) on the simulated driver needs the same
set-up, done the product's way: `simulated_nvidia.install` (what `sro driver simulate --personality
nvidia` runs) into a temp driver root and dev root, with the library this checkout compiles
(`tests/simnvml.py`). The library finds its state from its own place in the driver root; only the
dev root differs from a node's (`SRO_SIMNVML_DEV_ROOT`), so that is all `env` adds.

`nvml_target` runs a test twice: on this machine's NVIDIA GPUs (marked `gpu`: skipped without one)
and on a simulated driver (not marked: it runs anywhere we are root and gcc exists). Where a real
NVIDIA driver is loaded the simulated variant skips: the install refuses, rightly.

Why clients run in child processes: NVML is process-global. pynvml loads one library per process
and keeps it, and the library fixes its state file and dev root at nvmlInit, so a test that opened
NVML in the pytest process would leave the next test talking to another test's driver (or, on a
GPU machine, to the simulated library instead of NVIDIA's). `sro` and `python_child` start a fresh
interpreter; `PluginProcess` runs `sro device-plugin` for gRPC tests against a fake kubelet.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from sro.devices import driverstate, simnvml_state, simulated_nvidia
from sro.devices.model import DeviceUUID, Inventory
from sro.local.native import SimNvmlBuild
from sro.node.deviceplugin import api_pb2_grpc
from sro.node.deviceplugin.server import socket_name
from tests.simnvml import simnvml_build  # noqa: F401  (re-exported: a test module imports both)

PYTHON = str(Path(sys.prefix) / "bin" / "python")  # the venv's interpreter, found by prefix
DEV_ROOT_ENV = "SRO_SIMNVML_DEV_ROOT"
STATE_ENV = "SRO_SIMNVML_STATE"

# Four A100s on two NUMA nodes, two NVLink islands (0-1 and 2-3): the topology the tests reason on.
FOUR_GPUS: Mapping[str, Any] = {
    "count": 4,
    "numaNodes": [0, 0, 1, 1],
    "nvlinkIslands": [[0, 1], [2, 3]],
    "nvlinkLinks": 4,
}


def child_env(dev_root: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (DEV_ROOT_ENV, STATE_ENV)}
    if dev_root is not None:  # the state is found from the library's place in the driver root
        env[DEV_ROOT_ENV] = str(dev_root)
    return env


@dataclass(frozen=True)
class NvmlTarget:
    """Where NVML clients run: this machine's own NVIDIA driver (`driver_root` None: the loader
    finds NVIDIA's library) or an installed simulated NVIDIA driver."""

    env: Mapping[str, str]
    driver_root: Path | None = None
    dev_root: Path | None = None
    inventory: Inventory | None = None  # the simulated driver's own record of its devices

    @property
    def simulated(self) -> bool:
        return self.driver_root is not None

    def driver_args(self) -> list[str]:
        """`--driver-root` for sro's commands: where the NVML library is (none: the host's)."""
        return [] if self.driver_root is None else ["--driver-root", str(self.driver_root)]

    def sro(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """`sro ARGS` in a child process that sees this driver (not checked: the caller asserts)."""
        return subprocess.run(
            [PYTHON, "-m", "sro", *args], capture_output=True, text=True, env=dict(self.env), timeout=timeout
        )

    def python_child(self, code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """`python -c CODE ARGS` in a fresh interpreter (a fresh NVML) that sees this driver."""
        return subprocess.run(
            [PYTHON, "-c", code, *args], capture_output=True, text=True, env=dict(self.env), timeout=timeout
        )


@dataclass(frozen=True)
class SimNvmlDriver(NvmlTarget):
    """An installed simulated NVIDIA driver, with the fault injection `sro simulate fault` does."""

    driver_root: Path = field(default=Path())
    dev_root: Path = field(default=Path())
    inventory: Inventory = field(default_factory=lambda: Inventory("nvml", ()))

    def uuids(self) -> list[DeviceUUID]:
        return [d.uuid for d in self.inventory.devices]

    def _uuid(self, device: int | str) -> DeviceUUID:
        return self.inventory.devices[device].uuid if isinstance(device, int) else DeviceUUID(device)

    def set_fault(self, device: int | str, xid: int = 79) -> None:
        """What `sro simulate fault --device D --xid X` does (D an index or a GPU/MIG UUID): the
        fault, then NVML's state at once."""
        driverstate.set_fault(self.driver_root, self._uuid(device), xid)
        simnvml_state.write_state(self.driver_root)

    def clear_fault(self, device: int | str) -> None:
        """What `sro simulate fault --device D --clear` does."""
        driverstate.clear_faults(self.driver_root, [self._uuid(device)])
        simnvml_state.write_state(self.driver_root)

    @property
    def state_file(self) -> Path:
        return simnvml_state.state_path(self.driver_root)


def can_install() -> str | None:
    """Why the simulated NVIDIA driver cannot be installed on this machine (None: it can)."""
    if os.geteuid() != 0:
        return "needs root: mknod of NVIDIA's device nodes"
    try:
        modules = Path("/proc/modules").read_text()
    except FileNotFoundError:  # a kernel without modules
        modules = ""
    reason = simulated_nvidia.refusal(modules, Path("/proc/devices").read_text())
    return None if reason is None else f"the simulated NVIDIA driver is not installed here: {reason}"


def install(base: Path, build: SimNvmlBuild, config: Mapping[str, Any] = FOUR_GPUS) -> SimNvmlDriver:
    """Install the simulated NVIDIA driver described by `config` (the devices YAML, as a mapping)
    into `base`/root and `base`/dev, as `sro driver simulate --personality nvidia` does."""
    if build.smi is None:
        pytest.skip("native/simnvml/nvidia-smi.c is missing: the simulated driver needs nvidia-smi")
    modules = ""  # can_install has checked /proc/modules
    inv = simulated_nvidia.parse(dict(config))
    root, dev = base / "root", base / "dev"
    native = simulated_nvidia.NativeBuild(build.library, build.smi)
    done = simulated_nvidia.install(inv, root, dev, Path("/proc/devices").read_text(), modules, native)
    return SimNvmlDriver(env=child_env(dev), driver_root=root, dev_root=dev, inventory=done.inventory)


@pytest.fixture
def simnvml_driver(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., SimNvmlDriver]]:
    """Installs a simulated NVIDIA driver per call (`simnvml_driver(config)`), removed afterwards.
    The test module imports `simnvml_build` too (this asks for it by name)."""
    why = can_install()
    if why is not None:
        pytest.skip(why)
    build: SimNvmlBuild = request.getfixturevalue("simnvml_build")
    made: list[SimNvmlDriver] = []

    def make(config: Mapping[str, Any] = FOUR_GPUS) -> SimNvmlDriver:
        driver = install(tmp_path_factory.mktemp("simnvml"), build, config)
        made.append(driver)
        return driver

    yield make
    for driver in made:
        simulated_nvidia.remove(driver.driver_root, driver.dev_root)


@pytest.fixture(params=[pytest.param("gpu", marks=pytest.mark.gpu), "simulated"])
def nvml_target(request: pytest.FixtureRequest) -> NvmlTarget:
    """This machine's NVIDIA GPUs (the `gpu` variant) or a simulated driver with FOUR_GPUS."""
    if request.param == "gpu":
        return NvmlTarget(env=child_env(None))
    make: Callable[..., SimNvmlDriver] = request.getfixturevalue("simnvml_driver")
    return make()


class PluginProcess:
    """`sro -v device-plugin --recipe nvidia-gpu` in a child process (its own NVML), logging to a file."""

    def __init__(self, target: NvmlTarget, plugin_dir: Path, config: str | None = None) -> None:
        self.plugin_dir = plugin_dir
        plugin_dir.mkdir(parents=True, exist_ok=True)
        args = ["--plugin-dir", str(plugin_dir), *target.driver_args()]
        if config is not None:
            path = plugin_dir.parent / "plugin-config.yaml"
            path.write_text(config)
            args += ["--config", str(path)]
        self.log_path = plugin_dir.parent / "plugin.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [PYTHON, "-m", "sro", "-v", "device-plugin", "--recipe", "nvidia-gpu", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(target.env),
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stub(self, resource: str = "nvidia.com/gpu") -> Any:
        channel = grpc.insecure_channel(f"unix://{self.plugin_dir / socket_name(resource)}")
        return api_pb2_grpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call]

    def stop(self) -> int:
        """SIGTERM, as the kubelet stops a pod; the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def wait_for(cond: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> float:
    """Seconds until `cond()` is true; AssertionError naming `what` after `timeout`."""
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not met within {timeout:.0f}s")
        time.sleep(0.01)
    return time.monotonic() - start
