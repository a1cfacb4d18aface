"""The simulated NVML library for the tests that load it: built once, run in child processes.

Why a cache under /tmp keyed by the sources' hash: several test modules (and parallel sessions)
need the same compiled library; compiling costs seconds, the hash costs nothing, and a changed
source gets its own directory so no session sees another's half-written build.
Why child processes: the library's state is global to a process (as NVML's is), and a crash in
it must fail one test, not the test run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sro.local.native import SimNvmlBuild, build_simnvml, sources_digest

CACHE_ROOT = Path("/tmp/sro-simnvml-build")
NVIDIA_MAJOR = 195
# a hand-written state in the design's format: two A100s joined by NVLink, GPU 1 in MIG mode
FIXTURE = Path(__file__).parent / "fixtures" / "simnvml" / "two-a100.state"
UUID0 = "GPU-5f0e2b8a-0000-4000-8000-000000000000"
UUID1 = "GPU-5f0e2b8a-0000-4000-8000-000000000001"
MIG0 = "MIG-aaaaaaaa-0000-4000-8000-000000000000"
# the device list of the simulated NVIDIA driver that the state writer's tests render: four GPUs
# (an H100 at a set bus id, one in MIG mode with a set GI/CI), NVLinks, two NUMA nodes
WRITER_DOC = {
    "count": 4,
    "numaNodes": [0, 0, 1, 1],
    "nvlinks": [{"between": [0, 1], "links": 3}, {"between": [0, 2], "links": 2}],
    "devices": [
        {"product": "NVIDIA H100 80GB HBM3", "pciBusId": "0000:3b:00.0"},
        {"mig": [{"profile": "1g.5gb"}, {"profile": "3g.20gb", "gi": 5, "ci": 2}]},
    ],
}

# NVML's return codes (nvml.h; nvidia-ml-py has the same numbers)
SUCCESS, UNINITIALIZED, INVALID_ARGUMENT, NOT_SUPPORTED = 0, 1, 2, 3
NOT_FOUND, INSUFFICIENT_SIZE, DRIVER_NOT_LOADED, TIMEOUT = 6, 7, 9, 10
GPU_IS_LOST, ARGUMENT_VERSION_MISMATCH, UNKNOWN = 15, 25, 999


@pytest.fixture(scope="session")
def simnvml_build() -> SimNvmlBuild:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the simulated NVML library (apt-get install gcc)")
    final = CACHE_ROOT / sources_digest()[:16]
    if not (final / ".simnvml-build").exists():
        # built aside and renamed into place: a parallel session never sees a half-written build
        CACHE_ROOT.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="build-", dir=CACHE_ROOT))
        build_simnvml(staging)
        try:
            os.rename(staging, final)
        except OSError:  # another session got there first
            shutil.rmtree(staging, ignore_errors=True)
    return build_simnvml(final)


def make_nodes(dev: Path, minors: list[int] | tuple[int, ...]) -> Path:
    """NVIDIA's GPU nodes (/dev/nvidia<minor>, char 195:minor) under `dev`; skips unless root."""
    if os.geteuid() != 0:
        pytest.skip("device nodes need root (mknod)")
    dev.mkdir(parents=True, exist_ok=True)
    for m in minors:
        os.mknod(dev / f"nvidia{m}", 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, m))
    return dev


def run_python(code: str, argv: list[str], env: dict[str, str], timeout: float = 60) -> Any:
    """Run `code` in a fresh Python with `argv` and `env` (over this one's, less SRO_SIMNVML_*);
    the JSON its last stdout line holds. Fails the test on a crash or on anything on stderr (the
    library never prints unless SRO_SIMNVML_DEBUG is set)."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("SRO_SIMNVML")}
    child_env.update(env)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *argv],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"child died ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    assert proc.stderr == "", proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


# Loaded by every child: the library, a call helper, and `out` (printed as JSON at the end).
HARNESS = """
import ctypes, json, os, sys, time
L = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
def f(name, *args):
    fn = getattr(L, name)
    fn.restype = ctypes.c_int
    return fn(*args)
def handle(i):
    h = ctypes.c_void_p()
    rc = f("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(i), ctypes.byref(h))
    return rc, h
def by_uuid(u):
    h = ctypes.c_void_p()
    rc = f("nvmlDeviceGetHandleByUUID", u.encode(), ctypes.byref(h))
    return rc, h
def text(name, h, size=96):
    buf = ctypes.create_string_buffer(size)
    rc = f(name, h, buf, ctypes.c_uint(size))
    return [rc, buf.value.decode()]
def uint(name, h, *args):
    v = ctypes.c_uint(12345)
    rc = f(name, h, *args, ctypes.byref(v))
    return [rc, v.value]
def replace(path, content):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(content)
    os.replace(tmp, path)
out = {}
"""


def run_nvml(lib: Path, body: str, env: dict[str, str], timeout: float = 30) -> Any:
    """HARNESS + body against `lib` in a child process; its `out`."""
    code = HARNESS + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    return run_python(code, [str(lib)], env, timeout)


def fixture_env(tmp_path: Path) -> dict[str, str]:
    """The fixture state in a file of its own and device nodes for both of its GPUs."""
    state = tmp_path / "state"
    state.write_text(FIXTURE.read_text())
    dev = make_nodes(tmp_path / "dev", [0, 1])
    return {"SRO_SIMNVML_STATE": str(state), "SRO_SIMNVML_DEV_ROOT": str(dev)}


# The fixtures of the modules that run the library on FIXTURE. A module takes them by assigning them
# to its own names, `simnvml_build` too since `lib` asks for it (an import would make every test's
# parameter of that name a redefinition to ruff).
@pytest.fixture
def lib(simnvml_build: SimNvmlBuild) -> Path:
    """The compiled libnvidia-ml.so.1."""
    return simnvml_build.library


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """`fixture_env`: the fixture state and device nodes for both of its GPUs."""
    return fixture_env(tmp_path)
