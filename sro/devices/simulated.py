"""The `simulated` device backend: devices and faults of the simulated driver on this host.

Why polling a stat(): fault injection replaces the fault file atomically, so a new inode/mtime is
the whole change signal; one stat every 100 ms costs nothing and keeps a fault-to-event delay well
under the one second the device plugin promises, with no inotify dependency and nothing to leak.
The backend reads only the driver root it is given (a host path, or where a container mounts it).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from sro.api.recipes import SIMULATED_DEVICE_LIST, SIMULATED_FAULTS
from sro.devices import driverstate
from sro.devices.model import DeviceUUID, HealthEvent, Inventory

log = logging.getLogger(__name__)


def fault_events(
    before: dict[DeviceUUID, driverstate.Fault], after: dict[DeviceUUID, driverstate.Fault], at: float
) -> list[HealthEvent]:
    """The health events that turn fault state `before` into `after` (pure)."""
    events = []
    for uuid, fault in sorted(after.items()):
        if before.get(uuid) != fault:
            events.append(HealthEvent("xid", uuid, at, xid=fault.xid, sticky=True, message=fault.message))
    for uuid in sorted(set(before) - set(after)):
        events.append(HealthEvent("cleared", uuid, at, message="fault cleared"))
    return events


class SimulatedBackend:
    name = "simulated"

    def __init__(self, driver_root: Path, poll_interval: float = 0.1) -> None:
        self.driver_root = driver_root
        self.poll_interval = poll_interval

    def inventory(self) -> Inventory:
        return driverstate.read_inventory(self.driver_root)

    def inventory_token(self) -> object:
        """The device list's identity: a re-run of `sro driver simulate` changes it."""
        return self._identity(SIMULATED_DEVICE_LIST)

    def _identity(self, name: str = SIMULATED_FAULTS) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.driver_root / name)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def events(self, stop: threading.Event) -> Iterator[HealthEvent]:
        known: dict[DeviceUUID, driverstate.Fault] = {}
        seen: tuple[int, int, int] | bool | None = False  # False: not looked yet
        while not stop.is_set():
            ident = self._identity()
            if ident != seen:
                seen = ident
                try:
                    current = driverstate.read_faults(self.driver_root)
                except (driverstate.DriverStateError, OSError) as e:
                    # keep the last good state rather than flap every device on a bad edit
                    log.error("simulated backend: ignoring unreadable fault state: %s", e)
                else:
                    yield from fault_events(known, current, time.monotonic())
                    known = current
            stop.wait(self.poll_interval)

    def close(self) -> None:
        pass
