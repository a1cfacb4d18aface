"""sro's simulated NVIDIA driver in a temp root, for the benchmarks of the `nvml` backend.

Why: the nvml backend (pynvml over the driver's libnvidia-ml.so.1) never ran anywhere without a GPU.
With the simulated NVIDIA driver it runs on any machine, the real client code over sro's compiled
NVML, so its figures (Allocate, the exporter's scrape and collection) are measured beside the
simulated backend's, in the same run, on the same devices. The driver is installed as a node runs
it: `sro driver simulate --personality nvidia --hold` (NVIDIA's device nodes under a temp dev root,
the library and nvidia-smi under a temp driver root, NVML's state rewritten every second), and
SIGTERM takes it all away. It needs root (device nodes), gcc (the library is compiled once per
source hash, in the cache the tests share) and no real NVIDIA driver; where one is missing, the
reason is returned instead and the nvml figures are left out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.harness import stop
from sro.devices import simulated_nvidia
from sro.local.native import STAMP_NAME, build_simnvml, sources_digest

CACHE_ROOT = Path("/tmp/sro-simnvml-build")  # the tests' cache (tests/simnvml.py): one build for both
DEV_ROOT_ENV = "SRO_SIMNVML_DEV_ROOT"  # where the library looks for /dev/nvidia<minor>


@dataclass(frozen=True)
class SimNvml:
    driver_root: Path
    dev_root: Path
    env: dict[str, str]  # for a process that loads the library: this dev root instead of /dev


def unavailable() -> str:
    """Why the simulated NVIDIA driver cannot be installed here ("" when it can)."""
    if os.geteuid() != 0:
        return "not root (the simulated driver makes device nodes)"
    if shutil.which("gcc") is None:
        return "no gcc to compile the simulated libnvidia-ml.so.1 (apt-get install gcc)"
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return "no nvidia-ml-py (pynvml) in this environment"
    reason = simulated_nvidia.refusal("", Path("/proc/devices").read_text())
    return f"a real NVIDIA driver is here: {reason}" if reason else ""


def native_build() -> Path:
    """The compiled library and nvidia-smi, built aside and renamed into place once per source hash."""
    final = CACHE_ROOT / sources_digest()[:16]
    if not (final / STAMP_NAME).exists():
        CACHE_ROOT.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="build-", dir=CACHE_ROOT))
        build_simnvml(staging)
        try:
            os.rename(staging, final)
        except OSError:  # a test session got there first
            shutil.rmtree(staging, ignore_errors=True)
    return final


@contextmanager
def installed(tmp: Path, config: dict[str, Any], timeout: float = 60) -> Iterator[SimNvml]:
    """The driver of `config` (a devices YAML document) under `tmp`, held until the block ends."""
    driver_root, dev_root = tmp / "nvdriver", tmp / "nvdev"
    (tmp / "nvdevices.yaml").write_text(yaml.safe_dump({**config, "personality": "nvidia"}))
    cmd = [
        sys.executable, "-m", "sro", "driver", "simulate", "--config", str(tmp / "nvdevices.yaml"),
        "--driver-root", str(driver_root), "--dev-root", str(dev_root), "--native-dir", str(native_build()),
        "--hold",
    ]  # fmt: skip
    log = tmp / "nvdriver.log"
    with log.open("w") as out:
        holder = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while not (driver_root / ".ready").exists():
            if holder.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"benchmark: the simulated NVIDIA driver did not come up: {log.read_text()}"
                )
            time.sleep(0.05)
        yield SimNvml(driver_root, dev_root, {**os.environ, DEV_ROOT_ENV: str(dev_root)})
    finally:
        stop(holder, 30)  # SIGTERM: the driver removes its nodes and files
