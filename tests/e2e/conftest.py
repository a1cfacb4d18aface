"""The one local cluster every e2e test shares.

The session fixture reuses a healthy cluster when one is already up (a developer's), otherwise brings
one up and takes it down again at the end. Each test cleans up the objects it creates.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pytest

from sro.local.cluster import LocalCluster
from sro.local.images import ensure_sro_image

_T0 = time.monotonic()


def _progress(message: str) -> None:
    """Long set-up steps (a first Kubernetes build takes minutes) show in the test output."""
    print(f"[e2e {time.monotonic() - _T0:6.1f}s] {message}", file=sys.__stderr__, flush=True)


def _wait_for_terminating_namespaces(c: LocalCluster) -> None:
    """A reused cluster may still be deleting an earlier run's namespaces (sro-system, a test's): tests
    that create objects there would be refused ("being terminated"), so the session starts after them."""
    out = c.kubectl(
        "get",
        "namespaces",
        "-o",
        "jsonpath={range .items[?(@.status.phase=='Terminating')]}{.metadata.name} {end}",
    )
    for name in out.stdout.split():
        _progress(f"Waiting for namespace {name}, still terminating, to be gone")
        c.kubectl("wait", "--for=delete", f"namespace/{name}", "--timeout=300s", check=False, timeout=330)


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    c = LocalCluster.default()
    started = c.ensure_up(_progress)
    _wait_for_terminating_namespaces(c)
    try:
        yield c
    finally:
        if started:
            c.down()


@pytest.fixture(scope="session")
def sro_image(cluster: LocalCluster) -> str:
    """localhost/sro:<version> with this checkout installed, imported into the cluster's containerd."""
    return ensure_sro_image(cluster, _progress)
