"""The one local cluster every e2e test shares.

The session fixture reuses a healthy cluster when one is already up (a developer's), otherwise brings
one up and takes it down again at the end. Each test cleans up the objects it creates.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sro.local.cluster import LocalCluster
from sro.local.images import ensure_sro_image


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    c = LocalCluster.default()
    started = c.ensure_up()
    try:
        yield c
    finally:
        if started:
            c.down()


@pytest.fixture(scope="session")
def sro_image(cluster: LocalCluster) -> str:
    """localhost/sro:<version> with this checkout installed, imported into the cluster's containerd."""
    return ensure_sro_image(cluster)
