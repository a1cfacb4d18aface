"""The exporter's prime ends once the health event source has delivered what is active now, not
after a fixed sleep: its start (and with it the monitoring state on every node, issue 26) no longer
pays 0.3 s for nothing, and a device faulted before the start is still never reported healthy."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sro.devices import driverstate
from sro.devices.model import HealthEvent, Inventory
from sro.node.exporter.collecting import Collector
from tests.unit.exporter_support import collector, driver_root


@pytest.fixture
def tmp() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="sro-exporter-prime-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_prime_ends_once_the_fault_at_start_is_delivered(tmp: Path) -> None:
    root = driver_root(tmp)
    uuid = next(iter(driverstate.read_inventory(root).devices)).uuid
    driverstate.set_fault(root, uuid, 79)
    c = collector(root)
    try:
        t0 = time.monotonic()
        c.prime(5.0)
        took = time.monotonic() - t0
        text = c.collect().text.decode()
    finally:
        c.close()
    assert took < 1.0, f"prime waited {took:.2f} s: not for the source's first look"
    healthy = [line for line in text.splitlines() if line.startswith("sro_device_healthy{")]
    assert any(f'UUID="{uuid}"' in line and line.endswith(" 0") for line in healthy), healthy


class SilentBackend:
    """A source that never waits on its stop flag (as NVML blocks in its own wait)."""

    name = "silent"

    def inventory(self) -> Inventory:
        return Inventory(backend="silent", devices=())

    def inventory_token(self) -> object:
        return 0

    def events(self, stop: threading.Event) -> Iterator[HealthEvent]:
        while not stop.is_set():
            time.sleep(0.01)
        yield from ()

    def close(self) -> None:
        pass


def test_a_source_that_never_waits_gets_the_whole_prime() -> None:
    c = Collector(lambda: (SilentBackend(), None), domain="sro.dev", hostname="n", simulated=False)  # type: ignore[arg-type,return-value]
    try:
        t0 = time.monotonic()
        c.prime(0.3)
        assert time.monotonic() - t0 >= 0.29
    finally:
        c.close()
