"""The simulated NVML library, compiled once per test session for the tests that load it.

Why a cache under /tmp keyed by the sources' hash: several test modules (and parallel helpers'
sessions) need the same compiled library; compiling costs seconds, the hash costs nothing, and a
changed source gets its own directory so no session sees another's half-written build.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from sro.local.native import SimNvmlBuild, build_simnvml, sources_digest

CACHE_ROOT = Path("/tmp/sro-simnvml-build")


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
