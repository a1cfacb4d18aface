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


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    c = LocalCluster.default()
    started = c.ensure_up(_progress)
    try:
        yield c
    finally:
        if started:
            c.down()


@pytest.fixture(scope="session")
def sro_image(cluster: LocalCluster) -> str:
    """localhost/sro:<version> with this checkout installed, imported into the cluster's containerd."""
    return ensure_sro_image(cluster, _progress)
