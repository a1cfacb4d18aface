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
